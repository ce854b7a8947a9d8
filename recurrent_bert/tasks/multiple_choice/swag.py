"""Multiple-choice readers: the official SWAG CSV files, and a generic JSONL format.

SWAG (rowanz/swagaf data/: train.csv, val.csv, test.csv) is comma-separated with a header
and standard CSV quoting; a quoted field may hold commas, quotes ("") and newlines. The
official header is

  ,video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label

(test.csv has no label column). Columns are found by name: sent1, sent2, ending0 ..
ending{C-1} (C >= 2 consecutive ending columns; every row therefore has C endings), label
when present, and the example id: the unnamed first column of the official files, else
fold-ind. As in BERT §4.4 each choice is "the given sentence and a possible continuation":

  context (first segment)   = sent1
  ending c (second segment) = sent2 + " " + ending{c}

(sent2 is the start of the second sentence that every ending completes).

JSONL (any other multiple-choice set), one object per line:

  {"id": str or int, "context": str, "choices": [str, ...], "label": int,
   "question": str (optional)}

`label` (0-based index into choices) is absent in unlabeled files. A `question` is
appended to the context (context + " " + question), so it stays in the first segment
with the passage it asks about and the choices are scored against both.

Both give `ChoiceExample`s. A bad row is an `InputError` naming file:line (the line a CSV
record starts on): not UTF-8, a wrong number of columns / endings (all rows of a file
have the same C), a missing column or key, a label that is not an integer in [0, C), an
id that repeats an earlier row's, an empty context or ending, labels in some rows of a
file but not others (JSONL). With `skip_bad_rows` such rows are skipped instead and listed
in `SplitData.skipped` (tasks/text_rows.py `BadRows`). Blank lines hold no record.
"""

import csv
import dataclasses
import json
import os
from typing import Dict, Iterator, List, Optional, Set, Tuple

from recurrent_bert import io_utils
from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import InputError
from recurrent_bert.errors import at
from recurrent_bert.errors import refuse_duplicate_keys
from recurrent_bert.tasks.text_rows import BadRows
from recurrent_bert.tasks.text_rows import read_text_lines

SWAG_FILES = {"train": "train.csv", "dev": "val.csv", "test": "test.csv"}
_BYTE_ORDER_MARK = "\ufeff"


@dataclasses.dataclass(frozen=True)
class ChoiceExample:
  """One multiple-choice question.

  Attributes:
    guid: the example's id in its file (SWAG's row id, JSONL's "id"), as text; written
      in prediction files.
    context: the first segment of every choice.
    endings: the C texts of the second segments, one per choice.
    label: index of the right ending, or None (unlabeled files).
  """

  guid: str
  context: str
  endings: Tuple[str, ...]
  label: Optional[int]


def _label_problem(label: str, num_choices: int) -> Optional[str]:
  if not (label.isascii() and label.isdigit()):
    return f"label {label!r} is not an integer 0..{num_choices - 1}"
  if int(label) >= num_choices:
    return f"label {label} is out of range: {num_choices} endings, labels 0..{num_choices - 1}"
  return None


def _csv_records(path: str) -> Iterator[Tuple[int, Optional[List[str]], Optional[str]]]:
  """The records of a UTF-8 CSV file as (first line, fields, problem).

  The csv module reads lines decoded here one at a time, so a record spanning lines
  (newlines in a quoted field) is reported at the line it starts on, and a line that is not
  UTF-8 spoils only its own record: (line, None, what is wrong).
  """
  bad_lines: Dict[int, str] = {}

  def lines():
    try:
      f = io_utils.open_file(path, "rb")
    except OSError as e:
      raise InputError(f"cannot read input file {path!r}: {e.strerror or e}") from e
    with f:
      for number, raw in enumerate(f, start=1):
        try:
          text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
          bad_lines[number] = io_utils.not_utf8(raw.rstrip(b"\r\n"), e)
          text = raw.decode("utf-8", errors="replace")
        yield text.lstrip(_BYTE_ORDER_MARK) if number == 1 else text

  reader = csv.reader(lines(), strict=True)
  while True:
    start = reader.line_num + 1
    try:
      fields = next(reader)
    except StopIteration:
      return
    except csv.Error as e:
      yield start, None, f"malformed CSV: {e}"
      continue
    problems = [bad_lines[n] for n in range(start, reader.line_num + 1) if n in bad_lines]
    if problems:
      yield start, None, problems[0]
    elif fields:  # a blank line holds no record
      yield start, fields, None


