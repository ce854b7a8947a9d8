"""GLUE and SuperGLUE test predictions in the files their leaderboards read; atomic writes.

GLUE       <Task>.tsv (CoLA.tsv, MNLI-m.tsv, ...): header "index\\tprediction", then one
           line per test example: its index column and the label NAME (as in the task's
           files: 0/1, entailment/not_entailment, ...) or, for STS-B, the score.
SuperGLUE  BoolQ.jsonl: {"idx": i, "label": "true"|"false"} per line;
           MultiRC.jsonl: per paragraph {"idx": p, "passage": {"questions": [{"idx": q,
           "answers": [{"idx": a, "label": 0|1}, ...]}, ...]}}.
"""

import json
import os
from typing import Any, Dict, List, Sequence

import numpy as np

from recurrent_bert.io_utils import atomic_write_text
from recurrent_bert.tasks.classification.registry import get_task
from recurrent_bert.tasks.pair_features import PairExample


def _prediction_names(task_name: str, predictions: Sequence) -> List[str]:
  """Label names (classification: predictions are label ids) or formatted scores."""
  spec = get_task(task_name)
  values = np.asarray(predictions)
  if spec.is_regression:
    return [f"{float(v):.3f}" for v in values]
  if values.size and (values.min() < 0 or values.max() >= len(spec.label_list)):
    raise ValueError(f"{spec.name}: label ids must be in [0, {len(spec.label_list)})")
  return [spec.label_list[int(v)] for v in values]


def _check_lengths(examples: Sequence, predictions: Sequence) -> None:
  if len(examples) != len(predictions):
    raise ValueError(f"{len(predictions)} predictions for {len(examples)} examples")


def write_glue_submission(
    output_dir: str, task: str, split: str, examples: Sequence[PairExample], predictions: Sequence
) -> str:
  """Writes a GLUE leaderboard TSV for one test split.

  Args:
    output_dir: directory of the submission (created if needed).
    task: GLUE task name.
    split: a test split of the task ("test", MNLI "test_matched"/"test_mismatched").
    examples: the N test examples (their `index` is written).
    predictions: [N] label ids, or scores for STS-B.

  Returns:
    The path written (e.g. output_dir/MNLI-m.tsv).
  """
  spec = get_task(task)
  if split not in spec.leaderboard_files or spec.benchmark != "glue":
    raise ValueError(f"{spec.name} has no GLUE leaderboard file for split {split!r}")
  _check_lengths(examples, predictions)
  lines = ["index\tprediction"]
  for example, name in zip(examples, _prediction_names(spec.name, predictions)):
    if example.index is None:
      raise ValueError(f"example {example.guid} has no leaderboard index")
    lines.append(f"{example.index}\t{name}")
  path = os.path.join(output_dir, spec.leaderboard_files[split])
  atomic_write_text(path, "\n".join(lines) + "\n")
  return path


def write_superglue_submission(
    output_dir: str, task: str, examples: Sequence[PairExample], predictions: Sequence[int]
) -> str:
  """Writes BoolQ.jsonl or MultiRC.jsonl for the test split.

  Args:
    output_dir: directory of the submission.
    task: "boolq" or "multirc".
    examples: the N test examples from `superglue.read_superglue` (or TFDS).
    predictions: [N] label ids.

  Returns:
    The path written.
  """
  spec = get_task(task)
  if spec.benchmark != "superglue":
    raise ValueError(f"{spec.name} is not a SuperGLUE task")
  _check_lengths(examples, predictions)
  names = _prediction_names(spec.name, predictions)
  if spec.name == "boolq":
    records = [{"idx": int(e.index), "label": name} for e, name in zip(examples, names)]
  else:
    records = _multirc_records(examples, names)
  path = os.path.join(output_dir, spec.leaderboard_files["test"])
  atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))
  return path


def _multirc_records(examples: Sequence[PairExample], names: Sequence[str]) -> List[Dict[str, Any]]:
  """Nests per-answer predictions back into paragraphs and questions, in input order."""
  paragraphs: Dict[int, Dict[int, List[Dict[str, int]]]] = {}
  for example, name in zip(examples, names):
    paragraph_idx, question_idx, answer_idx = (int(i) for i in example.index)
    answers = paragraphs.setdefault(paragraph_idx, {}).setdefault(question_idx, [])
    answers.append({"idx": answer_idx, "label": int(name)})
  return [
      {
          "idx": p,
          "passage": {
              "questions": [{"idx": q, "answers": answers} for q, answers in questions.items()]
          },
      }
      for p, questions in paragraphs.items()
  ]
