"""Shared pieces of the bad-input property suites (hypothesis): mutations and the invariant.

Each format's suite starts from a valid file, applies one mutation drawn from the
strategies here (or its own), reads the result with the package's real reader, and checks
the invariant of issue 15 with `check_outcome`: the reader either raises `InputError`
naming the file (and the line or record, where the mutation has one), or returns what an
independent expectation says the mutated file holds — usually the valid file's own examples,
for mutations that must not change the meaning (CRLF line ends, a final newline dropped).
Any other exception, or a silently different result, fails the property.
"""

import collections
import os
from typing import Callable, List, Optional, Sequence

from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis import strategies as st

from recurrent_bert.errors import InputError

# Numbers a float column must refuse (or, for ints, a label column): each parses somewhere.
BAD_NUMBERS = ("nan", "NaN", "inf", "-inf", "1e400", "1_0", "０.５", "", " ", "0x10", "1,5")
# Text that is not UTF-8, and characters that often break a line-based reader.
NON_UTF8 = (b"\xe9", b"\xff\xfe", b"\xc3")
ODD_CHARACTERS = ("\x00", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029", "\ufeff")


# (format, outcome) -> count, over the run; printed at the end of a pytest run when
# RB_FUZZ_EXAMPLES is set (the campaign: `RB_FUZZ_EXAMPLES=500 pytest -k bad_input -s`).
TALLY: collections.Counter = collections.Counter()


def fuzz_settings(max_examples: int = 25):
  """Deterministic hypothesis settings for a bad-input property (no example database, no
  deadline: TensorFlow's first call is slow). RB_FUZZ_EXAMPLES raises the count for a
  campaign; the suite keeps the small default."""
  return settings(
      max_examples=int(os.environ.get("RB_FUZZ_EXAMPLES", max_examples)),
      derandomize=True,
      deadline=None,
      database=None,
      suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
  )


def lines_of(data: bytes) -> List[bytes]:
  """The lines of a file, each with its end (b"\\n" or b"\\r\\n"), as splitlines keeps them."""
  return data.splitlines(keepends=True)


@st.composite
def line_index(draw, data: bytes, first: int = 0) -> int:
  """A 0-based index of one of `data`'s lines, from `first` (e.g. 1 to skip a header)."""
  return draw(st.integers(min_value=first, max_value=len(lines_of(data)) - 1))


def replace_line(data: bytes, index: int, new_line: bytes) -> bytes:
  lines = lines_of(data)
  ending = b"\n" if lines[index].endswith(b"\n") else b""
  lines[index] = new_line.rstrip(b"\r\n") + ending
  return b"".join(lines)


def insert_line(data: bytes, index: int, new_line: bytes) -> bytes:
  lines = lines_of(data)
  lines.insert(index, new_line.rstrip(b"\r\n") + b"\n")
  return b"".join(lines)


def delete_line(data: bytes, index: int) -> bytes:
  lines = lines_of(data)
  del lines[index]
  return b"".join(lines)


def to_crlf(data: bytes) -> bytes:
  """Windows line ends: must not change what any line-based reader returns."""
  return b"".join(line.rstrip(b"\r\n") + b"\r\n" for line in lines_of(data))


def check_outcome(
    fmt: str,
    read: Callable[[], object],
    path: str,
    expected: Optional[object] = None,
    line: Optional[int] = None,
    record: Optional[int] = None,
) -> Optional[InputError]:
  """Runs `read` and checks issue 15's invariant.

  Args:
    fmt: the format's name in the campaign tally ("glue tsv", "pretraining tfrecord", ...).
    read: calls the package's real reader on the mutated file.
    path: the mutated file; an error's message must name it.
    expected: what the reader must return when it accepts the file (None: it must refuse).
    line: if given, a refusal must name this 1-based line ("path:line").
    record: if given, a refusal must name this 1-based record ("record N").

  Returns:
    The InputError raised, or None if the file was accepted (and equalled `expected`).
  """
  try:
    result = read()
  except InputError as e:
    TALLY[fmt, "clear error"] += 1
    message = str(e)
    assert path in message or _basename(path) in message, f"error does not name {path}: {message}"
    if line is not None:
      assert f":{line}" in message, f"error does not name line {line}: {message}"
    if record is not None:
      assert f"record {record}" in message, f"error does not name record {record}: {message}"
    assert "\n" not in message.strip(), f"error is not one line: {message!r}"
    return e
  assert expected is not None, f"{path}: accepted a file that must be refused"
  assert result == expected, f"{path}: accepted with a different result"
  TALLY[fmt, "accepted, same as expected"] += 1
  return None


def _basename(path: str) -> str:
  return path.rstrip("/").rsplit("/", 1)[-1]


def one_of_texts(texts: Sequence[str]):
  return st.sampled_from(list(texts))
