"""Issue 15 on the GLUE readers: every bad row is refused with file:line, or skipped and
counted with skip_bad_rows; the official layouts' quirks stay readable.

Expected examples are written by hand or built from the rows the test wrote, with the
column positions of the GLUE files (not the reader's layout table).
"""

import json
import logging
import os
import sys

from hypothesis import given
from hypothesis import strategies as st
import pytest

from recurrent_bert.errors import InputError
from recurrent_bert.tasks.classification import adapter as classification
from recurrent_bert.tasks.classification import glue
from recurrent_bert.tasks.classification import registry
from recurrent_bert.tasks.classification import tfds_reader
from tests.support import forkserver
from tests.support import mutations

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STSB_HEADER = [
    "index",
    "genre",
    "filename",
    "year",
    "old_index",
    "source1",
    "source2",
    "sentence1",
    "sentence2",
    "score",
]
RTE_HEADER = ["index", "sentence1", "sentence2", "label"]
RTE_TEST_HEADER = ["index", "sentence1", "sentence2"]
QQP_HEADER = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]


def tsv(*rows):
  return "".join("\t".join(row) + "\n" for row in rows)


def stsb_row(index, score, a="a cat", b="a dog"):
  return [str(index), "g", "f", "y", "o", "s", "s", a, b, score]


def write(tmp_path, task, name, content):
  """Writes one file of a task folder (text, or bytes as they are); returns (folder, path)."""
  folder = tmp_path / registry.get_task(task).dir_name
  folder.mkdir(parents=True, exist_ok=True)
  path = folder / name
  if isinstance(content, bytes):
    path.write_bytes(content)
  else:
    path.write_text(content, encoding="utf-8", newline="")
  return str(folder), str(path)


def tuples(data):
  return [(e.text_a, e.text_b, e.label, e.index) for e in data.examples]


# The scores the fuzz campaign found accepted, and the rest of the shared bad numbers.
BAD_SCORES = sorted({"nan", "inf", "1e400", "6.0", "-1", "1_0", "０.５", *mutations.BAD_NUMBERS})


@pytest.mark.parametrize("score", BAD_SCORES)
def test_stsb_refuses_scores_that_are_not_decimals_from_0_to_5(tmp_path, score):
  folder, path = write(
      tmp_path, "stsb", "train.tsv", tsv(STSB_HEADER, stsb_row(0, "1.0"), stsb_row(1, score))
  )
  with pytest.raises(InputError) as error:
    glue.read_glue(folder, "stsb", "train")
  assert str(error.value).startswith(f"{path}:3: score {score!r} ")
  assert "from 0 to 5" in str(error.value)


def test_stsb_accepts_the_scale_ends_and_plain_decimals(tmp_path):
  rows = [stsb_row(i, s) for i, s in enumerate(["0", "5", "5.000", "0.25", ".5", "3."])]
  folder, _ = write(tmp_path, "stsb", "dev.tsv", tsv(STSB_HEADER, *rows))
  scores = [e.label for e in glue.read_glue(folder, "stsb", "dev").examples]
  assert scores == [0.0, 5.0, 5.0, 0.25, 0.5, 3.0]


@pytest.mark.parametrize(
    "task, name, content, line, message",
    [
        # Duplicate ids (the index / id column).
        (
            "rte",
            "train.tsv",
            tsv(RTE_HEADER, ["0", "a", "b", "entailment"], ["0", "c", "d", "entailment"]),
            3,
            "index '0' repeats line 2",
        ),
        (
            "qqp",
            "dev.tsv",
            tsv(QQP_HEADER, ["7", "1", "2", "a", "b", "0"], ["7", "3", "4", "c", "d", "1"]),
            3,
            "id '7' repeats line 2",
        ),
        # The header again, e.g. two test files concatenated.
        (
            "rte",
            "test.tsv",
            tsv(RTE_TEST_HEADER, ["0", "a", "b"], RTE_TEST_HEADER, ["1", "c", "d"]),
            3,
            "the header line again",
        ),
        # An index that is not a whole number.
        ("rte", "test.tsv", tsv(RTE_TEST_HEADER, ["x1", "a", "b"]), 2, "index 'x1'"),
        # MNLI's header gives its column count: an empty or short one is refused, no IndexError.
        ("mnli", "train.tsv", "\n", 1, "header has 1 columns, MNLI train files have at least 10"),
        ("mnli", "dev_matched.tsv", tsv(["index", "promptID"]), 1, "have at least 10"),
        (
            "mnli",
            "dev_matched.tsv",
            tsv(RTE_HEADER[:1] + ["x"] * 7 + ["sentence1", "sentence2"]),
            1,
            "header column 9 is 'sentence2', expected 'gold_label'",
        ),
        ("mnli", "train.tsv", "", 1, "empty file"),
        # A header and nothing else.
        ("rte", "dev.tsv", tsv(RTE_HEADER), None, "no examples"),
    ],
)
def test_bad_rows_and_headers_name_file_and_line(tmp_path, task, name, content, line, message):
  folder, path = write(tmp_path, task, name, content)
  split = name[: -len(".tsv")]
  with pytest.raises(InputError) as error:
    glue.read_glue(folder, task, split)
  place = path if line is None else f"{path}:{line}"
  assert str(error.value).startswith(f"{place}: "), str(error.value)
  assert message in str(error.value)
  assert "\n" not in str(error.value)


