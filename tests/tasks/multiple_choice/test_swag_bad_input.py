"""Bad SWAG CSV and multiple-choice JSONL input: one InputError naming file:line, or with
skip_bad_rows the row skipped and listed."""

import json

import pytest

from recurrent_bert.errors import InputError
from recurrent_bert.tasks.multiple_choice import swag

HEADER = (
    ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label"
)
GOOD = "{id},v,1,s,A cat,It,gold,runs.,eats.,sleeps.,sits.,1"
# Line 2 is good; line 3 starts a record whose quoted sent1 spans lines 3-4; the bad row
# under test is line 5.
PREFIX = [HEADER, GOOD.format(id=0), '1,v,1,s,"two\nlines",It,gold,a,b,c,d,0']


@pytest.mark.slow(seconds=22)
@pytest.mark.parametrize(
    "row, expected",
    [
        ("2,v,1,s,A cat,It,gold,runs.,eats.,sleeps.,1", "expected 12 columns"),
        ("2,v,1,s,A cat,It,gold,runs.,eats.,sleeps.,sits.,4", "label 4 is out of range"),
        ("2,v,1,s,A cat,It,gold,runs.,eats.,sleeps.,sits.,-1", "not an integer 0..3"),
        ("2,v,1,s,A cat,It,gold,runs.,eats.,sleeps.,sits.,x", "not an integer 0..3"),
        ("0,v,1,s,A cat,It,gold,runs.,eats.,sleeps.,sits.,1", "id '0' repeats line 2"),
        ("2,v,1,s,A cat,It,gold,runs.,  ,sleeps.,sits.,1", "empty ending1"),
        ("2,v,1,s,,It,gold,runs.,eats.,sleeps.,sits.,1", "empty sent1"),
        (",v,1,s,A cat,It,gold,runs.,eats.,sleeps.,sits.,1", "empty id"),
    ],
)
def test_bad_csv_row_names_file_and_line(tmp_path, row, expected):
  path = tmp_path / "val.csv"
  path.write_text("\n".join([*PREFIX, row, GOOD.format(id=9)]) + "\n", encoding="utf-8")
  with pytest.raises(InputError) as error:
    swag.read_swag_csv(str(path))
  assert str(error.value).startswith(f"{path}:5: "), str(error.value)
  assert expected in str(error.value)
  data = swag.read_swag_csv(str(path), skip_bad_rows=True)
  assert [e.guid for e in data.examples] == ["0", "1", "9"]
  assert len(data.skipped) == 1 and data.skipped[0].startswith(f"{path}:5: ")


def test_csv_line_that_is_not_utf8(tmp_path):
  path = tmp_path / "train.csv"
  lines = [*PREFIX, GOOD.format(id=2)]
  path.write_bytes(
      ("\n".join(lines) + "\n").encode("utf-8").replace(b"A cat,It", b"A c\xe9t,It", 2)
  )
  # The first "A cat" is on line 2.
  with pytest.raises(InputError, match=rf"^{path}:2: not valid UTF-8"):
    swag.read_swag_csv(str(path))


@pytest.mark.parametrize(
    "header, missing",
    [
        (HEADER.replace(",sent1,", ",sentence1,"), "'sent1'"),
        (HEADER.replace(",ending1", ",end1"), "'ending1'"),
        (HEADER[1:].replace("fold-ind", "fold"), "'fold-ind'"),
    ],
)
def test_csv_header_without_a_needed_column(tmp_path, header, missing):
  path = tmp_path / "val.csv"
  path.write_text(header + "\n" + GOOD.format(id=0) + "\n", encoding="utf-8")
  with pytest.raises(InputError, match=rf"^{path}:1: header lacks the column\(s\) .*{missing}"):
    swag.read_swag_csv(str(path))


def test_missing_split_file_and_empty_file(tmp_path):
  with pytest.raises(InputError, match="val.csv' does not exist"):
    swag.read_swag(str(tmp_path), "dev")
  (tmp_path / "train.csv").write_text("", encoding="utf-8")
  with pytest.raises(InputError, match=r"train.csv:1: empty file"):
    swag.read_swag(str(tmp_path), "train")
  (tmp_path / "test.csv").write_text(HEADER[:-6] + "\n", encoding="utf-8")
  with pytest.raises(InputError, match=r"test.csv: no examples"):
    swag.read_swag(str(tmp_path), "test")


def _line(**fields):
  return json.dumps({"id": 1, "context": "c", "choices": ["x", "y", "z"], "label": 0, **fields})


@pytest.mark.parametrize(
    "line, expected",
    [
        (_line(id=2, choices=["x", "y"]), "2 choices; every row of a file has the same number (3)"),
        (_line(id=2, label=3), "'label' should be an integer 0..2, got 3"),
        (_line(id=2, label=True), "'label' should be an integer 0..2, got true"),
        (_line(id=2, label="1"), "'label' should be an integer"),
        (_line(), "id '1' repeats line 1"),
        (_line(id=2, context=" "), "'context' should be a non-empty string"),
        (_line(id=2, choices=["x", "", "z"]), "choices[1] should be a non-empty string"),
        (_line(id=2, question=3), "'question' should be a non-empty string"),
        (_line(id=None), "'id' should be a non-empty string or an integer"),
        ('{"id": 2, "context": "c"}', "missing key 'choices'"),
        ('{"id": 2, "context": "c", "choices": ["x", "y", "z"]}', "no label, where line 1 has one"),
        ('{"id": 2, "id": 3}', "key 'id'"),
        ('{"id": 2,', "invalid JSON"),
        ("[1, 2]", "each line must be a JSON object"),
    ],
)
def test_bad_jsonl_line_names_file_and_line(tmp_path, line, expected):
  path = tmp_path / "dev.jsonl"
  path.write_text("\n".join([_line(), "", line, _line(id=3)]) + "\n", encoding="utf-8")
  with pytest.raises(InputError) as error:
    swag.read_choice_jsonl(str(path))
  assert str(error.value).startswith(f"{path}:3"), str(error.value)
  assert expected in str(error.value)
  data = swag.read_choice_jsonl(str(path), skip_bad_rows=True)
  assert [e.guid for e in data.examples] == ["1", "3"] and len(data.skipped) == 1


def test_jsonl_not_utf8_and_missing_file(tmp_path):
  path = tmp_path / "train.jsonl"
  text = _line() + "\n" + _line(id=2, context="cafX") + "\n"
  path.write_bytes(text.encode("utf-8").replace(b"cafX", b"caf\xe9"))
  with pytest.raises(InputError, match=rf"^{path}:2: not valid UTF-8"):
    swag.read_choice_jsonl(str(path))
  with pytest.raises(InputError, match="does not exist"):
    swag.read_choice_jsonl(str(tmp_path / "nope.jsonl"))