def read_swag(data_dir: str, split: str, skip_bad_rows: bool = False) -> SplitData:
  """Reads one split of SWAG from its official folder (see the module docstring).

  Args:
    data_dir: the folder of train.csv, val.csv and test.csv.
    split: "train", "dev" (val.csv) or "test".
    skip_bad_rows: skip bad rows (listed in `SplitData.skipped`) instead of refusing them.

  Returns:
    SplitData of `ChoiceExample`s (labels None in test.csv).

  Raises:
    InputError: unknown split, missing file or column, a bad row unless skipped, or no
      example; names file:line.
  """
  if split not in SWAG_FILES:
    raise InputError(f"SWAG has no split {split!r}; its splits are {', '.join(SWAG_FILES)}")
  path = os.path.join(data_dir, SWAG_FILES[split])
  if not io_utils.isfile(path):
    raise InputError(f"{path!r} does not exist (SWAG {split}); expected the official folder")
  return read_swag_csv(path, split, skip_bad_rows)


def read_swag_csv(path: str, split: str = "", skip_bad_rows: bool = False) -> SplitData:
  """Reads a SWAG-format CSV file; `split` only names the file in messages."""
  result = SplitData(examples=[], source=path)
  bad_rows = BadRows(result, skip_bad_rows)
  records = _csv_records(path)
  _, header, problem = next(records, (1, None, "empty file, expected the SWAG header"))
  if problem is not None:
    raise InputError(f"{at(path, line=1)}: {problem}")
  column = {name: i for i, name in reversed(list(enumerate(header)))}
  num_choices = 0
  while f"ending{num_choices}" in column:
    num_choices += 1
  id_name = "" if header[0] == "" else "fold-ind"
  missing = [n for n in ("sent1", "sent2", id_name) if n not in column]
  if num_choices < 2 or missing:
    missing += ["ending0", "ending1"][num_choices:]
    raise InputError(
        f"{at(path, line=1)}: header lacks the column(s) {', '.join(repr(m) for m in missing)} "
        f"(is this a SWAG {split or 'CSV'} file?)"
    )
  endings = [column[f"ending{c}"] for c in range(num_choices)]
  label_column = column.get("label")
  first_line_of_id: Dict[str, int] = {}
  for line, fields, problem in records:
    if problem is None and len(fields) != len(header):
      problem = f"expected {len(header)} columns (as the header), found {len(fields)}"
    if problem is None:
      guid = fields[column[id_name]]
      texts = [fields[column["sent1"]], *(fields[i] for i in endings)]
      if not guid.strip():
        problem = "empty id"
      elif guid in first_line_of_id:
        problem = f"id {guid!r} repeats line {first_line_of_id[guid]}; ids must be unique"
      elif not all(t.strip() for t in texts):
        names = ["sent1", *(f"ending{c}" for c in range(num_choices))]
        problem = "empty " + ", ".join(n for n, t in zip(names, texts) if not t.strip())
      elif label_column is not None:
        problem = _label_problem(fields[label_column], num_choices)
    if problem is not None:
      bad_rows.refuse(at(path, line=line), problem)
      continue
    first_line_of_id[guid] = line
    sent2 = fields[column["sent2"]]
    result.examples.append(
        ChoiceExample(
            guid=guid,
            context=fields[column["sent1"]],
            endings=tuple(f"{sent2} {fields[i]}" if sent2 else fields[i] for i in endings),
            label=None if label_column is None else int(fields[label_column]),
        )
    )
  bad_rows.check_not_empty()
  return result


