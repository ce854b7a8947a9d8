"""Your own sentence(-pair) classification task, in GLUE-like TSV files.

A task folder holds train.tsv, dev.tsv and optionally test.tsv. Each starts with a header
naming its columns; the reader finds them by name, in any order:

  sentence (or sentence1)   the text                          required
  sentence2                 the second text of a pair         optional
  label                     the label name                    train/dev (test: optional)
  index                     the id written in predictions     optional (default: line)

Tabs separate fields, with no quoting (as in GLUE). Any other header name is refused (a
misspelt "sentence_2" would otherwise drop the second text), as is a header whose text
columns differ from train.tsv's. Rows are checked as GLUE rows are (glue.read_tsv: UTF-8,
column count, label, unique non-empty index, no repeated header), with file:line. The
label list is the sorted set of train labels unless given (`--label_list`), so label ids
are stable across runs. Labels, in the files and in `--label_list`, are compared without
surrounding whitespace (" neg" and "neg " are "neg"); a label empty after that is a bad
row (skipped with the others under skip_bad_rows).
"""

import dataclasses
import os
from typing import List, Optional, Sequence, Tuple

from recurrent_bert import io_utils
from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import InputError
from recurrent_bert.io_utils import atomic_write_text
from recurrent_bert.tasks import text_rows
from recurrent_bert.tasks.classification import glue
from recurrent_bert.tasks.classification.registry import TaskSpec
from recurrent_bert.tasks.pair_features import PairExample

TASK_NAME = "custom"
SPLITS = ("train", "dev", "test")


# The header names a custom task file may use (module docstring).
COLUMNS = ("sentence", "sentence1", "sentence2", "label", "index")


def _header(path: str) -> List[str]:
  """The columns of a task file's header line, each a known name, none twice."""
  if not io_utils.isfile(path):
    raise InputError(
        f"{path!r} does not exist (custom task: expected train.tsv, "
        "dev.tsv and optionally test.tsv)"
    )
  _, line, problem = next(text_rows.read_text_lines(path), (1, None, None))
  if problem is not None:
    raise InputError(f"{path}:1: {problem}")
  if not line:
    raise InputError(f"{path}:1: empty header, expected columns named from {', '.join(COLUMNS)}")
  header = line.split("\t")
  for column, name in enumerate(header):
    if name not in COLUMNS:
      raise InputError(
          f"{path}:1: header column {column + 1} is {name!r}, not one of the known columns "
          f"{', '.join(COLUMNS)}"
      )
    if header.index(name) != column:
      raise InputError(f"{path}:1: header names column {name!r} twice")
  if "sentence" in header and "sentence1" in header:
    raise InputError(
        f"{path}:1: header has both 'sentence' and 'sentence1'; name the first text once"
    )
  return header


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
      header=dict(enumerate(header)),
      numeric_index=False,
  )


def check_label_list(label_list: Sequence[str], where: str = "label list") -> Tuple[str, ...]:
  """The label names stripped of surrounding whitespace, as the rows' labels are read
  (glue.read_tsv), so that " neg" names the class "neg" and not a class of its own.

  Args:
    label_list: the label names, e.g. --label_list.
    where: names the list in messages ("--label_list").

  Raises:
    InputError: an empty name, a name given twice (after stripping), or fewer than 2.
  """
  labels = tuple(label.strip() for label in label_list)
  for i, label in enumerate(labels):
    if not label:
      raise InputError(f"{where}: label {i + 1} of {list(label_list)} is empty")
    if label in labels[:i]:
      raise InputError(f"{where}: label {label!r} is given twice in {list(label_list)}")
  if len(labels) < 2:
    raise InputError(f"{where}: a classification task needs at least 2 labels, got {list(labels)}")
  return labels


def task_spec(label_list: Sequence[str]) -> TaskSpec:
  """A TaskSpec for a custom classification task with these label names (checked and
  stripped by `check_label_list`)."""
  return TaskSpec(
      TASK_NAME,
      TASK_NAME,
      check_label_list(label_list),
      ("accuracy",),
      "accuracy",
      {split: f"{split}.tsv" for split in SPLITS},
      ("dev",),
      {},
      benchmark=TASK_NAME,
  )


def infer_label_list(task_dir: str, skip_bad_rows: bool = False) -> List[str]:
  """The sorted label names of train.tsv (of its good rows, when skipping bad ones).

  Raises:
    InputError: no label column, a bad row (unless skipped), or fewer than 2 labels.
  """
  path = os.path.join(task_dir, "train.tsv")
  layout = _layout(path)
  if layout.label is None:
    raise InputError(f"{path}:1: the train file needs a 'label' column")
  data = glue.read_tsv(path, _any_label_spec(), "train", layout, skip_bad_rows, any_label=True)
  labels = sorted({e.label for e in data.examples})  # read_tsv strips them
  if len(labels) < 2:
    raise InputError(
        f"{path}: a classification task needs at least 2 labels, the train file has "
        f"{labels}; add examples of the other labels (or name them with --label_list)"
    )
  return labels


def _any_label_spec() -> TaskSpec:
  """The custom task before its labels are known (read_tsv's any_label ignores the list)."""
  return dataclasses.replace(task_spec(("a", "b")), label_list=())


def read_custom(
    task_dir: str, split: str, label_list: Sequence[str], skip_bad_rows: bool = False
) -> SplitData:
  """Reads one split; errors name file:line (module docstring).

  Args:
    task_dir: the task's folder.
    split: "train", "dev" or "test".
    label_list: the task's label names.
    skip_bad_rows: skip bad rows (listed in `SplitData.skipped`) instead of refusing them.
  """
  if split not in SPLITS:
    raise InputError(f"custom task has no split {split!r}; its splits are {SPLITS}")
  path = os.path.join(task_dir, f"{split}.tsv")
  layout = _layout(path)
  if split != "test" and layout.label is None:
    raise InputError(f"{path}:1: the {split} file needs a 'label' column")
  train_path = os.path.join(task_dir, "train.tsv")
  if split != "train" and io_utils.isfile(train_path):
    pair, train_pair = layout.text_b is not None, _layout(train_path).text_b is not None
    if pair != train_pair:
      raise InputError(
          f"{path}:1: header {'has a' if pair else 'has no'} 'sentence2' column but "
          f"{train_path}'s {'does not' if pair else 'does'}; every split needs the same "
          "text columns"
      )
  data = glue.read_tsv(path, task_spec(label_list), split, layout, skip_bad_rows)
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
