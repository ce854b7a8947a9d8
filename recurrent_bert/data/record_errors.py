"""Bad pretraining records as the package's one error: "path: record N (byte B): what".

Whoever reads the records of `pretraining_dataset` (the training loop, the held-out
evaluator, a summary tool, a test) reads them inside `reading_records()`, which turns what
TensorFlow raises about a record into an `InputError`:

  * the parser's and the in-graph checks' errors, which name "path: record N" themselves
    (`pretraining_dataset` puts the name in every record's parse);
  * bytes that are not a tf.train.Example (TF quotes them; the name rides in a field);
  * a reader's DataLossError, which names a byte offset only: the damaged frame is found
    by walking the files read (`tfrecord_frames`).

`check_shards` compares each shard with the stats.json the generator wrote beside it
before the first step (a shard cut at a record boundary reads as a shorter one: only its
size tells). With --skip_bad_records, damaged frames and missing records are counted in a
`SkippedRecords` instead (the pipeline then reads through `tfrecord_frames.read_frames`).
"""

import contextlib
import json
import os
import re
import threading
from typing import Dict, List, Optional, Sequence

from google.protobuf import message
import tensorflow as tf

from recurrent_bert.data import pretraining_data
from recurrent_bert.data import schema
from recurrent_bert.data import tfrecord_frames
from recurrent_bert.data.tfrecord_frames import REMAKE
from recurrent_bert.io_utils import InputError

NOT_AN_EXAMPLE = "not a tf.train.Example (its bytes do not parse as one)"
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


class SkippedRecords:
  """The damaged records a --skip_bad_records run passed over, each counted once.

  Thread-safe: tf.data calls `add` from its reader threads. A record read again in a
  later epoch is not counted again.
  """

  def __init__(self):
    self._lock = threading.Lock()
    self._records: Dict[tuple, str] = {}  # (path, number or "missing") -> its line
    self._missing = 0

  def add(self, bad: tfrecord_frames.BadRecord) -> None:
    with self._lock:
      key = (bad.path, bad.number)
      if key not in self._records:
        self._records[key] = str(bad)
        tf.get_logger().warning("skipped a damaged record: %s", bad)

  def add_missing(self, path: str, count: int, why: str) -> None:
    """`count` records (0: unknown) that stats.json promises but `path` does not hold."""
    with self._lock:
      if (path, "missing") not in self._records:
        self._records[(path, "missing")] = f"{path}: {why}"
        self._missing += count

  def count(self) -> int:
    """Records skipped: damaged frames, and records missing from shards."""
    with self._lock:
      return sum(1 for key in self._records if key[1] != "missing") + self._missing

  def summary(self, limit: int = 3) -> str:
    with self._lock:
      lines = list(self._records.values())
    more = f"; and {len(lines) - limit} more" if len(lines) > limit else ""
    return "; ".join(lines[:limit]) + more


