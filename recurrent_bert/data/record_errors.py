"""Bad pretraining records as the package's one error: "path: record N (byte B): what".

Whoever reads the records of `pretraining_dataset` (the training loop, the held-out
evaluator, a summary tool, a test) reads them inside `reading_records()`, which turns what
TensorFlow raises about a record into an `InputError`:

  * the parser's and the in-graph checks' errors, which name "path: record N" themselves
    (`pretraining_dataset` puts the name in every record's parse);
  * bytes that are not a tf.train.Example (TF quotes them; the name rides in a field);
  * a reader's DataLossError, which names a byte offset only: the damaged frame is found
    by walking the files read (`tfrecord_frames`).

The TF-free checks live in `pretraining_records` (`check_shards`: each shard against the
generator's stats.json) and `tfrecord_frames` (framing, `SkippedRecords` for
--skip_bad_records).
"""

import contextlib
import re
from typing import Dict, Optional, Sequence

import tensorflow as tf

from recurrent_bert.data import pretraining_records
from recurrent_bert.data import schema
from recurrent_bert.data import tfrecord_frames
from recurrent_bert.data.pretraining_records import NOT_AN_EXAMPLE
from recurrent_bert.data.tfrecord_frames import REMAKE
from recurrent_bert.data.tfrecord_frames import SkippedRecords  # noqa: F401  (the package's name for it)
from recurrent_bert.data.tfrecord_frames import describe  # noqa: F401  (re-exported)
from recurrent_bert.errors import InputError

# Brackets the "path: record N: what" of the in-graph checks' assertion messages.
CHECK_BEGIN, CHECK_END = "<<bad pretraining record>>", "<<end>>"

# Every file a pipeline of this process reads, the latest last: where a reader's error
# (which names an offset, not a file) is looked for, the latest first.
_FILES_READ: Dict[str, None] = {}


def register(paths: Sequence[str]) -> None:
  """Notes that a pipeline reads `paths` (where a reader's error will be looked for)."""
  for path in paths:
    _FILES_READ.pop(path, None)
    _FILES_READ[path] = None


# What TF's parser says after "Name: path: record N, " -> what the error says.
_PARSER_ERRORS = (
    (
        re.compile(
            r"Key: (\w+), Index: \d+\.\s+Number of \w+ values != expected\.\s+"
            r"Values size: (\d+) but output shape: \[(\d+)\]"
        ),
        pretraining_records.WRONG_COUNT,
    ),
    (
        re.compile(
            r"Key: (\w+), Index: \d+\.\s+Data types don't match\.\s+"
            r"Data type: (\w+) but expected type: (\w+)"
        ),
        pretraining_records.WRONG_KIND,
    ),
    (
        re.compile(r"Feature: (\w+) \(data type: (\w+)\) is required but could not be found"),
        pretraining_records.MISSING,
    ),
)
_NAMED = re.compile(r"Name: (.*?: record \d+(?: \(byte \d+\))?), (.*?)(?:\n|\t|\[\[|$)", re.S)
_CHECKED = re.compile(re.escape(CHECK_BEGIN) + r"(.*?)" + re.escape(CHECK_END), re.S)
_QUOTED = b"Could not parse example input, value: '"
_READER = re.compile(r"(corrupted|truncated) record at (\d+)")


@contextlib.contextmanager
def reading_records():
  """A bad record met inside the block raises InputError "path: record N: what".

  Any other error is re-raised as it is.
  """
  try:
    yield
  except (tf.errors.InvalidArgumentError, tf.errors.DataLossError, UnicodeDecodeError) as e:
    bad_input = record_error(e)
    if bad_input is None:
      raise
    raise bad_input from None


def record_error(error: BaseException) -> Optional[InputError]:
  """The InputError "path: record N: what" for an error raised reading pretraining records.

  Args:
    error: what iterating a dataset of `pretraining_dataset` raised: an
      InvalidArgumentError of the parser or of the checks, a UnicodeDecodeError (TF's
      message quoting bytes that are not an Example is not UTF-8), or a reader's
      DataLossError.

  Returns:
    The InputError, or None when `error` is not about a record (a bug: re-raise it).
  """
  if isinstance(error, UnicodeDecodeError):
    data = error.object if isinstance(error.object, bytes) else bytes(error.object)
  elif isinstance(error, tf.errors.OpError):
    data = error.message.encode("utf-8")
  else:
    return None
  if _QUOTED in data:
    name = schema.read_name_field(data[data.index(_QUOTED) + len(_QUOTED) :])
    if name is not None:
      return InputError(f"{name}: {NOT_AN_EXAMPLE}; {REMAKE}")
  text = data.decode("utf-8", "replace")
  checked = _CHECKED.search(text)
  if checked:
    return InputError(f"{checked.group(1)}; {REMAKE}")
  named = _NAMED.search(text)
  if named:
    name, what = named.group(1), named.group(2).strip()
    for pattern, template in _PARSER_ERRORS:
      found = pattern.search(what)
      if found:
        what = template.format(*found.groups())
        break
    return InputError(f"{name}: {what}; {REMAKE}")
  reader = _READER.search(text)
  if reader and isinstance(error, tf.errors.DataLossError):
    # TF names the offset of the record's data (a bad header: of the record itself).
    offset = int(reader.group(2))
    header = tfrecord_frames.HEADER_BYTES
    return _locate_damage(list(reversed(_FILES_READ)), (offset - header, offset))
  if isinstance(error, tf.errors.InvalidArgumentError) and "Unsupported datatype" in text:
    # The fast parser's one error that names no example: a feature with no value list.
    return _locate_empty_feature(list(reversed(_FILES_READ)))
  return None


def _locate_empty_feature(paths: Sequence[str]) -> Optional[InputError]:
  """The first record of `paths` holding a feature without a value list, found after the
  fact (the run has stopped; reading the files again costs nothing that matters)."""
  for path in paths:
    for number, offset, record in tfrecord_frames.read_frames(path, lambda _: None):
      try:
        features = pretraining_records.decode_example(record)
      except ValueError:
        return tfrecord_frames.BadRecord(path, number, offset, NOT_AN_EXAMPLE).error()
      for name, (kind, _) in features.items():
        if kind is None:
          what = pretraining_records.NO_VALUE_LIST.format(name)
          return tfrecord_frames.BadRecord(path, number, offset, what).error()
  return None


def _locate_damage(paths: Sequence[str], offsets: Sequence[int]) -> Optional[InputError]:
  """The first damaged record of `paths` that starts at one of `offsets`."""
  for path in paths:
    if not tfrecord_frames.exists(path):
      continue
    size = tfrecord_frames.file_size(path)
    for start in offsets:
      frames = tfrecord_frames.walk_frames(path, stop_at=start)
      if frames.end != start or start >= size:
        continue
      with tfrecord_frames.open_binary(path) as f:
        problem, _, _ = tfrecord_frames.read_frame(f, start, size)
      if problem:
        return tfrecord_frames.BadRecord(path, frames.records + 1, start, problem).error()
  return None