def test_non_utf8_row_is_refused_or_skipped(tmp_path):
  content = tsv(RTE_HEADER, ["0", "a", "b", "entailment"]).encode() + b"1\tcaf\xe9\tb\tentailment\n"
  folder, path = write(tmp_path, "rte", "train.tsv", content)
  with pytest.raises(InputError, match=f"^{path}:3: not valid UTF-8"):
    glue.read_glue(folder, "rte", "train")
  data = glue.read_glue(folder, "rte", "train", skip_bad_rows=True)
  assert tuples(data) == [("a", "b", "entailment", "0")]
  assert [m.split(": ")[0] for m in data.skipped] == [f"{path}:3"]


def test_skip_bad_rows_keeps_the_good_rows_and_lists_each_bad_one(tmp_path):
  rows = [
      stsb_row(0, "1.5", "a", "b"),
      stsb_row(1, "nan"),
      stsb_row(0, "2.0"),  # the id of line 2 again
      STSB_HEADER,
      stsb_row(2, "4", "c", "d")[:-1],  # no score column
      stsb_row(3, "4", "e", "f"),
  ]
  folder, path = write(tmp_path, "stsb", "train.tsv", tsv(STSB_HEADER, *rows))
  data = glue.read_glue(folder, "stsb", "train", skip_bad_rows=True)
  assert tuples(data) == [("a", "b", 1.5, "0"), ("e", "f", 4.0, "3")]
  assert [m.split(": ")[0] for m in data.skipped] == [f"{path}:{n}" for n in (3, 4, 5, 6)]
  # Nothing usable left: refused, saying why.
  folder, path = write(tmp_path, "stsb", "dev.tsv", tsv(STSB_HEADER, stsb_row(0, "9")))
  with pytest.raises(InputError, match=f"^{path}: no usable example: all 1 rows are bad"):
    glue.read_glue(folder, "stsb", "dev", skip_bad_rows=True)


def test_qqp_skips_its_official_broken_rows_but_not_repeated_ids(tmp_path):
  # Official QQP: a newline inside a question splits a row into two short ones.
  content = tsv(
      QQP_HEADER,
      ["1", "3", "4", "Why is", "b", "0"],
      ["2", "5", "6", "How do I"],
      ["learn?", "What?", "1"],
      ["4", "9", "10", "c", "d", "1"],
  )
  folder, path = write(tmp_path, "qqp", "train.tsv", content)
  data = glue.read_glue(folder, "qqp", "train")
  assert tuples(data) == [("Why is", "b", "0", "1"), ("c", "d", "1", "4")]
  assert [m.split(": ")[0] for m in data.skipped] == [f"{path}:3", f"{path}:4"]
  folder, path = write(tmp_path, "qqp", "train.tsv", content + tsv(["4", "1", "1", "e", "f", "0"]))
  with pytest.raises(InputError, match=f"^{path}:6: id '4' repeats line 5"):
    glue.read_glue(folder, "qqp", "train")


def test_skipped_rows_are_logged_once_per_file(tmp_path, word_tokenizer, caplog):
  folder, path = write(
      tmp_path,
      "qqp",
      "train.tsv",
      tsv(QQP_HEADER, ["1", "3", "4", "a", "b", "0"], ["2", "5", "6", "broken"]),
  )
  source = classification.task_source("qqp", folder)
  adapter = classification.ClassificationAdapter(
      source.spec, source.read_split, word_tokenizer, 8, str(tmp_path / "cache")
  )
  with caplog.at_level(logging.WARNING):
    adapter.examples("train")
  assert sum(path in record.getMessage() for record in caplog.records) == 1
  assert adapter.skipped_rows == {path: 1}


