"""vocab.txt and SentencePiece model reading and the reserved tokens, without TensorFlow
(workers of the data tools import it without paying TensorFlow's start-up)."""

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple, Union

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert.errors import InputError

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"
MASK_TOKEN = "[MASK]"
# The order in which rbert-build-vocab writes them (ids 0..4 of our own vocabularies).
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
      more than MAX_VOCAB_SIZE tokens, a missing reserved token, or no token but special
      ones ([PAD], [unused0], ...); the message names the file (and the line:
      `vocab.txt:LINE: ...`).
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
  # Without a single word piece every word of every text becomes [UNK]: training on it
  # would run to its end and learn nothing.
  if all(is_special_token(t) for t in tokens):
    shown = " ".join(tokens[:8]) + (" ..." if len(tokens) > 8 else "")
    raise InputError(
        f"{vocab_file}: holds only special tokens ({shown}): it cannot tokenize any text; "
        "build one with `python -m recurrent_bert.tools.build_vocab`"
    )
  return tokens


def is_special_token(token: str) -> bool:
  """Whether `token` is a bracketed special token ([PAD], [unused7], ...), not a word piece."""
  return len(token) > 2 and token.startswith("[") and token.endswith("]")


# ------------------------------------------------------------------ SentencePiece models

# A SentencePiece model file (the `.model` that rbert-build-vocab --tokenizer=unigram|bpe
# writes, or ALBERT's / T5's): a serialized ModelProto, not a token list.
SENTENCEPIECE_SUFFIX = ".model"
# SentencePiece marks the piece that starts a word (follows a space) with U+2581.
WORD_START_MARKER = "\u2581"


def vocab_kind(vocab_file: str) -> str:
  """Which tokenizer a vocabulary file is for: model_dir.WORDPIECE or model_dir.SENTENCEPIECE.

  A `.model` file is a SentencePiece model; so is any file whose first byte is "\n" (a
  ModelProto starts with the tag of its first `pieces` entry, 0x0A; a vocab.txt cannot:
  its first line would be empty). Everything else is a WordPiece vocab.txt. The one
  definition of the kind, recorded in tokenizer.json and stats.json.

  Args:
    vocab_file: path (local, gs://...) of the vocabulary; need not exist (then by name).
  """
  if vocab_file.endswith(SENTENCEPIECE_SUFFIX):
    return layout.SENTENCEPIECE
  try:
    with io_utils.open_file(vocab_file, "rb") as f:
      first = f.read(1)
  except (OSError, ValueError):
    return layout.WORDPIECE
  return layout.SENTENCEPIECE if first == b"\n" else layout.WORDPIECE


def read_bytes(path: str) -> bytes:
  """The bytes of a local or gs:// file; InputError naming it when missing or unreadable."""
  if not io_utils.isfile(path):
    raise InputError(f"vocab file {path!r} does not exist")
  try:
    with io_utils.open_file(path, "rb") as f:
      return f.read()
  except OSError as e:
    raise InputError(f"cannot read vocab file {path!r}: {e.strerror or e}") from e


def fingerprint(path: str) -> str:
  """The SHA-256 of a vocabulary file's bytes (vocab.txt or a SentencePiece model): which
  vocabulary, wherever the file was copied to."""
  import hashlib

  return hashlib.sha256(read_bytes(path)).hexdigest()


def load_sentencepiece(model: Union[str, bytes], where: str = ""):
  """A `sentencepiece.SentencePieceProcessor` of a model file or its serialized proto.

  Args:
    model: the path of a `.model` file, or its bytes.
    where: names the model in messages (default: the path).

  Raises:
    InputError: unreadable file or not a SentencePiece model (named).
  """
  import sentencepiece  # not at the top: WordPiece users never pay for it

  proto = model if isinstance(model, bytes) else read_bytes(model)
  where = repr(where or model) if where or isinstance(model, str) else "the SentencePiece model"
  processor = sentencepiece.SentencePieceProcessor()
  try:
    processor.LoadFromSerializedProto(proto)
  except (RuntimeError, OSError) as e:
    raise InputError(
        f"{where} is not a SentencePiece model ({str(e).splitlines()[0]}); give a .model "
        "written by rbert-build-vocab --tokenizer=unigram|bpe (or a vocab.txt)"
    ) from None
  return processor


