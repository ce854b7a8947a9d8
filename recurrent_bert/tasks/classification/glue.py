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

Every file is checked row by row (`read_tsv`): a line that is not UTF-8, has the wrong
number of columns, an unknown or empty label (class labels are read stripped of
surrounding whitespace: ' 1' is the label '1'), a score that is not a decimal number from 0 to 5
(STS-B), an index that is not a whole number or repeats an earlier line's, or that repeats
the header is an `InputError` naming file:line. Blank lines hold no record and are passed
over. With `skip_bad_rows` such rows are skipped instead and listed in `SplitData.skipped`
(one "file:line: what" each), which the caller reports per file. QQP's official train/dev
files contain a few rows broken by a newline inside a question (wrong column count, a
label that is text): QQP always skips those two kinds.
"""

import dataclasses
import os
import re
from typing import Dict, FrozenSet, List, Optional, Tuple

from recurrent_bert import io_utils
from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import InputError
from recurrent_bert.errors import at
from recurrent_bert.tasks.classification.registry import TaskSpec
from recurrent_bert.tasks.classification.registry import get_task
from recurrent_bert.tasks.pair_features import PairExample
from recurrent_bert.tasks.text_rows import BadRows
from recurrent_bert.tasks.text_rows import read_text_lines


@dataclasses.dataclass(frozen=True)
class TsvLayout:
  """Where a TSV file keeps its fields (0-based columns; negative counts from the end).

  Attributes:
    text_a, text_b, label, index: columns of the fields (None: absent).
    num_columns: columns per record; None means "as many as the header has" (MNLI).
    header: None if the file has no header line, else the expected header name of each
      column the reader uses (column → name), so a file of another layout is rejected.
    numeric_index: the index column holds whole numbers (GLUE's ids); else any
      non-empty text (a custom task's ids).
  """

  text_a: int
  text_b: Optional[int] = None
  label: Optional[int] = None
  index: Optional[int] = None
  num_columns: Optional[int] = None
  header: Optional[Dict[int, str]] = None
  numeric_index: bool = True

  def columns_needed(self) -> int:
    """The fewest columns a file needs to hold every column of the layout."""
    used = [c for c in (self.text_a, self.text_b, self.label, self.index) if c is not None]
    used += list(self.header or ())
    return max(c + 1 if c >= 0 else -c for c in used)


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

# Kinds of bad row a task's official files contain (and BERT's readers also drop), which
# its reader skips even without skip_bad_rows: QQP's rows broken by a newline in a question.
_OFFICIAL_BAD_ROWS: Dict[str, FrozenSet[str]] = {"qqp": frozenset({"columns", "label"})}

# A score as the STS-B files write it ("3.800"): digits, no exponent, no nan/inf, no "1_0".
_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


def split_file(task_dir: str, task: str, split: str) -> str:
  """The path of one split's file in a task folder (e.g. glue_data/MNLI/dev_matched.tsv)."""
  spec = get_task(task)
  if split not in spec.files:
    raise InputError(
        f"task {spec.name} has no split {split!r}; its splits are {', '.join(spec.files)}"
    )
  return os.path.join(task_dir, spec.files[split])


def read_glue(task_dir: str, task: str, split: str, skip_bad_rows: bool = False) -> SplitData:
  """Reads one split of a GLUE task from its official folder.

  Args:
    task_dir: the task's folder, e.g. glue_data/MNLI.
    task: a GLUE task name (see registry.GLUE_TASKS).
    split: "train", "dev" or "test" (MNLI: "dev_matched", "test_mismatched", ...).
    skip_bad_rows: skip bad rows (listed in `SplitData.skipped`) instead of refusing them.

  Returns:
    SplitData whose examples are `PairExample`s (label None in test files; index = the
    file's index/id column where it has one).

  Raises:
    InputError: missing file, unexpected header, a bad row (module docstring) unless
      skipped, or no example; the message names file:line.
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
  return read_tsv(
      path, spec, split, layout, skip_bad_rows, _OFFICIAL_BAD_ROWS.get(spec.name, frozenset())
  )


def read_tsv(
    path: str,
    spec: TaskSpec,
    split: str,
    layout: TsvLayout,
    skip_bad_rows: bool = False,
    tolerated: FrozenSet[str] = frozenset(),
    any_label: bool = False,
) -> SplitData:
  """Reads a GLUE-style TSV file of `layout` into `PairExample`s of `spec`.

  Args:
    path: the file.
    spec: the task (labels are checked against its label list, scores against its range).
    split: names the examples' guids.
    layout: where the fields are.
    skip_bad_rows: skip and list bad rows instead of raising at the first.
    tolerated: kinds of bad row ("columns", "label") skipped even so (official quirks).
    any_label: accept any non-empty label (to collect a custom task's label names).
      Class labels are read without surrounding whitespace, in either case.

  Returns:
    SplitData of the file's examples; `skipped` lists the rows skipped.

  Raises:
    InputError: a bad header, a bad row (not skipped), or no example; names file:line.
  """
  result = SplitData(examples=[], source=path)
  bad_rows = BadRows(result, skip_bad_rows, tolerated)
  lines = read_text_lines(path)
  header = None if layout.header is None else _read_header(path, lines, spec, split, layout)
  num_columns = layout.num_columns or len(header)
  index_name = header[layout.index] if header and layout.index is not None else "index"
  first_line_of_index: Dict[str, int] = {}
  for line_number, line, problem in lines:
    if line == "":
      continue  # a blank line holds no record
    fields = [] if line is None else line.split("\t")
    kind = "encoding"
    if problem is None and fields == header:
      problem = "the header line again; a file has one header, on line 1"
      kind = "header"
    elif problem is None and len(fields) != num_columns:
      problem = f"expected {num_columns} tab-separated columns, found {len(fields)}"
      kind = "columns"
    index = None if problem or layout.index is None else fields[layout.index]
    if index is not None:
      problem = _index_problem(index_name, index, layout, first_line_of_index)
      kind = "index"
    label = None if problem or layout.label is None else fields[layout.label]
    if label is not None and not spec.is_regression:
      label = label.strip()  # ' neg' and 'neg ' are the class 'neg', not classes of their own
    if label is not None:
      problem = _label_problem(spec, label, any_label)
      kind = "label"
    if problem is not None:
      bad_rows.refuse(at(path, line_number), problem, kind)
      continue
    if index is not None:
      first_line_of_index[index] = line_number
    result.examples.append(
        PairExample(
            guid=f"{spec.name}-{split}-{line_number}",
            text_a=fields[layout.text_a],
            text_b=None if layout.text_b is None else fields[layout.text_b],
            label=None if label is None else (float(label) if spec.is_regression else label),
            index=index,
        )
    )
  bad_rows.check_not_empty()
  return result


def _read_header(path: str, lines, spec: TaskSpec, split: str, layout: TsvLayout) -> List[str]:
  """Line 1 of a file with a header, checked against the layout; returns its columns."""
  _, line, problem = next(lines, (1, None, None))
  if problem is not None:
    raise InputError(f"{path}:1: {problem}")
  if line is None:
    raise InputError(f"{path}:1: empty file, expected a header line")
  header = line.split("\t")
  needed = layout.columns_needed()
  if (layout.num_columns is not None and len(header) != layout.num_columns) or len(header) < needed:
    expected = layout.num_columns or f"at least {needed}"
    raise InputError(
        f"{path}:1: header has {len(header)} columns, {spec.dir_name} {split} files have "
        f"{expected}"
    )
  for column, expected_name in layout.header.items():
    if header[column] != expected_name:
      raise InputError(
          f"{path}:1: header column {column % len(header)} is "
          f"{header[column]!r}, expected {expected_name!r} (is this the "
          f"{spec.dir_name} {split} file?)"
      )
  return header


def _index_problem(
    name: str, index: str, layout: TsvLayout, first_line_of_index: Dict[str, int]
) -> Optional[str]:
  """Why an index field is invalid (not a whole number / empty, or repeated), or None."""
  if layout.numeric_index and not (index.isascii() and index.isdigit()):
    return f"{name} {index!r} is not a whole number"
  if not index.strip():
    return f"empty {name}"
  if index in first_line_of_index:
    return f"{name} {index!r} repeats line {first_line_of_index[index]}; ids must be unique"
  return None


def _label_problem(spec: TaskSpec, label: str, any_label: bool = False) -> Optional[str]:
  """Why a label field (stripped, unless a score) is invalid for the task, or None."""
  if spec.is_regression:
    low, high = spec.score_range or (float("-inf"), float("inf"))
    expected = f"a decimal number from {low:g} to {high:g}"
    if not _DECIMAL.fullmatch(label):
      return f"score {label!r} is not a number (expected {expected})"
    if not low <= float(label) <= high:
      return f"score {label!r} is out of range (expected {expected})"
    return None
  if not label:
    return "empty label"
  if any_label:
    return None
  if label not in spec.label_list:
    return f"label {label!r} is not one of {', '.join(spec.label_list)}"
  return None
