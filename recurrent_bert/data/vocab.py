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
# tensorflow-text's FastWordpieceTokenizer packs a token's id and length into one 32-bit
# trie value (core/kernels/fast_wordpiece_tokenizer_utils.h): 8 bits of length, so at most
# 256 UTF-8 bytes per token (not counting a leading "##"), and 22 bits of id, so at most
# 2^22 tokens. Its trie keys are NUL-terminated, so a token cannot hold a NUL. Beyond these
# limits it fails with a RuntimeError naming neither the file nor the line.
MAX_TOKEN_BYTES = 256
MAX_VOCAB_SIZE = 2**22
_BYTE_ORDER_MARK = "\ufeff"


def _check_token(token: str, place: str) -> None:
  """Refuses a token tensorflow-text's WordPiece cannot hold (`place` is "vocab.txt:LINE")."""
  if "\x00" in token:
    raise InputError(
        f"{place}: vocab entry {token!r} holds a NUL character, which a WordPiece "
        "vocabulary cannot; remove it"
    )
  body = token
  if token.startswith(SUFFIX_INDICATOR) and token != SUFFIX_INDICATOR:
    body = token[len(SUFFIX_INDICATOR) :]
  size = len(body.encode("utf-8"))
  if size > MAX_TOKEN_BYTES:
    raise InputError(
        f"{place}: vocab entry of {size} UTF-8 bytes ({token[:20]!r}...); tensorflow-text's "
        f"WordPiece holds at most {MAX_TOKEN_BYTES} (after a leading {SUFFIX_INDICATOR!r})"
    )


def load_vocab(vocab_file: str) -> List[str]:
  """Reads a vocab.txt (one token per line, line i = id i) and checks it.

  Accepts google-research/bert vocabularies unchanged (tokens are stripped of surrounding
  whitespace, as BERT's own reader does; a UTF-8 byte-order mark before the first token is
  dropped). Lines end in \n, \r\n or a lone \r (Python's universal newlines).

  Args:
    vocab_file: path of the vocabulary.

  Returns:
    The tokens, index = id.

  Raises:
    InputError: unreadable file, invalid UTF-8, an empty or duplicate token, a token
      tensorflow-text's WordPiece cannot hold (a NUL, more than MAX_TOKEN_BYTES bytes),
      more than MAX_VOCAB_SIZE tokens, or a missing reserved token; the message names the
      file (and the line: `vocab.txt:LINE: ...`).
  """
  if not io_utils.isfile(vocab_file):
    raise InputError(f"vocab file {vocab_file!r} does not exist")
  tokens: List[str] = []
  first_line_of: Dict[str, int] = {}
  try:
    with io_utils.open_file(vocab_file, "rb") as f:
      # bytes.splitlines splits at exactly \n, \r\n and \r: Python's universal newlines,
      # as Hugging Face's vocab reader sees them.
      raw_lines = f.read().splitlines()
  except OSError as e:
    raise InputError(f"cannot read vocab file {vocab_file!r}: {e.strerror or e}") from e
  for line_number, raw in enumerate(raw_lines, start=1):
    place = f"{vocab_file}:{line_number}"
    try:
      token = raw.decode("utf-8")
    except UnicodeDecodeError as e:
      raise InputError(f"{place}: {io_utils.not_utf8(raw, e)}") from e
    if line_number == 1 and token.startswith(_BYTE_ORDER_MARK):
      token = token[len(_BYTE_ORDER_MARK) :]
    token = token.strip()
    if not token:
      raise InputError(f"{place}: empty vocab entry (line i holds the token of id i-1)")
    if token in first_line_of:
      raise InputError(
          f"{place}: duplicate vocab entry {token!r} (first on line {first_line_of[token]})"
      )
    _check_token(token, place)
    first_line_of[token] = line_number
    tokens.append(token)
  if len(tokens) > MAX_VOCAB_SIZE:
    raise InputError(
        f"{vocab_file}: {len(tokens)} tokens; tensorflow-text's WordPiece holds at most "
        f"{MAX_VOCAB_SIZE}"
    )
  missing = [t for t in RESERVED_TOKENS if t not in first_line_of]
  if missing:
    raise InputError(
        f"{vocab_file}: lacks the reserved token(s) "
        f"{' '.join(missing)}; a BERT vocabulary needs all of "
        f"{' '.join(RESERVED_TOKENS)}"
    )
  return tokens
