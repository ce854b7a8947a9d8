"""GLUE: readers for the official task folders (glue_data/<Task>/).

Each task folder holds train.tsv, dev.tsv and the unlabeled test.tsv (MNLI: dev_matched,
dev_mismatched, test_matched, test_mismatched). The files are tab-separated with NO
quoting: a `"` is literal text (read as csv.QUOTE_NONE would), one record per line.
Column layouts differ per task and per labeled/test file:

  task   labeled files (header?)                 text_a / text_b / label   test files
  CoLA   4 columns, no header                    3 / - / 1                 index sentence
  SST-2  sentence label                          0 / - / 1                 index sentence
  MRPC   Quality #1ID #2ID #1String #2String     3 / 4 / 0                 index #1ID ...
  STS-B  10 columns ... sentence1 sentence2 score 7 / 8 / 9 (float 0..5)   first 9 columns
  QQP    id qid1 qid2 question1 question2 is_dup 3 / 4 / 5                 id q1 q2
  MNLI   12 (train) / 16 (dev) columns           8 / 9 / last (gold_label) first 10 columns
  QNLI   index question sentence label           1 / 2 / 3                 first 3 columns
  RTE, WNLI  index sentence1 sentence2 label     1 / 2 / 3                 first 3 columns

A record with the wrong number of columns, an unknown label or an unexpected header is an
`InputError` naming file:line, except in QQP, whose official train/dev files contain a few
broken rows: those are skipped, counted and reported (`SplitData.skipped`).
"""

import dataclasses
import os
from typing import Dict, Optional, Tuple

from recurrent_bert import io_utils
from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.io_utils import InputError
from recurrent_bert.io_utils import read_lines_checked
from recurrent_bert.tasks.pair_features import PairExample
from recurrent_bert.tasks.registry import TaskSpec
from recurrent_bert.tasks.registry import get_task

_BYTE_ORDER_MARK = "\ufeff"


@dataclasses.dataclass(frozen=True)
class TsvLayout:
  """Where a TSV file keeps its fields (0-based columns; negative counts from the end).

  Attributes:
    text_a, text_b, label, index: columns of the fields (None: absent).
    num_columns: columns per record; None means "as many as the header has" (MNLI).
    header: None if the file has no header line, else the expected header name of each
      column the reader uses (column → name), so a file of another layout is rejected.
  """

  text_a: int
  text_b: Optional[int] = None
  label: Optional[int] = None
  index: Optional[int] = None
  num_columns: Optional[int] = None
  header: Optional[Dict[int, str]] = None


_SENTENCE_PAIR_LAYOUTS = (
    TsvLayout(
        1, 2, label=3, index=0, num_columns=4, header={1: "sentence1", 2: "sentence2", 3: "label"}
    ),
    TsvLayout(1, 2, index=0, num_columns=3, header={0: "index", 1: "sentence1", 2: "sentence2"}),
)

# task → (layout of the labeled files, layout of the test files)
_LAYOUTS: Dict[str, Tuple[TsvLayout, TsvLayout]] = {
    "cola": (
        TsvLayout(3, label=1, num_columns=4),
        TsvLayout(1, index=0, num_columns=2, header={0: "index", 1: "sentence"}),
    ),
    "sst2": (
        TsvLayout(0, label=1, num_columns=2, header={0: "sentence", 1: "label"}),
        TsvLayout(1, index=0, num_columns=2, header={0: "index", 1: "sentence"}),
    ),
    "mrpc": (
        TsvLayout(
            3, 4, label=0, num_columns=5, header={0: "Quality", 3: "#1 String", 4: "#2 String"}
        ),
        TsvLayout(
            3, 4, index=0, num_columns=5, header={0: "index", 3: "#1 String", 4: "#2 String"}
        ),
    ),
    "stsb": (
        TsvLayout(
            7,
            8,
            label=9,
            index=0,
            num_columns=10,
            header={7: "sentence1", 8: "sentence2", 9: "score"},
        ),
        TsvLayout(
            7, 8, index=0, num_columns=9, header={0: "index", 7: "sentence1", 8: "sentence2"}
        ),
    ),
    "qqp": (
        TsvLayout(
            3,
            4,
            label=5,
            index=0,
            num_columns=6,
            header={3: "question1", 4: "question2", 5: "is_duplicate"},
        ),
        TsvLayout(1, 2, index=0, num_columns=3, header={0: "id", 1: "question1", 2: "question2"}),
    ),
    "mnli": (
        TsvLayout(
            8, 9, label=-1, index=0, header={8: "sentence1", 9: "sentence2", -1: "gold_label"}
        ),
        TsvLayout(
            8, 9, index=0, num_columns=10, header={0: "index", 8: "sentence1", 9: "sentence2"}
        ),
    ),
    "qnli": (
        TsvLayout(
            1, 2, label=3, index=0, num_columns=4, header={1: "question", 2: "sentence", 3: "label"}
        ),
        TsvLayout(1, 2, index=0, num_columns=3, header={0: "index", 1: "question", 2: "sentence"}),
    ),
    "rte": _SENTENCE_PAIR_LAYOUTS,
    "wnli": _SENTENCE_PAIR_LAYOUTS,
}

