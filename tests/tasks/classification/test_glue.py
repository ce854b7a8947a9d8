"""GLUE readers on small files written here in the official layouts of each task folder."""

import os

import pytest

from recurrent_bert.errors import InputError
from recurrent_bert.tasks.classification import glue
from recurrent_bert.tasks.classification import registry

QUOTED = 'He said "hello, world" and left'  # quotes are literal text (QUOTE_NONE)
UNBALANCED = '"Unbalanced quote, then a tab-free tail'
UNICODE = "naïve café in Zürich — 東京 ½"
MNLI_PARSES = ["( bp1 )", "( bp2 )", "(ROOT p1)", "(ROOT p2)"]


def tsv(*rows):
  return "".join("\t".join(row) + "\n" for row in rows)


# task → {file name: content}; task → {split: [(text_a, text_b, label, index), ...]}
FILES = {
    "cola": {
        "train.tsv": tsv(["gj04", "1", "", QUOTED], ["gj04", "0", "*", UNBALANCED]),
        "dev.tsv": tsv(["cj99", "1", "", UNICODE]),
        "test.tsv": tsv(["index", "sentence"], ["0", QUOTED], ["1", UNICODE]),
    },
    "sst2": {
        "train.tsv": tsv(["sentence", "label"], [QUOTED + " ", "1"], [UNICODE, "0"]),
        "dev.tsv": tsv(["sentence", "label"], [UNBALANCED, "0"]),
        "test.tsv": tsv(["index", "sentence"], ["0", UNICODE]),
    },
    "mrpc": {
        # The official train.tsv starts with a byte-order mark.
        "train.tsv": "\ufeff"
        + tsv(
            ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
            ["1", "702876", "702977", QUOTED, UNICODE],
        ),
        "dev.tsv": tsv(
            ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
            ["0", "1", "2", UNBALANCED, "b"],
        ),
        "test.tsv": tsv(
            ["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
            ["0", "1089874", "1089925", "x", UNICODE],
        ),
    },
    "stsb": {
        "train.tsv": tsv(
            [
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
            ],
            [
                "0",
                "main-captions",
                "MSRvid",
                "2012test",
                "0001",
                "none",
                "none",
                "A plane is taking off.",
                QUOTED,
                "5.000",
            ],
        ),
        "dev.tsv": tsv(
            [
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
            ],
            ["7", "g", "f", "y", "o", "s", "s", UNICODE, "b", "0.25"],
        ),
        "test.tsv": tsv(
            [
                "index",
                "genre",
                "filename",
                "year",
                "old_index",
                "source1",
                "source2",
                "sentence1",
                "sentence2",
            ],
            ["3", "g", "f", "y", "o", "s", "s", "a", UNICODE],
        ),
    },
    "qqp": {
        "train.tsv": tsv(
            ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
            ["1", "3", "4", QUOTED, UNICODE, "0"],
            ["2", "5", "6", "broken row with", "too few columns"],
            ["3", "7", "8", "a", "b", "duplicate"],
            ["4", "9", "10", "c", "d", "1"],
        ),
        "dev.tsv": tsv(
            ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
            ["5", "1", "2", UNBALANCED, "q", "1"],
        ),
        "test.tsv": tsv(["id", "question1", "question2"], ["0", "a?", UNICODE]),
    },
    "mnli": {
        "train.tsv": tsv(
            [
                "index",
                "promptID",
                "pairID",
                "genre",
                "sentence1_binary_parse",
                "sentence2_binary_parse",
                "sentence1_parse",
                "sentence2_parse",
                "sentence1",
                "sentence2",
                "label1",
                "gold_label",
            ],
            [
                "0",
                "31193",
                "31193n",
                "government",
                *MNLI_PARSES,
                QUOTED,
                UNICODE,
                "neutral",
                "neutral",
            ],
        ),
        "dev_matched.tsv": tsv(
            [
                "index",
                "promptID",
                "pairID",
                "genre",
                "sentence1_binary_parse",
                "sentence2_binary_parse",
                "sentence1_parse",
                "sentence2_parse",
                "sentence1",
                "sentence2",
                "label1",
                "label2",
                "label3",
                "label4",
                "label5",
                "gold_label",
            ],
            [
                "0",
                "1",
                "1e",
                "fiction",
                *MNLI_PARSES,
                "p",
                "h",
                "entailment",
                "neutral",
                "entailment",
                "entailment",
                "contradiction",
                "entailment",
            ],
        ),
        "dev_mismatched.tsv": tsv(
            [
                "index",
                "promptID",
                "pairID",
                "genre",
                "sentence1_binary_parse",
                "sentence2_binary_parse",
                "sentence1_parse",
                "sentence2_parse",
                "sentence1",
                "sentence2",
                "label1",
                "label2",
                "label3",
                "label4",
                "label5",
                "gold_label",
            ],
            [
                "0",
                "1",
                "1c",
                "letters",
                *MNLI_PARSES,
                UNICODE,
                "h",
                "contradiction",
                "",
                "",
                "",
                "",
                "contradiction",
            ],
        ),
        "test_matched.tsv": tsv(
            [
                "index",
                "promptID",
                "pairID",
                "genre",
                "sentence1_binary_parse",
                "sentence2_binary_parse",
                "sentence1_parse",
                "sentence2_parse",
                "sentence1",
                "sentence2",
            ],
            ["9", "1", "1", "g", *MNLI_PARSES, "p", QUOTED],
        ),
    },
    "qnli": {
        "train.tsv": tsv(
            ["index", "question", "sentence", "label"], ["0", "When?", QUOTED, "not_entailment"]
        ),
        "dev.tsv": tsv(
            ["index", "question", "sentence", "label"], ["0", UNICODE, "s", "entailment"]
        ),
        "test.tsv": tsv(["index", "question", "sentence"], ["0", "q", UNICODE]),
    },
    "rte": {
        "train.tsv": tsv(
            ["index", "sentence1", "sentence2", "label"], ["0", QUOTED, UNICODE, "entailment"]
        ),
        "dev.tsv": tsv(
            ["index", "sentence1", "sentence2", "label"], ["0", "a", "b", "not_entailment"]
        ),
        "test.tsv": tsv(["index", "sentence1", "sentence2"], ["0", UNBALANCED, "b"]),
    },
    "wnli": {
        "train.tsv": tsv(["index", "sentence1", "sentence2", "label"], ["0", UNICODE, QUOTED, "1"]),
        "dev.tsv": tsv(["index", "sentence1", "sentence2", "label"], ["0", "a", "b", "0"]),
        "test.tsv": tsv(["index", "sentence1", "sentence2"], ["5", "a", UNICODE]),
    },
}

EXPECTED = {
    ("cola", "train"): [(QUOTED, None, "1", None), (UNBALANCED, None, "0", None)],
    ("cola", "dev"): [(UNICODE, None, "1", None)],
    ("cola", "test"): [(QUOTED, None, None, "0"), (UNICODE, None, None, "1")],
    ("sst2", "train"): [(QUOTED + " ", None, "1", None), (UNICODE, None, "0", None)],
    ("sst2", "dev"): [(UNBALANCED, None, "0", None)],
    ("sst2", "test"): [(UNICODE, None, None, "0")],
    ("mrpc", "train"): [(QUOTED, UNICODE, "1", None)],
    ("mrpc", "dev"): [(UNBALANCED, "b", "0", None)],
    ("mrpc", "test"): [("x", UNICODE, None, "0")],
    ("stsb", "train"): [("A plane is taking off.", QUOTED, 5.0, "0")],
    ("stsb", "dev"): [(UNICODE, "b", 0.25, "7")],
    ("stsb", "test"): [("a", UNICODE, None, "3")],
    ("qqp", "train"): [(QUOTED, UNICODE, "0", "1"), ("c", "d", "1", "4")],
    ("qqp", "dev"): [(UNBALANCED, "q", "1", "5")],
    ("qqp", "test"): [("a?", UNICODE, None, "0")],
    ("mnli", "train"): [(QUOTED, UNICODE, "neutral", "0")],
    ("mnli", "dev_matched"): [("p", "h", "entailment", "0")],
    ("mnli", "dev_mismatched"): [(UNICODE, "h", "contradiction", "0")],
    ("mnli", "test_matched"): [("p", QUOTED, None, "9")],
    ("qnli", "train"): [("When?", QUOTED, "not_entailment", "0")],
    ("qnli", "dev"): [(UNICODE, "s", "entailment", "0")],
    ("qnli", "test"): [("q", UNICODE, None, "0")],
    ("rte", "train"): [(QUOTED, UNICODE, "entailment", "0")],
    ("rte", "dev"): [("a", "b", "not_entailment", "0")],
    ("rte", "test"): [(UNBALANCED, "b", None, "0")],
    ("wnli", "train"): [(UNICODE, QUOTED, "1", "0")],
    ("wnli", "dev"): [("a", "b", "0", "0")],
    ("wnli", "test"): [("a", UNICODE, None, "5")],
}


def write_task(root, task, files):
  task_dir = os.path.join(str(root), registry.GLUE_TASKS[task].dir_name)
  os.makedirs(task_dir, exist_ok=True)
  for name, content in files.items():
    with open(os.path.join(task_dir, name), "w", encoding="utf-8", newline="") as f:
      f.write(content)
  return task_dir


@pytest.fixture(scope="module")
def glue_root(tmp_path_factory):
  root = tmp_path_factory.mktemp("glue_data")
  for task, files in FILES.items():
    write_task(root, task, files)
  return str(root)


@pytest.mark.parametrize("task, split", sorted(EXPECTED))
def test_reads_official_layouts(glue_root, task, split):
  task_dir = os.path.join(glue_root, registry.GLUE_TASKS[task].dir_name)
  data = glue.read_glue(task_dir, task, split)
  got = [(e.text_a, e.text_b, e.label, e.index) for e in data.examples]
  assert got == EXPECTED[(task, split)]
  assert len({e.guid for e in data.examples}) == len(data.examples)


def test_qqp_skips_and_reports_malformed_rows(glue_root):
  data = glue.read_glue(os.path.join(glue_root, "QQP"), "qqp", "train")
  path = os.path.join(glue_root, "QQP", "train.tsv")
  assert len(data.skipped) == 2
  assert data.skipped[0].startswith(f"{path}:3: expected 6 tab-separated columns, found 5")
  assert data.skipped[1].startswith(f"{path}:4: label 'duplicate'")


@pytest.mark.parametrize(
    "task, file_name, content, split, line, message",
    [
        # A CoLA row that lost a column.
        (
            "cola",
            "train.tsv",
            tsv(["gj04", "1", "", "ok"], ["gj04", "1", "short"]),
            "train",
            2,
            "expected 4 tab-separated columns, found 3",
        ),
        # A tab inside an MNLI sentence shifts every later column.
        (
            "mnli",
            "dev_matched.tsv",
            FILES["mnli"]["dev_matched.tsv"]
            + tsv(
                [
                    "1",
                    "2",
                    "2n",
                    "g",
                    *MNLI_PARSES,
                    "a\tb",
                    "h",
                    "neutral",
                    "",
                    "",
                    "",
                    "",
                    "neutral",
                ]
            ),
            "dev_matched",
            3,
            "expected 16 tab-separated columns, found 17",
        ),
        (
            "qnli",
            "train.tsv",
            tsv(
                ["index", "question", "sentence", "label"],
                ["0", "q", "s", "entailment"],
                ["1", "q", "s", "maybe"],
            ),
            "train",
            3,
            "label 'maybe' is not one of entailment, not_entailment",
        ),
        (
            "stsb",
            "dev.tsv",
            FILES["stsb"]["train.tsv"] + tsv(["1", "g", "f", "y", "o", "s", "s", "a", "b", "high"]),
            "dev",
            3,
            "score 'high' is not a number",
        ),
        # An RTE file in the QNLI folder: the header names the wrong columns.
        (
            "qnli",
            "dev.tsv",
            FILES["rte"]["train.tsv"],
            "dev",
            1,
            "header column 1 is 'sentence1', expected 'question'",
        ),
        # A labeled file where the test file should be.
        (
            "sst2",
            "test.tsv",
            FILES["sst2"]["train.tsv"],
            "test",
            1,
            "header column 0 is 'sentence', expected 'index'",
        ),
        ("rte", "train.tsv", "", "train", 1, "empty file"),
    ],
)
def test_broken_files_name_file_and_line(tmp_path, task, file_name, content, split, line, message):
  task_dir = write_task(tmp_path, task, {file_name: content})
  with pytest.raises(InputError) as error:
    glue.read_glue(task_dir, task, split)
  assert str(error.value).startswith(f"{os.path.join(task_dir, file_name)}:{line}: ")
  assert message in str(error.value)


def test_invalid_utf8_and_missing_files(tmp_path):
  task_dir = write_task(tmp_path, "rte", {})
  with open(os.path.join(task_dir, "train.tsv"), "wb") as f:
    f.write(b"index\tsentence1\tsentence2\tlabel\n0\ta\t\xff\tentailment\n")
  with pytest.raises(InputError, match=r"train.tsv:2: not valid UTF-8"):
    glue.read_glue(task_dir, "rte", "train")
  with pytest.raises(InputError, match="dev.tsv' does not exist"):
    glue.read_glue(task_dir, "rte", "dev")
  with pytest.raises(InputError, match="no split 'dev'"):
    glue.read_glue(task_dir, "mnli", "dev")


def test_leaderboard_tsv_uses_index_and_label_names(glue_root, tmp_path):
  from recurrent_bert.tasks.classification import submission

  test = glue.read_glue(os.path.join(glue_root, "MNLI"), "mnli", "test_matched").examples
  path = submission.write_glue_submission(str(tmp_path), "mnli", "test_matched", test, [1])
  assert os.path.basename(path) == "MNLI-m.tsv"
  with open(path, encoding="utf-8") as f:
    assert f.read() == "index\tprediction\n9\tentailment\n"
  cola = glue.read_glue(os.path.join(glue_root, "CoLA"), "cola", "test").examples
  path = submission.write_glue_submission(str(tmp_path), "cola", "test", cola, [1, 0])
  with open(path, encoding="utf-8") as f:
    assert f.read() == "index\tprediction\n0\t1\n1\t0\n"
  stsb = glue.read_glue(os.path.join(glue_root, "STS-B"), "stsb", "test").examples
  path = submission.write_glue_submission(str(tmp_path), "stsb", "test", stsb, [3.14159])
  with open(path, encoding="utf-8") as f:
    assert f.read() == "index\tprediction\n3\t3.142\n"
  with pytest.raises(ValueError, match="2 predictions for 1 examples"):
    submission.write_glue_submission(str(tmp_path), "stsb", "test", stsb, [1.0, 2.0])
  with pytest.raises(ValueError, match="label ids"):
    submission.write_glue_submission(str(tmp_path), "cola", "test", cola, [1, 2])
