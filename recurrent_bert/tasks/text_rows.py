"""Task files read line by line, and what a reader does with a row it cannot use.

Every kind's file readers (GLUE and SuperGLUE, custom tasks, CoNLL, SWAG) and TFDS readers
share these: `read_text_lines` yields each line of a UTF-8 file with its number, or the
reason it is not UTF-8, so that a bad line is named "file:line"; `BadRows` refuses the
first bad row (an `InputError`) or, with skip_bad_rows, skips and lists every one.
"""

from typing import FrozenSet, Iterator, Optional, Tuple

from recurrent_bert import io_utils
from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import InputError

_BYTE_ORDER_MARK = "\ufeff"


def read_text_lines(path: str) -> Iterator[Tuple[int, Optional[str], Optional[str]]]:
  """The lines of a UTF-8 text file, each as (1-based line number, text, problem).

  `text` is the line without its end ("\n" or "\r\n") and, on line 1, without a byte-order
  mark; a line that is not UTF-8 comes as (number, None, what is wrong) so that a reader
  can refuse or skip it and go on. Reads in binary, line by line: memory stays flat.

  Raises:
    InputError: the file cannot be opened.
  """
  try:
    f = io_utils.open_file(path, "rb")
  except OSError as e:
    raise InputError(f"cannot read input file {path!r}: {e.strerror or e}") from e
  with f:
    for line_number, raw in enumerate(f, start=1):
      raw = raw[:-1] if raw.endswith(b"\n") else raw
      raw = raw[:-1] if raw.endswith(b"\r") else raw
      try:
        text = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        yield line_number, None, io_utils.not_utf8(raw, e)
        continue
      yield line_number, text.lstrip(_BYTE_ORDER_MARK) if line_number == 1 else text, None


class BadRows:
  """Where a reader sends the rows it cannot use: the first is refused, or each is skipped.

  Args:
    data: the SplitData being read; skipped rows go to `data.skipped`.
    skip_bad_rows: skip every bad row (and list it) instead of raising at the first.
    tolerated: kinds of bad row skipped even without skip_bad_rows (official quirks).
  """

  def __init__(self, data: SplitData, skip_bad_rows: bool, tolerated: FrozenSet[str] = frozenset()):
    self.data = data
    self.skip_bad_rows = skip_bad_rows
    self.tolerated = tolerated

  def refuse(self, place: str, problem: str, kind: str = "") -> None:
    """Skips the row (when allowed) or raises InputError("place: problem").

    Args:
      place: "file:line" or "source: record N" (errors.at).
      problem: what is wrong with the row.
      kind: the kind of problem, matched against `tolerated`.
    """
    self.refuse_error(InputError(f"{place}: {problem}"), kind)

  def refuse_error(self, error: InputError, kind: str = "") -> None:
    """Skips the row whose reading raised `error` (a message naming its place), or raises it."""
    if not (self.skip_bad_rows or kind in self.tolerated):
      raise error
    self.data.skipped.append(str(error))

  def check_not_empty(self) -> None:
    """A file without a usable example is refused, saying why when rows were skipped."""
    if self.data.examples:
      return
    if self.data.skipped:
      raise InputError(
          f"{self.data.source}: no usable example: all {len(self.data.skipped)} rows are bad, "
          f"e.g. {self.data.skipped[0]}"
      )
    raise InputError(f"{self.data.source}: no examples")