def _jsonl_example(value, num_choices: Optional[int]) -> Tuple[Optional[ChoiceExample], str]:
  """(example, "") of one parsed JSONL object, or (None, what is wrong)."""
  if not isinstance(value, dict):
    return None, "each line must be a JSON object"
  for key in ("id", "context", "choices"):
    if key not in value:
      return None, f"missing key {key!r}"
  guid, context, choices = value["id"], value["context"], value["choices"]
  if isinstance(guid, bool) or not isinstance(guid, (str, int)) or not str(guid).strip():
    return None, f"'id' should be a non-empty string or an integer, got {json.dumps(guid)[:60]}"
  texts = {"context": context, **({"question": value["question"]} if "question" in value else {})}
  for key, text in texts.items():
    if not isinstance(text, str) or not text.strip():
      return None, f"{key!r} should be a non-empty string, got {json.dumps(text)[:60]}"
  if not isinstance(choices, list) or len(choices) < 2:
    return None, f"'choices' should be a list of at least 2 strings, got {json.dumps(choices)[:60]}"
  if num_choices is not None and len(choices) != num_choices:
    return None, f"{len(choices)} choices; every row of a file has the same number ({num_choices})"
  for c, choice in enumerate(choices):
    if not isinstance(choice, str) or not choice.strip():
      return None, f"choices[{c}] should be a non-empty string, got {json.dumps(choice)[:60]}"
  label = value.get("label")
  if label is not None and (
      isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(choices)
  ):
    return None, f"'label' should be an integer 0..{len(choices) - 1}, got {json.dumps(label)[:60]}"
  if "question" in value:
    context = f"{context} {value['question']}"
  return ChoiceExample(str(guid), context, tuple(choices), label), ""


def read_choice_jsonl(path: str, skip_bad_rows: bool = False) -> SplitData:
  """Reads a multiple-choice JSONL file (module docstring) into `ChoiceExample`s.

  Args:
    path: the file.
    skip_bad_rows: skip bad lines (listed in `SplitData.skipped`) instead of refusing them.

  Returns:
    SplitData of the file's examples, in file order.

  Raises:
    InputError: missing file, a bad line unless skipped, or no example; names file:line.
  """
  if not io_utils.isfile(path):
    raise InputError(f"{path!r} does not exist")
  result = SplitData(examples=[], source=path)
  bad_rows = BadRows(result, skip_bad_rows)
  first_line_of_id: Dict[str, int] = {}
  labeled: Set[bool] = set()
  num_choices = first_line = None
  for line, text, problem in read_text_lines(path):
    if text is not None and not text.strip():
      continue
    where = at(path, line=line)
    example = None
    if problem is None:
      try:
        value = json.loads(text, object_pairs_hook=refuse_duplicate_keys(where))
      except InputError as e:
        bad_rows.refuse_error(e)
        continue
      except json.JSONDecodeError as e:
        value, problem = None, f"invalid JSON at column {e.colno}: {e.msg}"
      if problem is None:
        example, problem = _jsonl_example(value, num_choices)
        problem = problem or None
      if example is not None and example.guid in first_line_of_id:
        problem = f"id {example.guid!r} repeats line {first_line_of_id[example.guid]}"
      elif example is not None and labeled and (example.label is not None) not in labeled:
        problem = (
            f"{'a' if example.label is not None else 'no'} label, where line {first_line} "
            f"{'has none' if example.label is not None else 'has one'}: label every row or none"
        )
    if problem is not None:
      bad_rows.refuse(where, problem)
      continue
    if num_choices is None:
      num_choices, first_line = len(example.endings), line
    labeled.add(example.label is not None)
    first_line_of_id[example.guid] = line
    result.examples.append(example)
  bad_rows.check_not_empty()
  return result