# Tasks whose official files contain broken records that BERT's readers also drop.
_SKIPS_MALFORMED_ROWS = frozenset({"qqp"})


def split_file(task_dir: str, task: str, split: str) -> str:
  """The path of one split's file in a task folder (e.g. glue_data/MNLI/dev_matched.tsv)."""
  spec = get_task(task)
  if split not in spec.files:
    raise InputError(
        f"task {spec.name} has no split {split!r}; its splits are {', '.join(spec.files)}"
    )
  return os.path.join(task_dir, spec.files[split])


def read_glue(task_dir: str, task: str, split: str) -> SplitData:
  """Reads one split of a GLUE task from its official folder.

  Args:
    task_dir: the task's folder, e.g. glue_data/MNLI.
    task: a GLUE task name (see registry.GLUE_TASKS).
    split: "train", "dev" or "test" (MNLI: "dev_matched", "test_mismatched", ...).

  Returns:
    SplitData whose examples are `PairExample`s (label None in test files; index = the
    file's index/id column where it has one).

  Raises:
    InputError: missing file, invalid UTF-8, unexpected header, wrong column count or
      unknown label; the message names file:line. (QQP skips malformed rows instead.)
  """
  spec = get_task(task)
  if spec.benchmark != "glue":
    raise InputError(f"{spec.name} is not a GLUE task")
  path = split_file(task_dir, spec.name, split)
  if not io_utils.isfile(path):
    raise InputError(
        f"{path!r} does not exist (task {spec.name}, split {split}); "
        f"expected the official GLUE folder layout"
    )
  labeled_layout, test_layout = _LAYOUTS[spec.name]
  layout = test_layout if split.startswith("test") else labeled_layout
  return read_tsv(path, spec, split, layout, spec.name in _SKIPS_MALFORMED_ROWS)


def read_tsv(
    path: str, spec: TaskSpec, split: str, layout: TsvLayout, skip_malformed: bool
) -> SplitData:
  """Reads a GLUE-style TSV file of `layout` into `PairExample`s of `spec`.

  Args:
    path: the file.
    spec: the task (labels are checked against its label list).
    split: names the examples' guids.
    layout: where the fields are.
    skip_malformed: skip and report bad records instead of raising.

  Returns:
    SplitData of the file's examples.
  """
  result = SplitData(examples=[], source=path)
  num_columns = layout.num_columns
  lines = read_lines_checked(path)
  if layout.header is not None:
    line_number, header_line = next(lines, (1, None))
    if header_line is None:
      raise InputError(f"{path}:1: empty file, expected a header line")
    header = header_line.lstrip(_BYTE_ORDER_MARK).split("\t")
    num_columns = num_columns or len(header)
    if len(header) != num_columns:
      raise InputError(
          f"{path}:{line_number}: header has {len(header)} columns, "
          f"{spec.dir_name} {split} files have {num_columns}"
      )
    for column, expected in layout.header.items():
      if header[column] != expected:
        raise InputError(
            f"{path}:{line_number}: header column {column % num_columns} is "
            f"{header[column]!r}, expected {expected!r} (is this the "
            f"{spec.dir_name} {split} file?)"
        )

  for line_number, line in lines:
    fields = line.split("\t")
    problem = None
    if len(fields) != num_columns:
      problem = f"expected {num_columns} tab-separated columns, found {len(fields)}"
    else:
      label = None if layout.label is None else fields[layout.label]
      problem = _label_problem(spec, label)
    if problem is not None:
      message = f"{path}:{line_number}: {problem}"
      if skip_malformed:
        result.skipped.append(message)
        continue
      raise InputError(message)
    result.examples.append(
        PairExample(
            guid=f"{spec.name}-{split}-{line_number}",
            text_a=fields[layout.text_a],
            text_b=None if layout.text_b is None else fields[layout.text_b],
            label=None if label is None else (float(label) if spec.is_regression else label),
            index=None if layout.index is None else fields[layout.index],
        )
    )
  result.report_skipped()
  return result


def _label_problem(spec: TaskSpec, label: Optional[str]) -> Optional[str]:
  """Why a label field is invalid for the task, or None if it is fine (or absent)."""
  if label is None:
    return None
  if spec.is_regression:
    try:
      float(label)
    except ValueError:
      return f"score {label!r} is not a number"
    return None
  if label not in spec.label_list:
    return f"label {label!r} is not one of {', '.join(spec.label_list)}"
  return None
