"""Bad CoNLL / word<TAB>tag files: each is one InputError naming file:line, or with
skip_bad_rows the sentence holding the bad line is skipped and listed."""

import re

import pytest

from recurrent_bert.errors import InputError
from recurrent_bert.tasks.tagging import conll

GOOD_CONLL = "-DOCSTART- -X- -X- O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\n\n"
GOOD_WORD_TAG = "EU\tI-ORG\nrejects\tO\n\n"

# name → (reader, keyword arguments, file content, line of the error, what the message says)
CASES = {
    "too few columns for the tag column": (
        "conll",
        dict(tag_column=3),
        "EU NNP I-NP\n",
        1,
        "found 3 space-separated columns, but the tag column (3) needs at least 4",
    ),
    "too few columns for a negative tag column": (
        "conll",
        dict(tag_column=-3),
        "EU NNP O\n",
        1,
        "found 3 space-separated columns, but the tag column (-3) needs at least 4",
    ),
    "only the word in a labeled file": ("conll", {}, GOOD_CONLL + "Peter\n", 6, "needs at least 2"),
    "column count differs from the first token line": (
        "conll",
        {},
        GOOD_CONLL + "Peter NNP I-PER\n",
        6,
        "found 3 space-separated columns, but line 3 has 4",
    ),
    "column count differs in an unlabeled file": (
        "conll",
        dict(labeled=False),
        GOOD_CONLL + "Peter NNP I-PER\n",
        6,
        "but line 3 has 4",
    ),
    "tag not in the label list": (
        "conll",
        dict(label_list=conll.CONLL2003_TAGS),
        GOOD_CONLL + "Peter NNP I-NP I-PERSON\n",
        6,
        "tag 'I-PERSON' is not in the label list O, B-PER",
    ),
    "tag without a prefix": ("conll", {}, GOOD_CONLL + "x NN I-NP PER\n", 6, "tag 'PER' is not O"),
    "tag without a type": ("conll", {}, GOOD_CONLL + "x NN I-NP B-\n", 6, "tag 'B-' is not O"),
    "BILOU tag": ("word_tag", {}, GOOD_WORD_TAG + "x\tU-PER\n", 4, "tag 'U-PER' is not O"),
    "lower-case tag": ("word_tag", {}, GOOD_WORD_TAG + "x\to\n", 4, "tag 'o' is not O"),
    "word with a space": (
        "word_tag",
        {},
        GOOD_WORD_TAG + "New York\tB-LOC\n",
        4,
        "word 'New York' contains whitespace",
    ),
    "empty word": ("word_tag", {}, GOOD_WORD_TAG + "\tO\n", 4, "empty word"),
    "three columns in a word-tag file": (
        "word_tag",
        {},
        "a\tB-PER\tx\n",
        1,
        "expected word and tag (2 tab-separated columns), found 3",
    ),
    "words only in a labeled word-tag file": (
        "word_tag",
        {},
        "a\n",
        1,
        "expected word and tag (2 tab-separated columns), found 1",
    ),
    "a line without its tag in an unlabeled file": (
        "word_tag",
        dict(labeled=False),
        GOOD_WORD_TAG + "x\n",
        4,
        "found 1 tab-separated column, but line 1 has 2",
    ),
    "not UTF-8": ("conll", {}, GOOD_CONLL.encode() + b"caf\xe9 NN I-NP O\n", 6, "not valid UTF-8"),
}


def write(tmp_path, content, name):
  path = tmp_path / name
  path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
  return str(path)


def read(reader, path, **kwargs):
  return (conll.read_conll if reader == "conll" else conll.read_word_tag)(path, **kwargs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_line_names_file_and_line(tmp_path, name):
  reader, kwargs, content, line, message = CASES[name]
  path = write(tmp_path, content, "bad.txt")
  with pytest.raises(InputError) as error:
    read(reader, path, **kwargs)
  assert str(error.value).startswith(f"{path}:{line}: ")
  assert message in str(error.value)


@pytest.mark.parametrize("name", sorted(CASES))
def test_skip_bad_rows_skips_the_sentence(tmp_path, name):
  reader, kwargs, content, line, message = CASES[name]
  if line == 1:  # the only sentence of its file is bad: nothing left to read
    path = write(tmp_path, content, "bad.txt")
    with pytest.raises(InputError, match=f"no usable example: all 1 rows are bad, e.g. {path}:1"):
      read(reader, path, skip_bad_rows=True, **kwargs)
    return
  # The bad sentence (its good first line, the bad line, one more line) between good ones.
  good = GOOD_CONLL if reader == "conll" else GOOD_WORD_TAG
  first = good.splitlines()[-2] + "\n"
  raw = content if isinstance(content, bytes) else content.encode("utf-8")
  bad_line = raw.splitlines()[line - 1] + b"\n"
  text = good.encode() + first.encode() + bad_line + first.encode() + b"\n" + good.encode()
  path = write(tmp_path, text, "bad.txt")
  data = read(reader, path, skip_bad_rows=True, **kwargs)
  bad_line_number = len(good.splitlines()) + 2
  assert len(data.skipped) == 1
  assert data.skipped[0].startswith(f"{path}:{bad_line_number}: ") and message in data.skipped[0]
  assert data.skipped[0].endswith("; its sentence is skipped")
  clean = read(reader, write(tmp_path, good + good, "good.txt"), **kwargs)
  assert [s.words for s in data.examples] == [s.words for s in clean.examples]


@pytest.mark.parametrize(
    "content",
    ["", "\n\n", "\r\n", "-DOCSTART- -X- -X- O\n\n", "-DOCSTART- -X- -X- O\n\n-DOCSTART- O"],
)
def test_a_file_without_sentences(tmp_path, content):
  path = write(tmp_path, content, "empty.txt")
  for reader in ("conll", "word_tag"):
    with pytest.raises(InputError, match=f"^{re.escape(path)}: no sentences"):
      read(reader, path)


def test_bad_arguments(tmp_path):
  path = write(tmp_path, GOOD_CONLL, "good.txt")
  with pytest.raises(InputError, match="tag column 0 is the word column"):
    conll.read_conll(path, tag_column=0)
  with pytest.raises(InputError, match="label list: tag 'PER' is not O"):
    conll.read_conll(path, label_list=["O", "PER"])
  with pytest.raises(InputError, match="cannot read input file"):
    conll.read_conll(str(tmp_path / "missing.txt"))
