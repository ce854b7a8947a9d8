"""Issue 15 on custom TSV tasks: headers by known names only, every bad row refused with
file:line (or skipped and counted), labels collected only from good rows.

Expected examples are built from the rows the test wrote, by column name.
"""

from hypothesis import given
from hypothesis import strategies as st
import pytest

from recurrent_bert.errors import InputError
from recurrent_bert.tasks.classification import adapter as classification
from recurrent_bert.tasks.classification import custom_task
from tests.support import mutations

LABELS = ["neg", "pos"]


def write(tmp_path, name, content):
  path = tmp_path / name
  if isinstance(content, bytes):
    path.write_bytes(content)
  else:
    path.write_text(content, encoding="utf-8", newline="")
  return str(path)


def tsv(*rows):
  return "".join("\t".join(row) + "\n" for row in rows)


def tuples(data):
  return [(e.text_a, e.text_b, e.label, e.index) for e in data.examples]


def test_non_utf8_byte_names_file_and_line(tmp_path):
  # The campaign's "'utf-8' codec can't decode byte 0xe9 in position 81", without a place.
  path = write(tmp_path, "train.tsv", b"sentence\tlabel\nok\tpos\ncaf\xe9\tneg\n")
  with pytest.raises(InputError, match=f"^{path}:3: not valid UTF-8"):
    custom_task.infer_label_list(str(tmp_path))
  with pytest.raises(InputError, match=f"^{path}:3: not valid UTF-8"):
    custom_task.read_custom(str(tmp_path), "train", LABELS)
  path = write(tmp_path, "train.tsv", b"sent\xe9nce\tlabel\nok\tpos\n")
  with pytest.raises(InputError, match=f"^{path}:1: not valid UTF-8"):
    custom_task.infer_label_list(str(tmp_path))


def test_header_with_one_column_more_than_the_rows(tmp_path):
  # Used to skip every row silently, then "needs at least 2 labels, got []".
  path = write(
      tmp_path, "train.tsv", tsv(["index", "sentence", "label"], ["a", "pos"], ["b", "neg"])
  )
  with pytest.raises(InputError, match=f"^{path}:2: expected 3 tab-separated columns, found 2"):
    custom_task.infer_label_list(str(tmp_path))


@pytest.mark.parametrize(
    "header, message",
    [
        # Used to drop the second sentence silently.
        (["sentence1", "sentence_2"], "header column 2 is 'sentence_2', not one of the known"),
        (["sentence", "label", "notes"], "header column 3 is 'notes'"),
        (["sentence", "label", ""], "header column 3 is ''"),
        (["sentence", "label", "label"], "names column 'label' twice"),
        (["sentence", "sentence1"], "both 'sentence' and 'sentence1'"),
        ([""], "empty header"),
    ],
)
def test_unknown_or_repeated_header_columns_are_refused(tmp_path, header, message):
  path = write(tmp_path, "test.tsv", tsv(header, ["a"] * len(header)))
  with pytest.raises(InputError) as error:
    custom_task.read_custom(str(tmp_path), "test", LABELS)
  assert str(error.value).startswith(f"{path}:1: ")
  assert message in str(error.value)
  if "not one of" in message:
    assert "sentence, sentence1, sentence2, label, index" in str(error.value)


def test_test_file_without_the_second_text_of_train(tmp_path):
  write(tmp_path, "train.tsv", tsv(["sentence1", "sentence2", "label"], ["a", "b", "pos"]))
  path = write(tmp_path, "test.tsv", tsv(["sentence1"], ["a"]))
  with pytest.raises(InputError, match=f"^{path}:1: header has no 'sentence2' column"):
    custom_task.read_custom(str(tmp_path), "test", LABELS)


@pytest.mark.parametrize(
    "rows, line, message",
    [
        ([["1", "a", "pos"], ["1", "b", "neg"]], 3, "index '1' repeats line 2"),
        ([["1", "a", "pos"], ["index", "sentence", "label"]], 3, "the header line again"),
        ([["1", "a", "pos"], ["", "b", "neg"]], 3, "empty index"),
        ([["1", "a", "pos"], ["2", "b", ""]], 3, "empty label"),
    ],
)
def test_bad_rows_while_collecting_labels(tmp_path, rows, line, message):
  path = write(tmp_path, "train.tsv", tsv(["index", "sentence", "label"], *rows))
  with pytest.raises(InputError, match=f"^{path}:{line}: {message}"):
    custom_task.infer_label_list(str(tmp_path))


