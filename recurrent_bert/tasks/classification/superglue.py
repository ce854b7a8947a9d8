"""SuperGLUE BoolQ and MultiRC: readers for the official JSONL files (one JSON object a line).

  BoolQ    {"question": str, "passage": str, "idx": int, "label": bool}
           → one PairExample (question, passage), label "false"/"true".
  MultiRC  {"idx": int, "passage": {"text": str, "questions": [{"question": str, "idx": int,
            "answers": [{"text": str, "idx": int, "label": 0|1}, ...]}, ...]}}
           → one PairExample per answer option: (paragraph, question + " " + answer),
             label "0"/"1", grouped per question (`group` = "<paragraph idx>-<question idx>",
             `index` = (paragraph idx, question idx, answer idx)).

MultiRC puts the paragraph in the first segment and question + answer in the second, so
longest-first truncation shortens the (long) paragraph and never cuts off the question or
the answer being judged.

Test files have no labels. Any malformed line (not UTF-8, bad JSON, a key twice in an
object, a missing or mistyped field, an empty list of MultiRC questions or answers) is an
`InputError` naming file:line and the field, as is an id that repeats an earlier one:
BoolQ's idx, MultiRC's paragraph idx, a question idx twice in a paragraph or an answer idx
twice in a question (either would merge two questions' answers into one exact-match
group). With `skip_bad_rows` a bad line (one BoolQ question, one MultiRC paragraph with
all its questions) is skipped instead and listed in `SplitData.skipped`.
"""

import json
import os
from typing import Any, Dict, Iterator, List, Tuple

from recurrent_bert import io_utils
from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import InputError
from recurrent_bert.errors import at
from recurrent_bert.errors import refuse_duplicate_keys
from recurrent_bert.tasks import text_rows
from recurrent_bert.tasks.classification.registry import SUPERGLUE_TASKS
from recurrent_bert.tasks.classification.registry import get_task
from recurrent_bert.tasks.pair_features import PairExample


class _Record:
  """One parsed JSON object plus where it came from, for precise error messages."""

  def __init__(self, value: Any, where: str, path: str):
    self.value = value
    self.where = where  # "file:line"
    self.path = path  # JSON path inside the line, e.g. passage.questions[2]

  def get(self, key: str, expected_type, optional: bool = False):
    """value[key], checked to be of `expected_type` (a type or tuple of types)."""
    if not isinstance(self.value, dict):
      raise InputError(f"{self.where}: {self.path or 'the line'} must be a JSON object")
    location = f"{self.path}.{key}" if self.path else key
    if key not in self.value:
      if optional:
        return None
      raise InputError(f"{self.where}: missing field {location!r}")
    value = self.value[key]
    # bool is a subclass of int; an int field must not accept true/false and vice versa.
    wrong_bool = isinstance(value, bool) and bool not in _as_tuple(expected_type)
    if wrong_bool or not isinstance(value, expected_type):
      raise InputError(
          f"{self.where}: field {location!r} should be "
          f"{_type_names(expected_type)}, got {json.dumps(value)[:60]}"
      )
    return value

  def children(self, key: str) -> Iterator["_Record"]:
    """The items of the list value[key], refused when empty: an empty list gives no example,
    so the line would be dropped silently (its examples missing from the split)."""
    items = self.get(key, list)
    prefix = f"{self.path}.{key}" if self.path else key
    if not items:
      raise InputError(f"{self.where}: field {prefix!r} is empty; it needs at least one item")
    for i, item in enumerate(items):
      yield _Record(item, self.where, f"{prefix}[{i}]")


def _as_tuple(types) -> Tuple[type, ...]:
  return types if isinstance(types, tuple) else (types,)


def _type_names(types) -> str:
  names = {
      str: "a string",
      int: "an integer",
      bool: "true/false",
      list: "a list",
      dict: "an object",
  }
  return " or ".join(names.get(t, t.__name__) for t in _as_tuple(types))


def _parse_line(where: str, line: str) -> _Record:
  try:
    value = json.loads(line, object_pairs_hook=refuse_duplicate_keys(where))
  except json.JSONDecodeError as e:
    raise InputError(f"{where}: invalid JSON at column {e.colno}: {e.msg}") from e
  if not isinstance(value, dict):
    raise InputError(f"{where}: each line must be a JSON object")
  return _Record(value, where, "")


