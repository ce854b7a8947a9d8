"""BoolQ and MultiRC readers on small JSONL files written here in the official format."""

import json
import os

import pytest

from recurrent_bert.errors import InputError
from recurrent_bert.tasks.classification import registry
from recurrent_bert.tasks.classification import superglue

PASSAGE = 'The "Zürich" passage — naïve café, 東京.\nSecond line.'


def write_jsonl(directory, name, records):
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, name)
  with open(path, "w", encoding="utf-8") as f:
    for record in records:
      f.write((record if isinstance(record, str) else json.dumps(record)) + "\n")
  return path


def test_boolq_labeled_and_test_files(tmp_path):
  task_dir = str(tmp_path / "BoolQ")
  write_jsonl(
      task_dir,
      "val.jsonl",
      [
          {"question": 'is it "quoted"?', "passage": PASSAGE, "idx": 0, "label": True},
          {"question": "is it false", "passage": "p", "idx": 1, "label": False},
      ],
  )
  write_jsonl(task_dir, "test.jsonl", [{"question": "q", "passage": PASSAGE, "idx": 7}])
  dev = superglue.read_superglue(task_dir, "boolq", "dev")
  assert [(e.text_a, e.text_b, e.label, e.index) for e in dev.examples] == [
      ('is it "quoted"?', PASSAGE, "true", 0),
      ("is it false", "p", "false", 1),
  ]
  test = superglue.read_superglue(task_dir, "boolq", "test")
  assert [(e.text_b, e.label, e.index) for e in test.examples] == [(PASSAGE, None, 7)]


def _multirc_record(paragraph_idx, with_labels=True):
  def answer(idx, text, label):
    return {"text": text, "idx": idx, **({"label": label} if with_labels else {})}

  return {
      "idx": paragraph_idx,
      "version": 1.1,
      "passage": {
          "text": PASSAGE,
          "questions": [
              {
                  "question": "Where?",
                  "idx": 0,
                  "answers": [answer(0, "Zürich", 1), answer(1, "Paris", 0)],
              },
              {"question": "What else?", "idx": 1, "answers": [answer(2, "東京", 1)]},
          ],
      },
  }


def test_multirc_pairs_grouped_per_question(tmp_path):
  task_dir = str(tmp_path / "MultiRC")
  write_jsonl(task_dir, "train.jsonl", [_multirc_record(3)])
  write_jsonl(task_dir, "test.jsonl", [_multirc_record(4, with_labels=False)])
  examples = superglue.read_superglue(task_dir, "multirc", "train").examples
  assert [(e.text_a, e.text_b, e.label, e.group, e.index) for e in examples] == [
      (PASSAGE, "Where? Zürich", "1", "3-0", (3, 0, 0)),
      (PASSAGE, "Where? Paris", "0", "3-0", (3, 0, 1)),
      (PASSAGE, "What else? 東京", "1", "3-1", (3, 1, 2)),
  ]
  test = superglue.read_superglue(task_dir, "multirc", "test").examples
  assert [e.label for e in test] == [None, None, None]
  spec = registry.SUPERGLUE_TASKS["multirc"]
  assert spec.metric_names == ("f1a", "exact_match")


@pytest.mark.parametrize(
    "task, line, message",
    [
        (
            "boolq",
            '{"question": "q", "passage": "p", "idx": 1, "label": true',
            "invalid JSON at column",
        ),
        ("boolq", '{"question": "q", "passage": "p", "idx": 1}', "missing field 'label'"),
        (
            "boolq",
            '{"question": "q", "passage": "p", "idx": 1, "label": "yes"}',
            "field 'label' should be true/false",
        ),
        ("boolq", '["not", "an", "object"]', "must be a JSON object"),
        (
            "multirc",
            json.dumps(
                {
                    "idx": 0,
                    "passage": {
                        "text": "t",
                        "questions": [
                            {
                                "question": "q",
                                "idx": 0,
                                "answers": [
                                    {"text": "a", "idx": 0, "label": 1},
                                    {"text": "b", "label": 0},
                                ],
                            }
                        ],
                    },
                }
            ),
            "missing field 'passage.questions[0].answers[1].idx'",
        ),
        (
            "multirc",
            json.dumps(
                {
                    "idx": 0,
                    "passage": {
                        "text": "t",
                        "questions": [
                            {
                                "question": "q",
                                "idx": 0,
                                "answers": [{"text": "a", "idx": 0, "label": 2}],
                            }
                        ],
                    },
                }
            ),
            "label must be 0 or 1",
        ),
    ],
)
def test_broken_line_names_file_and_line(tmp_path, task, line, message):
  # Two good lines first (their own ids: a repeated id is an error too).
  good = [
      {"question": "q", "passage": "p", "idx": idx, "label": True}
      if task == "boolq"
      else _multirc_record(idx)
      for idx in (10, 11)
  ]
  task_dir = str(tmp_path / task)
  path = write_jsonl(task_dir, "train.jsonl", [*good, line])
  with pytest.raises(InputError) as error:
    superglue.read_superglue(task_dir, task, "train")
  assert str(error.value).startswith(f"{path}:3: ")
  assert message in str(error.value)


def test_missing_file_and_wrong_task(tmp_path):
  with pytest.raises(InputError, match="val.jsonl' does not exist"):
    superglue.read_superglue(str(tmp_path), "boolq", "dev")
  with pytest.raises(InputError, match="not one of the SuperGLUE tasks"):
    superglue.read_superglue(str(tmp_path), "rte", "dev")


def test_submission_jsonl(tmp_path):
  from recurrent_bert.tasks.classification import submission

  task_dir = str(tmp_path / "MultiRC")
  write_jsonl(
      task_dir,
      "test.jsonl",
      [_multirc_record(4, with_labels=False), _multirc_record(5, with_labels=False)],
  )
  examples = superglue.read_superglue(task_dir, "multirc", "test").examples
  path = submission.write_superglue_submission(
      str(tmp_path / "out"), "multirc", examples, [1, 0, 1, 0, 0, 1]
  )
  with open(path, encoding="utf-8") as f:
    lines = [json.loads(line) for line in f]
  assert os.path.basename(path) == "MultiRC.jsonl"
  assert lines == [
      {
          "idx": 4,
          "passage": {
              "questions": [
                  {"idx": 0, "answers": [{"idx": 0, "label": 1}, {"idx": 1, "label": 0}]},
                  {"idx": 1, "answers": [{"idx": 2, "label": 1}]},
              ]
          },
      },
      {
          "idx": 5,
          "passage": {
              "questions": [
                  {"idx": 0, "answers": [{"idx": 0, "label": 0}, {"idx": 1, "label": 0}]},
                  {"idx": 1, "answers": [{"idx": 2, "label": 1}]},
              ]
          },
      },
  ]
  boolq_dir = str(tmp_path / "BoolQ")
  write_jsonl(
      boolq_dir,
      "test.jsonl",
      [{"question": "q", "passage": "p", "idx": 3}, {"question": "q", "passage": "p", "idx": 4}],
  )
  boolq = superglue.read_superglue(boolq_dir, "boolq", "test").examples
  path = submission.write_superglue_submission(str(tmp_path / "out"), "boolq", boolq, [1, 0])
  with open(path, encoding="utf-8") as f:
    assert f.read() == ('{"idx": 3, "label": "true"}\n{"idx": 4, "label": "false"}\n')
