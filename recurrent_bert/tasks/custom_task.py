"""Your own sentence(-pair) classification task, in GLUE-like TSV files.

A task folder holds train.tsv, dev.tsv and optionally test.tsv. Each starts with a header
naming its columns; the reader finds them by name, in any order:

  sentence (or sentence1)   the text                          required
  sentence2                 the second text of a pair         optional
  label                     the label name                    train/dev (test: optional)
  index                     the id written in predictions     optional (default: line)

Tabs separate fields, with no quoting (as in GLUE). The label list is the sorted set of
train labels unless given (`--label_list`), so label ids are stable across runs.
"""

import os
from typing import List, Optional, Sequence

from recurrent_bert import io_utils
from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.io_utils import InputError
from recurrent_bert.io_utils import atomic_write_text
from recurrent_bert.tasks import glue
from recurrent_bert.tasks.pair_features import PairExample
from recurrent_bert.tasks.registry import TaskSpec

TASK_NAME = "custom"
SPLITS = ("train", "dev", "test")


def _header(path: str) -> List[str]:
  if not io_utils.isfile(path):
    raise InputError(
        f"{path!r} does not exist (custom task: expected train.tsv, "
        "dev.tsv and optionally test.tsv)"
    )
  with io_utils.open_file(path, "r") as f:
    first = f.readline().rstrip("\r\n").lstrip("\ufeff")
  return first.split("\t")


def _layout(path: str) -> glue.TsvLayout:
  header = _header(path)
  column = {name: i for i, name in enumerate(header)}
  text_a = column.get("sentence", column.get("sentence1"))
  if text_a is None:
    raise InputError(f"{path}:1: header {header} has no 'sentence' (or 'sentence1') column")
  return glue.TsvLayout(
      text_a,
      column.get("sentence2"),
      label=column.get("label"),
      index=column.get("index"),
      num_columns=len(header),
      header={text_a: header[text_a]},
  )


def task_spec(label_list: Sequence[str]) -> TaskSpec:
  """A TaskSpec for a custom classification task with these label names."""
  if len(label_list) < 2:
    raise InputError(f"a classification task needs at least 2 labels, got {label_list}")
  return TaskSpec(
      TASK_NAME,
      TASK_NAME,
      tuple(label_list),
      ("accuracy",),
      "accuracy",
      {split: f"{split}.tsv" for split in SPLITS},
      ("dev",),
      {},
      benchmark=TASK_NAME,
  )


def infer_label_list(task_dir: str) -> List[str]:
  """The sorted label names of train.tsv."""
  path = os.path.join(task_dir, "train.tsv")
  layout = _layout(path)
  if layout.label is None:
    raise InputError(f"{path}:1: the train file needs a 'label' column")
  labels = set()
  with io_utils.open_file(path, "r") as f:
    next(f)
    for line in f:
      fields = line.rstrip("\r\n").split("\t")
      if len(fields) == layout.num_columns:
        labels.add(fields[layout.label])
  return sorted(labels)


def read_custom(task_dir: str, split: str, label_list: Sequence[str]) -> SplitData:
  """Reads one split; errors name file:line (wrong column count, unknown label)."""
  if split not in SPLITS:
    raise InputError(f"custom task has no split {split!r}; its splits are {SPLITS}")
  path = os.path.join(task_dir, f"{split}.tsv")
  layout = _layout(path)
  if split != "test" and layout.label is None:
    raise InputError(f"{path}:1: the {split} file needs a 'label' column")
  data = glue.read_tsv(path, task_spec(label_list), split, layout, skip_malformed=False)
  data.examples = [
      e
      if e.index is not None
      else PairExample(e.guid, e.text_a, e.text_b, e.label, index=e.guid.rsplit("-", 1)[-1])
      for e in data.examples
  ]
  return data


def write_predictions(
    output_dir: str,
    split: str,
    examples: Sequence[PairExample],
    label_names: Sequence[str],
    predictions: Sequence[int],
    probabilities: Optional[Sequence[Sequence[float]]] = None,
) -> str:
  """Writes <split>_predictions.tsv: index, prediction (label name)[, probability]."""
  lines = ["index\tprediction" + ("\tprobability" if probabilities is not None else "")]
  for i, (example, label_id) in enumerate(zip(examples, predictions)):
    line = f"{example.index}\t{label_names[int(label_id)]}"
    if probabilities is not None:
      line += f"\t{float(probabilities[i][int(label_id)]):.4f}"
    lines.append(line)
  path = os.path.join(output_dir, f"{split}_predictions.tsv")
  atomic_write_text(path, "\n".join(lines) + "\n")
  return path