@dataclasses.dataclass(frozen=True)
class Vocabulary:
  """What masking and the data tools need of any vocabulary, without TensorFlow.

  Attributes:
    kind: model_dir.WORDPIECE or model_dir.SENTENCEPIECE.
    tokens: token (piece) strings, index = id.
    word_starts: per id, whether the token starts a word: every token but `##`
      continuations for WordPiece; pieces starting with U+2581 and the special symbols
      ([PAD] [CLS] [SEP] [MASK], control pieces) for SentencePiece. Whole-word masking
      groups a token that does not start a word with the token before it.
    pad_id, unk_id, cls_id, sep_id, mask_id: the reserved tokens' ids.
    folds_case: SentencePiece: whether the model's normaliser lower-cases (its
      do_lower_case, fixed when it was trained); None for WordPiece (the tokenizer's
      do_lower_case decides).
  """

  kind: str
  tokens: Tuple[str, ...]
  word_starts: Tuple[bool, ...]
  pad_id: int
  unk_id: int
  cls_id: int
  sep_id: int
  mask_id: int
  folds_case: Optional[bool] = None

  @property
  def vocab_size(self) -> int:
    return len(self.tokens)

  @property
  def special_ids(self) -> Dict[str, int]:
    return {
        "pad": self.pad_id,
        "unk": self.unk_id,
        "cls": self.cls_id,
        "sep": self.sep_id,
        "mask": self.mask_id,
    }

  @classmethod
  def from_wordpiece_tokens(cls, tokens: Sequence[str]) -> "Vocabulary":
    """A WordPiece vocabulary of `tokens` (as `load_vocab` returns them)."""
    index = {t: i for i, t in enumerate(tokens)}
    missing = [t for t in RESERVED_TOKENS if t not in index]
    if missing:
      raise InputError(f"vocabulary lacks {' '.join(missing)}")
    return cls(
        kind=layout.WORDPIECE,
        tokens=tuple(tokens),
        word_starts=tuple(
            not (t.startswith(SUFFIX_INDICATOR) and len(t) > len(SUFFIX_INDICATOR)) for t in tokens
        ),
        pad_id=index[PAD_TOKEN],
        unk_id=index[UNK_TOKEN],
        cls_id=index[CLS_TOKEN],
        sep_id=index[SEP_TOKEN],
        mask_id=index[MASK_TOKEN],
    )

  @classmethod
  def from_sentencepiece(cls, model: Union[str, bytes], where: str = "") -> "Vocabulary":
    """The vocabulary of a SentencePiece model (file path or serialized proto).

    [PAD] and [UNK] are the model's pad and unknown pieces (whatever their names, so
    ALBERT's <pad>/<unk> do); [CLS] [SEP] [MASK] are looked up by name.
    """
    processor = load_sentencepiece(model, where)
    where = where or (model if isinstance(model, str) else "the SentencePiece model")
    tokens = tuple(processor.IdToPiece(i) for i in range(processor.GetPieceSize()))
    index = {t: i for i, t in enumerate(tokens)}
    missing = [t for t in (CLS_TOKEN, SEP_TOKEN, MASK_TOKEN) if t not in index]
    if processor.pad_id() < 0:
      missing.insert(0, "a pad piece (pad_id)")
    if missing:
      raise InputError(
          f"{where}: the SentencePiece model lacks {', '.join(missing)}; build one with "
          "rbert-build-vocab --tokenizer=unigram|bpe"
      )
    special = {processor.pad_id(), index[CLS_TOKEN], index[SEP_TOKEN], index[MASK_TOKEN]}
    word_starts = tuple(
        t.startswith(WORD_START_MARKER) or i in special or processor.IsControl(i)
        for i, t in enumerate(tokens)
    )
    return cls(
        kind=layout.SENTENCEPIECE,
        tokens=tokens,
        word_starts=word_starts,
        pad_id=processor.pad_id(),
        unk_id=processor.unk_id(),
        cls_id=index[CLS_TOKEN],
        sep_id=index[SEP_TOKEN],
        mask_id=index[MASK_TOKEN],
        folds_case=processor.Normalize("A") == processor.Normalize("a"),
    )


def read_vocabulary(vocab_file: str) -> Vocabulary:
  """The Vocabulary of a vocab.txt or a SentencePiece `.model` (`vocab_kind` decides).

  Raises:
    InputError: as `load_vocab` for a vocab.txt; a file that is no SentencePiece model or
      lacks the reserved pieces, for a `.model`. The message names the file.
  """
  if vocab_kind(vocab_file) == layout.SENTENCEPIECE:
    return Vocabulary.from_sentencepiece(vocab_file)
  return Vocabulary.from_wordpiece_tokens(load_vocab(vocab_file))