# What TF's parser says after "Name: path: record N, " -> what the error says.
_PARSER_ERRORS = (
    (
        re.compile(
            r"Key: (\w+), Index: \d+\.\s+Number of \w+ values != expected\.\s+"
            r"Values size: (\d+) but output shape: \[(\d+)\]"
        ),
        "feature {0!r} has {1} values, expected {2}",
    ),
    (
        re.compile(
            r"Key: (\w+), Index: \d+\.\s+Data types don't match\.\s+"
            r"Data type: (\w+) but expected type: (\w+)"
        ),
        "feature {0!r} holds {1} values, expected {2}",
    ),
    (
        re.compile(r"Feature: (\w+) \(data type: (\w+)\) is required but could not be found"),
        "feature {0!r} ({1}) is missing",
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
        features = tf.train.Example.FromString(record).features.feature
      except message.DecodeError:
        return tfrecord_frames.BadRecord(path, number, offset, NOT_AN_EXAMPLE).error()
      for name, feature in features.items():
        if feature.WhichOneof("kind") is None:
          what = f"feature {name!r} holds no value list"
          return tfrecord_frames.BadRecord(path, number, offset, what).error()
  return None


def _locate_damage(paths: Sequence[str], offsets: Sequence[int]) -> Optional[InputError]:
  """The first damaged record of `paths` that starts at one of `offsets`."""
  for path in paths:
    if not tf.io.gfile.exists(path):
      continue
    for start in offsets:
      frames = tfrecord_frames.walk_frames(path, stop_at=start)
      if frames.end != start:
        continue
      with tfrecord_frames.open_binary(path) as f:
        size = tfrecord_frames.file_size(path)
        problem, _, _ = tfrecord_frames.read_frame(f, start, size)
      if problem and start < size:
        return tfrecord_frames.BadRecord(path, frames.records + 1, start, problem).error()
  return None


def check_shards(input_files: Sequence[str], skipped: Optional[SkippedRecords] = None) -> None:
  """Compares each file with the stats.json the generator wrote beside it, if any.

  A shard cut between two records, or inside a record's header, reads as a shorter
  shard without any error from TF; its size (or, for stats.json files written before
  the sizes were, its record count) tells. Files without a stats.json beside them, or
  not named in it, are not checked.

  Args:
    input_files: the shards.
    skipped: with --skip_bad_records, where records missing from a shard are counted
      (the damaged frame a cut leaves is the reader's to count); None: refuse the shard.

  Raises:
    InputError: "shard: expected N records (B bytes) as stats.json says, found ...".
  """
  stats_by_dir: Dict[str, Optional[dict]] = {}
  for path in input_files:
    directory = os.path.dirname(path)
    if directory not in stats_by_dir:
      stats_by_dir[directory] = _read_stats(os.path.join(directory, pretraining_data.STATS_FILE))
    stats = stats_by_dir[directory]
    expected = None if stats is None else _expected_shard(stats, os.path.basename(path))
    size = tfrecord_frames.file_size(path)
    if size == 0 and expected is None:
      # The generator writes an empty shard only with a stats.json that says so.
      why = "holds no records (an empty file)"
      if skipped is None:
        raise InputError(f"{path}: {why}; drop it from the input files or {REMAKE}")
      skipped.add_missing(path, 0, f"{why}: skipped")
    if expected is None or expected.get("bytes") == size:
      continue
    frames = tfrecord_frames.walk_frames(path)
    if "bytes" not in expected and not frames.problem and frames.records == expected["records"]:
      continue
    want = [f"{expected['records']} records"] if "records" in expected else []
    want += [f"{expected['bytes']} bytes"] if "bytes" in expected else []
    found = f"{frames.records} whole records, {size} bytes"
    if frames.problem:
      found += f"; record {frames.records + 1} (byte {frames.end}): {frames.problem}"
    stats_path = os.path.join(os.path.dirname(path), pretraining_data.STATS_FILE)
    why = f"expected {' and '.join(want)} (as {stats_path} says), found {found}"
    if skipped is not None:
      missing = expected.get("records", 0) - frames.records - (1 if frames.problem else 0)
      if missing > 0:
        skipped.add_missing(path, missing, f"{why}: {missing} records missing")
      continue
    raise InputError(
        f"{path}: {why}: the shard is cut short or was changed; copy it again or {REMAKE}"
    )


def _read_stats(path: str) -> Optional[dict]:
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path, "r") as f:
      stats = json.load(f)
  except (ValueError, UnicodeDecodeError) as e:
    raise InputError(f"{path}: not the generator's stats JSON ({e}); {REMAKE}") from None
  return stats if isinstance(stats, dict) else None


def _expected_shard(stats: dict, name: str) -> Optional[dict]:
  """{"records": n, "bytes": b} (either may be absent) stats.json says `name` holds."""
  for row in stats.get("shards") or ():
    if isinstance(row, dict) and row.get("file") == name:
      return {k: row[k] for k in ("records", "bytes") if isinstance(row.get(k), int)} or None
  num_shards, instances = stats.get("num_output_shards"), stats.get("instances")
  if "shards" in stats or not isinstance(num_shards, int) or not isinstance(instances, int):
    return None
  # An older stats.json: the local generator put instance k in shard k mod n; Beam's
  # writer spreads records as it likes, so its shards cannot be checked one by one.
  if str(stats.get("runner", "")).startswith("beam") or num_shards < 1:
    return None
  names = pretraining_data.shard_names(num_shards)
  if name not in names:
    return None
  table = pretraining_data.shard_table(names, [0] * num_shards, instances)
  return {"records": table[names.index(name)]["records"]}


def describe(skipped: SkippedRecords) -> List[str]:
  """The lines a run with --skip_bad_records prints at its end."""
  if not skipped.count():
    return ["--skip_bad_records: no damaged record was met"]
  return [f"--skip_bad_records: skipped {skipped.count()} records: {skipped.summary()}"]