def test_one_label_names_the_train_file(tmp_path):
  path = write(tmp_path, "train.tsv", tsv(["sentence", "label"], ["a", "pos"], ["b", "pos"]))
  with pytest.raises(InputError, match=f"^{path}: a classification task needs at least 2"):
    custom_task.infer_label_list(str(tmp_path))


def test_skip_bad_rows_collects_labels_of_good_rows_only(tmp_path):
  path = write(
      tmp_path,
      "train.tsv",
      tsv(["sentence", "label"], ["a", "pos"], ["b", "neg", "x"], ["c", "neg"], ["d"]),
  )
  assert custom_task.infer_label_list(str(tmp_path), skip_bad_rows=True) == LABELS
  data = custom_task.read_custom(str(tmp_path), "train", LABELS, skip_bad_rows=True)
  assert tuples(data) == [("a", None, "pos", "2"), ("c", None, "neg", "4")]
  assert [m.split(": ")[0] for m in data.skipped] == [f"{path}:3", f"{path}:5"]


# ---- The property: a valid file, one mutation, the invariant of issue 15. ----

WORDS = st.text(alphabet='abcxyz "é東', min_size=1, max_size=8).filter(lambda t: t.strip())
COLUMN_ORDERS = [
    ("index", "sentence1", "sentence2", "label"),
    ("label", "sentence", "index"),
    ("sentence2", "label", "sentence1"),
]


@st.composite
def custom_file(draw):
  """(header, rows as {column: value}) of a valid dev file."""
  header = draw(st.sampled_from(COLUMN_ORDERS))
  rows = []
  for i in range(draw(st.integers(2, 5))):
    rows.append(
        {
            "index": f"id-{i}",
            "sentence": draw(WORDS),
            "sentence1": draw(WORDS),
            "sentence2": draw(WORDS),
            "label": draw(st.sampled_from(LABELS)),
        }
    )
  return header, rows


def expected_example(header, row, line):
  """(text_a, text_b, label, index) by column name; the line number when no index."""
  text_a = row["sentence"] if "sentence" in header else row["sentence1"]
  text_b = row["sentence2"] if "sentence2" in header else None
  return (text_a, text_b, row["label"], row["index"] if "index" in header else str(line))


def line_of(header, row):
  return "\t".join(row[name] for name in header)


MUTATIONS = [
    "bad_label",
    "extra_column",
    "missing_column",
    "duplicate_line",
    "repeated_header",
    "unknown_column",
    "non_utf8",
    "crlf",
    "blank_line",
    "no_final_newline",
]


