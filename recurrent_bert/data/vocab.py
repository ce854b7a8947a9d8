"""vocab.txt reading and the reserved tokens, without TensorFlow (workers of the data tools
import it without paying TensorFlow's start-up)."""

from typing import Dict, List

from recurrent_bert import io_utils
from recurrent_bert.io_utils import InputError

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"
MASK_TOKEN = "[MASK]"
# The order in which tools/build_vocab.py writes them (ids 0..4 of our own vocabularies).
# google-research/bert vocabularies keep them at other ids ([PAD]=0, [UNK]=100, ...);
# ids are always looked up by name, never assumed.
RESERVED_TOKENS = (PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN)
SUFFIX_INDICATOR = "##"
DEFAULT_MAX_BYTES_PER_WORD = 100


def load_vocab(vocab_file: str) -> List[str]:
  """Reads a vocab.txt (one token per line, line i = id i) and checks it.

  Accepts google-research/bert vocabularies unchanged (tokens are stripped of surrounding
  whitespace, as BERT's own reader does).

  Args:
    vocab_file: path of the vocabulary.

  Returns:
    The tokens, index = id.

  Raises:
    InputError: unreadable file, invalid UTF-8, an empty or duplicate token, or a missing
      reserved token; the message names the file (and the line).
  """
  if not io_utils.isfile(vocab_file):
    raise InputError(f"vocab file {vocab_file!r} does not exist")
  tokens: List[str] = []
  first_line_of: Dict[str, int] = {}
  try:
    with io_utils.open_file(vocab_file, "rb") as f:
      raw_lines = f.read().split(b"\n")
  except OSError as e:
    raise InputError(f"cannot read vocab file {vocab_file!r}: {e.strerror or e}") from e
  if raw_lines and raw_lines[-1] == b"":
    raw_lines.pop()  # the final newline
  for line_number, raw in enumerate(raw_lines, start=1):
    try:
      token = raw.decode("utf-8").strip()
    except UnicodeDecodeError as e:
      raise InputError(f"{vocab_file}:{line_number}: vocab line is not valid UTF-8") from e
    if not token:
      raise InputError(f"{vocab_file}:{line_number}: empty vocab entry")
    if token in first_line_of:
      raise InputError(
          f"{vocab_file}:{line_number}: duplicate vocab entry {token!r} "
          f"(first on line {first_line_of[token]})"
      )
    first_line_of[token] = line_number
    tokens.append(token)
  missing = [t for t in RESERVED_TOKENS if t not in first_line_of]
  if missing:
    raise InputError(
        f"vocab file {vocab_file!r} lacks the reserved token(s) "
        f"{' '.join(missing)}; a BERT vocabulary needs all of "
        f"{' '.join(RESERVED_TOKENS)}"
    )
  return tokens
