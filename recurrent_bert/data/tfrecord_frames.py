"""TFRecord framing read without TensorFlow: every frame checked, every problem located.

A TFRecord file is a run of frames, each

    length  uint64 little-endian   (8 bytes)
    masked CRC-32C of the length   (4 bytes)
    data    `length` bytes         (a serialized tf.train.Example here)
    masked CRC-32C of the data     (4 bytes)

This module is the package's one reader of that framing, the spec the `tf.data` pipeline of
`pretraining_dataset` is tested against (TensorFlow's own reader is what it runs, for speed:
C++, parallel). It is used where TensorFlow's reader says too little or too late:

  * `walk_frames` locates a damaged record after the fact (TensorFlow names a byte offset,
    not a file or a record), and walks a shard that stats.json says is short;
  * `read_frames` streams a file's records with both CRCs checked, stopping at the first
    damaged frame with its file, 1-based record number and byte offset, or skipping it
    (--skip_bad_records), for the pipeline and for any reader that has no TensorFlow.

Files are opened with `open`, or with `tf.io.gfile` for a URL (gs://, ram://), imported only then.
"""

import dataclasses
import logging
import os
import struct
import threading
from typing import BinaryIO, Callable, Dict, Iterator, List, Optional, Tuple

from recurrent_bert.data import example_codec
from recurrent_bert.errors import InputError
from recurrent_bert.errors import at

HEADER_BYTES = 12  # the length (8) and its CRC (4)
FOOTER_BYTES = 4  # the data's CRC
REMAKE = "make the records again with `python -m recurrent_bert.tools.create_pretraining_data`"


def open_binary(path: str) -> BinaryIO:
  """`path` opened for reading bytes: a local file, or a URL through `tf.io.gfile`."""
  if "://" in path:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return tf.io.gfile.GFile(path, "rb")
  return open(path, "rb")


def exists(path: str) -> bool:
  if "://" in path:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return tf.io.gfile.exists(path)
  return os.path.exists(path)


def _size(f: BinaryIO) -> int:
  f.seek(0, 2)  # GFile's seek returns None: ask tell()
  return f.tell()


def file_size(path: str) -> int:
  with open_binary(path) as f:
    return _size(f)


def record_name(path: str, number: int, offset: int) -> str:
  """ "path: record N (byte B)": how every error names a record (1-based N)."""
  return f"{at(path, record=number)} (byte {offset})"


@dataclasses.dataclass(frozen=True)
class BadRecord:
  """A frame that cannot be read: record `number` (1-based) of `path`, at byte `offset`."""

  path: str
  number: int
  offset: int
  what: str

  def __str__(self) -> str:
    return f"{record_name(self.path, self.number, self.offset)}: {self.what}"

  def error(self) -> InputError:
    return InputError(f"{self}; {REMAKE}")


def read_frame(
    f: BinaryIO, start: int, size: int, check_data: bool = True
) -> Tuple[str, int, bytes]:
  """(what is wrong with the frame at `start` of the open file `f` or "", where it ends, its data).

  Where the header cannot be trusted, the frame "ends" at the end of the file: nothing
  after it can be found. With `check_data` False only the header is read (a seek per
  record when walking a file) and the data returned is b"".
  """
  f.seek(start)
  header = f.read(HEADER_BYTES)
  if len(header) < HEADER_BYTES:
    return f"the file ends inside its header ({len(header)} bytes)", size, b""
  length, length_crc = struct.unpack("<QI", header)
  if example_codec.masked_crc(header[:8]) != length_crc:
    return "its header is corrupted (checksum mismatch)", size, b""
  end = start + HEADER_BYTES + length + FOOTER_BYTES
  if end > size:
    return f"the file ends inside it ({size - start} of its {end - start} bytes)", size, b""
  if not check_data:
    return "", end, b""
  data = f.read(length)
  if example_codec.masked_crc(data) != struct.unpack("<I", f.read(FOOTER_BYTES))[0]:
    return "its data is corrupted (checksum mismatch)", end, b""
  return "", end, data


@dataclasses.dataclass(frozen=True)
class Frames:
  """What walking a file's frames found.

  Attributes:
    records: whole records before `end`.
    end: the offset the walk stopped at.
    problem: "" when the file ends cleanly at `end`; else what is wrong with record
      `records + 1`, which starts there.
  """

  records: int
  end: int
  problem: str


def walk_frames(path: str, stop_at: Optional[int] = None, check_data: bool = False) -> Frames:
  """Walks the frames of `path`, to its end or to the first frame at or past `stop_at`."""
  with open_binary(path) as f:
    size = _size(f)
    position, records = 0, 0
    while position < size and (stop_at is None or position < stop_at):
      problem, end, _ = read_frame(f, position, size, check_data)
      if problem:
        return Frames(records, position, problem)
      position, records = end, records + 1
  return Frames(records, position, "")


def read_frames(
    path: str, on_bad_record: Optional[Callable[[BadRecord], None]] = None
) -> Iterator[Tuple[int, int, bytes]]:
  """Yields (1-based record number, byte offset, data) of every frame of `path`, CRCs checked.

  Args:
    path: a TFRecord file (uncompressed).
    on_bad_record: None: a damaged frame raises. Else called with each damaged frame,
      which is skipped: a frame whose data CRC fails is passed over (its length is
      trusted: its header's CRC held); one whose header fails, or that the file ends
      inside, ends the file (nothing after it can be found).

  Raises:
    InputError: "path: record N (byte B): what", without `on_bad_record`.
  """
  with open_binary(path) as f:
    size = _size(f)
    position, number = 0, 1
    while position < size:
      problem, end, data = read_frame(f, position, size)
      if problem:
        bad = BadRecord(path, number, position, problem)
        if on_bad_record is None:
          raise bad.error()
        on_bad_record(bad)
      else:
        yield number, position, data
      position, number = end, number + 1


class SkippedRecords:
  """The damaged records a --skip_bad_records run passed over, each counted once.

  Thread-safe: tf.data calls `add` from its reader threads. A record read again in a
  later epoch is not counted again.
  """

  def __init__(self):
    self._lock = threading.Lock()
    self._lines: Dict[tuple, str] = {}  # (path, record number or "missing") -> its line
    self._count = 0

  def add(self, bad: BadRecord) -> None:
    with self._lock:
      key = (bad.path, bad.number)
      if key not in self._lines:
        self._lines[key] = str(bad)
        self._count += 1
        logging.warning("skipped a damaged record: %s", bad)

  def add_missing(self, path: str, count: int, why: str) -> None:
    """`count` records (0: unknown) that stats.json promises but `path` does not hold."""
    with self._lock:
      if (path, "missing") not in self._lines:
        self._lines[(path, "missing")] = f"{path}: {why}"
        self._count += count

  def count(self) -> int:
    """Records skipped: damaged frames, and records missing from shards."""
    with self._lock:
      return self._count

  def summary(self, limit: int = 3) -> str:
    with self._lock:
      lines = list(self._lines.values())
    more = f"; and {len(lines) - limit} more" if len(lines) > limit else ""
    return "; ".join(lines[:limit]) + more


def describe(skipped: SkippedRecords) -> List[str]:
  """The lines a run with --skip_bad_records prints at its end."""
  if not skipped.count():
    return ["--skip_bad_records: no damaged record was met"]
  return [f"--skip_bad_records: skipped {skipped.count()} records: {skipped.summary()}"]