@mutations.fuzz_settings()
@given(custom_file(), st.sampled_from(MUTATIONS), st.data())
def test_property_custom_tsv_mutations(tmp_path, file, mutation, data):
  header, rows = file
  k = data.draw(st.integers(0, len(rows) - 1), label="row")
  line = k + 2
  content = tsv(header, *[[row[name] for name in header] for row in rows]).encode()
  expected = [expected_example(header, row, n + 2) for n, row in enumerate(rows)]
  refused_at = None
  if mutation == "bad_label":
    row = dict(rows[k], label=data.draw(st.sampled_from(mutations.BAD_NUMBERS)))
    content = mutations.replace_line(content, line - 1, line_of(header, row).encode())
    refused_at = line
  elif mutation == "extra_column":
    content = mutations.replace_line(content, line - 1, (line_of(header, rows[k]) + "\tx").encode())
    refused_at = line
  elif mutation == "missing_column":
    short = line_of(header, rows[k]).rsplit("\t", 1)[0]
    content = mutations.replace_line(content, line - 1, short.encode())
    refused_at = line
  elif mutation == "duplicate_line":
    content = mutations.insert_line(content, line, line_of(header, rows[k]).encode())
    if "index" in header:
      refused_at = line + 1
    else:  # no ids: the same text twice is two examples (the line number is the index)
      expected.insert(k + 1, (*expected[k][:3], str(line + 1)))
      expected[k + 2 :] = [(*e[:3], str(int(e[3]) + 1)) for e in expected[k + 2 :]]
  elif mutation == "repeated_header":
    content = mutations.insert_line(content, line - 1, "\t".join(header).encode())
    refused_at = line
  elif mutation == "unknown_column":
    name = data.draw(st.sampled_from(["sentence_2", "Label", "text", "id", "label "]))
    renamed = [name if i == k % len(header) else h for i, h in enumerate(header)]
    content = mutations.replace_line(content, 0, "\t".join(renamed).encode())
    refused_at = 1
  elif mutation == "non_utf8":
    bad = data.draw(st.sampled_from(mutations.NON_UTF8))
    content = mutations.replace_line(content, line - 1, line_of(header, rows[k]).encode() + bad)
    refused_at = line
  elif mutation == "crlf":
    content = mutations.to_crlf(content)
  elif mutation == "blank_line":
    content = mutations.insert_line(content, line - 1, b"")
    # Blank lines hold no record, but they count: a line-numbered example moves down.
    expected[k:] = [e if "index" in header else (*e[:3], str(int(e[3]) + 1)) for e in expected[k:]]
  elif mutation == "no_final_newline":
    content = content.rstrip(b"\n")
  path = write(tmp_path, "dev.tsv", content)
  mutations.check_outcome(
      "custom tsv",
      lambda: tuples(custom_task.read_custom(str(tmp_path), "dev", LABELS)),
      path,
      expected=None if refused_at else expected,
      line=refused_at,
  )


# ---- Issue 31: labels with surrounding whitespace are the same class, as in GLUE. ----


def test_labels_with_surrounding_whitespace_are_the_clean_labels(tmp_path):
  # ' neg' used to become a third class; the clean file is the reference.
  rows = [["a", "neg"], ["b", "pos"], ["c", "neg"]]
  clean, spaced = tmp_path / "clean", tmp_path / "spaced"
  clean.mkdir(), spaced.mkdir()
  write(clean, "train.tsv", tsv(["sentence", "label"], *rows))
  write(spaced, "train.tsv", tsv(["sentence", "label"], ["a", " neg"], ["b", "pos"], ["c", "neg "]))
  assert custom_task.infer_label_list(str(spaced)) == LABELS
  want = tuples(custom_task.read_custom(str(clean), "train", LABELS))
  assert want == [("a", None, "neg", "2"), ("b", None, "pos", "3"), ("c", None, "neg", "4")]
  assert tuples(custom_task.read_custom(str(spaced), "train", LABELS)) == want
  # A given label list is stripped the same way (absl's --label_list parser strips too;
  # task_source's callers need not).
  source = classification.task_source("custom", str(spaced), label_list=[" neg", "pos "])
  assert source.spec.label_list == ("neg", "pos")
  assert tuples(source.read_split("train")) == want


@pytest.mark.parametrize(
    "label_list, message",
    [([" ", "pos"], "label 1 of .* is empty"), (["pos", " pos"], "label 'pos' is given twice")],
)
def test_label_list_empty_or_repeated_after_stripping_is_refused(tmp_path, label_list, message):
  write(tmp_path, "train.tsv", tsv(["sentence", "label"], ["a", "neg"], ["b", "pos"]))
  with pytest.raises(InputError, match=f"^--label_list: {message}"):
    classification.task_source("custom", str(tmp_path), label_list=label_list)


def test_label_empty_after_stripping_is_a_bad_row(tmp_path):
  path = write(
      tmp_path, "train.tsv", tsv(["sentence", "label"], ["a", "neg"], ["b", " "], ["c", "pos"])
  )
  with pytest.raises(InputError, match=f"^{path}:3: empty label$"):
    custom_task.infer_label_list(str(tmp_path))
  with pytest.raises(InputError, match=f"^{path}:3: empty label$"):
    custom_task.read_custom(str(tmp_path), "train", LABELS)
  assert custom_task.infer_label_list(str(tmp_path), skip_bad_rows=True) == LABELS
  data = custom_task.read_custom(str(tmp_path), "train", LABELS, skip_bad_rows=True)
  assert tuples(data) == [("a", None, "neg", "2"), ("c", None, "pos", "4")]
  assert data.skipped == [f"{path}:3: empty label"]