def test_tfds_scores_outside_the_scale_are_refused():
  spec = registry.get_task("stsb")
  assert tfds_reader._score_problem(spec, 5.0) is None
  for score in (float("nan"), float("inf"), 5.5, -0.5):
    assert "from 0 to 5" in tfds_reader._score_problem(spec, score)


# ---- The property: a valid file, one mutation, the invariant of issue 15. ----


class Format:
  """A GLUE file layout as the official files have it, for building valid files.

  Args:
    task, split: what the file is.
    header: the header's columns, or None (CoLA's labeled files).
    width: columns per row.
    text_a, text_b, label, index: their columns (None: absent).
    labels: the label values to draw (None: an STS-B score).
  """

  def __init__(self, task, split, header, width, text_a, text_b, label, index, labels):
    self.task, self.split, self.header, self.width = task, split, header, width
    self.text_a, self.text_b, self.label, self.index, self.labels = (
        text_a,
        text_b,
        label,
        index,
        labels,
    )

  def expected(self, row):
    """The (text_a, text_b, label, index) the reader must make of a row."""
    label = None if self.label is None else row[self.label]
    return (
        row[self.text_a],
        None if self.text_b is None else row[self.text_b],
        float(label) if self.labels is None and label is not None else label,
        None if self.index is None else row[self.index],
    )


FORMATS = [
    Format("stsb", "dev", STSB_HEADER, 10, 7, 8, 9, 0, None),
    Format("rte", "train", RTE_HEADER, 4, 1, 2, 3, 0, ["entailment", "not_entailment"]),
    Format("rte", "test", RTE_TEST_HEADER, 3, 1, 2, None, 0, None),
    Format("cola", "train", None, 4, 3, None, 1, None, ["0", "1"]),
]
WORDS = st.text(alphabet='abcxyz "é東', min_size=1, max_size=8).filter(lambda t: t.strip())


@st.composite
def glue_file(draw):
  """(format, rows) of a valid file: 2-5 rows, unique indices."""
  fmt = draw(st.sampled_from(FORMATS))
  rows = []
  for i in range(draw(st.integers(2, 5))):
    row = ["m"] * fmt.width
    row[fmt.text_a] = draw(WORDS)
    if fmt.text_b is not None:
      row[fmt.text_b] = draw(WORDS)
    if fmt.label is not None:
      row[fmt.label] = (
          draw(st.sampled_from(fmt.labels))
          if fmt.labels
          else f"{draw(st.integers(0, 5000)) / 1000:.3f}"
      )
    if fmt.index is not None:
      row[fmt.index] = str(i * 7)
    rows.append(row)
  return fmt, rows


MUTATIONS = [
    "bad_number",
    "extra_column",
    "missing_column",
    "duplicate_line",
    "repeated_header",
    "non_utf8",
    "odd_character",
    "blank_line",
    "crlf",
    "no_final_newline",
]