def read_superglue(task_dir: str, task: str, split: str, skip_bad_rows: bool = False) -> SplitData:
  """Reads one split of BoolQ or MultiRC from its official folder.

  Args:
    task_dir: the task's folder, e.g. superglue/BoolQ.
    task: "boolq" or "multirc".
    split: "train", "dev" (the file val.jsonl) or "test".
    skip_bad_rows: skip bad lines (listed in `SplitData.skipped`) instead of refusing them.

  Returns:
    SplitData of `PairExample`s (see the module docstring); labels None in test files.

  Raises:
    InputError: missing file, a bad line (module docstring) unless skipped, or no
      example; names file:line.
  """
  spec = get_task(task)
  if spec.name not in SUPERGLUE_TASKS:
    raise InputError(f"{spec.name} is not one of the SuperGLUE tasks {', '.join(SUPERGLUE_TASKS)}")
  if split not in spec.files:
    raise InputError(
        f"task {spec.name} has no split {split!r}; its splits are {', '.join(spec.files)}"
    )
  path = os.path.join(task_dir, spec.files[split])
  if not io_utils.isfile(path):
    raise InputError(f"{path!r} does not exist; expected the official SuperGLUE layout")
  labeled = not split.startswith("test")
  parse = _boolq_examples if spec.name == "boolq" else _multirc_examples
  data = SplitData(examples=[], source=path)
  bad_rows = text_rows.BadRows(data, skip_bad_rows)
  first_line_of_idx: Dict[int, int] = {}
  for line_number, line, problem in text_rows.read_text_lines(path):
    where = at(path, line_number)
    if problem is not None:
      bad_rows.refuse(where, problem)
      continue
    if not line.strip():
      continue  # blank lines separate nothing in JSONL; they are not records
    try:
      record = _parse_line(where, line)
      examples = parse(record, split, labeled)
      idx = record.get("idx", int)
      if idx in first_line_of_idx:
        raise InputError(
            f"{where}: idx {idx} repeats line {first_line_of_idx[idx]}; ids must be unique"
        )
    except InputError as e:
      bad_rows.refuse_error(e)
      continue
    first_line_of_idx[idx] = line_number
    data.examples.extend(examples)
  bad_rows.check_not_empty()
  return data


def _boolq_examples(record: _Record, split: str, labeled: bool) -> List[PairExample]:
  idx = record.get("idx", int)
  label = record.get("label", bool, optional=not labeled)
  return [
      PairExample(
          guid=f"boolq-{split}-{idx}",
          text_a=record.get("question", str),
          text_b=record.get("passage", str),
          label=None if label is None else ("true" if label else "false"),
          index=idx,
      )
  ]


def _multirc_examples(record: _Record, split: str, labeled: bool) -> List[PairExample]:
  paragraph_idx = record.get("idx", int)
  passage = _Record(record.get("passage", dict), record.where, "passage")
  paragraph = passage.get("text", str)
  examples = []
  question_idxs = set()
  for question in passage.children("questions"):
    question_idx = _unique_idx(question, question_idxs, "question")
    question_text = question.get("question", str)
    group = f"{paragraph_idx}-{question_idx}"
    answer_idxs = set()
    for answer in question.children("answers"):
      answer_idx = _unique_idx(answer, answer_idxs, "answer")
      label = answer.get("label", (int, bool), optional=not labeled)
      if label is not None and int(label) not in (0, 1):
        raise InputError(f"{answer.where}: field {answer.path}.label must be 0 or 1, got {label}")
      examples.append(
          PairExample(
              guid=f"multirc-{split}-{group}-{answer_idx}",
              text_a=paragraph,
              text_b=f"{question_text} {answer.get('text', str)}",
              label=None if label is None else str(int(label)),
              index=(paragraph_idx, question_idx, answer_idx),
              group=group,
          )
      )
  return examples


def _unique_idx(record: _Record, seen: set, what: str) -> int:
  """record's idx, refused if an earlier sibling (`seen`, updated) has it."""
  idx = record.get("idx", int)
  if idx in seen:
    raise InputError(
        f"{record.where}: field {record.path}.idx: {what} idx {idx} appears twice; "
        f"ids must be unique (a repeated one merges two {what}s)"
    )
  seen.add(idx)
  return idx