@mutations.fuzz_settings()
@given(glue_file(), st.sampled_from(MUTATIONS), st.data())
def test_property_glue_tsv_mutations(tmp_path, file, mutation, data):
  fmt, rows = file
  k = data.draw(st.integers(0, len(rows) - 1), label="row")
  first = 0 if fmt.header is None else 1  # 0-based file line of row 0
  line = first + k + 1  # the 1-based line of row k
  expected = [fmt.expected(row) for row in rows]
  header = [] if fmt.header is None else [fmt.header]
  content = tsv(*header, *rows).encode("utf-8")
  refused_at = None
  if mutation == "bad_number":
    bad = data.draw(st.sampled_from(mutations.BAD_NUMBERS))
    column = fmt.index if fmt.label is None else fmt.label
    row = list(rows[k])
    row[column] = bad
    content = mutations.replace_line(content, line - 1, "\t".join(row).encode())
    refused_at = line
  elif mutation == "extra_column":
    content = mutations.replace_line(content, line - 1, tsv(rows[k] + ["x"]).encode())
    refused_at = line
  elif mutation == "missing_column":
    content = mutations.replace_line(content, line - 1, tsv(rows[k][:-1]).encode())
    refused_at = line
  elif mutation == "duplicate_line":
    content = mutations.insert_line(content, line, tsv(rows[k]).encode())
    if fmt.index is not None:
      refused_at = line + 1
    else:
      expected.insert(k + 1, expected[k])
  elif mutation == "repeated_header" and fmt.header is not None:
    content = mutations.insert_line(content, line - 1, tsv(fmt.header).encode())
    refused_at = line
  elif mutation == "non_utf8":
    bad = data.draw(st.sampled_from(mutations.NON_UTF8))
    row = [field.encode() for field in rows[k]]
    row[fmt.text_a] = row[fmt.text_a][:1] + bad + row[fmt.text_a][1:]
    content = mutations.replace_line(content, line - 1, b"\t".join(row))
    refused_at = line
  elif mutation == "odd_character":
    odd = data.draw(st.sampled_from(mutations.ODD_CHARACTERS))
    row = list(rows[k])
    row[fmt.text_a] = row[fmt.text_a][:1] + odd + row[fmt.text_a][1:]
    content = mutations.replace_line(content, line - 1, "\t".join(row).encode())
    expected[k] = fmt.expected(row)
  elif mutation == "blank_line":
    content = mutations.insert_line(content, line - 1, b"")
  elif mutation == "crlf":
    content = mutations.to_crlf(content)
  elif mutation == "no_final_newline":
    content = content.rstrip(b"\n")
  name = f"{fmt.split}.tsv"
  folder, path = write(tmp_path, fmt.task, name, content)
  mutations.check_outcome(
      "glue tsv",
      lambda: tuples(glue.read_glue(folder, fmt.task, fmt.split)),
      path,
      expected=None if refused_at else expected,
      line=refused_at,
  )


# ---- The command: one line on stderr and status 2 before any model; the skip count. ----


def _run_finetune_glue(tmp_path, *flags):
  from recurrent_bert.tasks import sample_tasks

  vocab = sample_tasks.write_vocab(tmp_path / "vocab.txt")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
  env.pop("TF_CONFIG", None)
  return forkserver.run(
      [
          sys.executable,
          "-m",
          "recurrent_bert.finetune_glue",
          "--task=stsb",
          f"--model_dir={tmp_path / 'model'}",
          "--model_config=bert_tiny",
          f"--vocab_file={vocab}",
          "--max_seq_length=8",
          *flags,
      ],
      REPO,
      env,
      timeout=300,
  )


def _stsb_folder(tmp_path):
  content = tsv(STSB_HEADER, stsb_row(0, "3.5"), stsb_row(1, "nan"), stsb_row(2, "1.0", "b", "a"))
  folder, path = write(tmp_path, "stsb", "train.tsv", content)
  write(tmp_path, "stsb", "dev.tsv", content)
  return folder, path


@pytest.mark.slow(seconds=2)
def test_finetune_glue_stops_at_a_bad_score_with_one_line(tmp_path):
  folder, path = _stsb_folder(tmp_path)
  result = _run_finetune_glue(tmp_path, f"--data_dir={folder}")
  assert result.returncode == 2, result.stderr[-3000:]
  errors = [line for line in result.stderr.splitlines() if path in line]
  assert errors == [
      f"error: {path}:3: score 'nan' is not a number (expected a decimal number from 0 to 5)"
  ]
  assert "Traceback" not in result.stderr
  assert not os.path.exists(tmp_path / "model" / "checkpoint")  # no model was trained


@pytest.mark.slow(seconds=18)
def test_finetune_glue_skip_bad_rows_reports_the_count_per_file(tmp_path):
  folder, path = _stsb_folder(tmp_path)
  result = _run_finetune_glue(
      tmp_path,
      f"--data_dir={folder}",
      "--skip_bad_rows",
      "--mode=train",  # reads (and reports) dev too; no evaluation, to stay quick
      "--max_train_steps=1",
      "--train_batch_size=2",
      "--eval_batch_size=2",
  )
  assert result.returncode == 0, result.stderr[-3000:]
  dev = os.path.join(folder, "dev.tsv")
  for source in (path, dev):
    # One report per file (the readers used to log QQP's twice).
    assert result.stderr.count(f"{source}: skipped 1 ") == 1, result.stderr[-3000:]
  with open(tmp_path / "model" / "skipped_rows.json", encoding="utf-8") as f:
    assert json.load(f) == {path: 1, dev: 1}
