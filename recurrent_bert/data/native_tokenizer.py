"""BERT WordPiece (and SentencePiece) tokenization at native speed, without TensorFlow.

The same algorithm as `tokenization.BertWordpieceTokenizer` (its module docstring), run by
Hugging Face `tokenizers` (Rust): BertNormalizer (drop control characters, spaces around
CJK ideographs, lower-casing with accent stripping when uncased), BertPreTokenizer
(whitespace and punctuation), WordPiece with `##` continuations. The generator's workers
tokenize whole chunks with it and never import TensorFlow; the model is served with the
in-graph tokenizer, and tests/data/test_tokenization.py checks the two give the same ids
on real text.

Word boundaries are the same: both delete NUL, U+FFFD, controls (U+000B, U+000C,
U+001C-U+001F, U+0085 included) and format characters, and split on tab, newline, carriage
return and the Unicode space, line and paragraph separators (U+2028 and U+2029 included);
tests/data/test_word_boundaries.py checks it on random text. Known edge differences (none
in real prose): the word-length limit counts characters here and UTF-8 bytes in
tensorflow-text (only words of more than ~50 non-ASCII characters); private-use code
points (Co) and some unassigned ones are dropped here and kept there; CJK Extension E-F
(U+2B820-U+2CEAF) are words of their own only there (as in google-research/bert); and
characters newer than the Unicode tables of TensorFlow's RE2 (some 100 punctuation marks
of Unicode 12-15, a few letters) are classed differently.

A SentencePiece model is run by the `sentencepiece` package (`NativeSentencepieceTokenizer`):
the same normaliser and lattice as tensorflow-text's in-graph tokenizer (an older build of
the same C++ library), but not the same tie rule for unigram models, so the lines where
the two may part are segmented again here the in-graph way (`_InGraphUnigram`).
"""

import itertools
import math
import struct
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from recurrent_bert import model_dir as layout
from recurrent_bert.data import vocab as vocab_lib


class _NativeTokenizer:
  """What the generator reads of a TF-free tokenizer; subclasses implement `tokenize`.

  Attributes:
    vocab: tokens, index = id; vocab_size, unk_id, cls_id, sep_id, mask_id as the in-graph
    tokenizer's; is_word_start: bool [vocab_size] (`vocab.Vocabulary.word_starts`);
    is_continuation: its negation.
  """

  def __init__(self, vocabulary: vocab_lib.Vocabulary):
    self.vocab = list(vocabulary.tokens)
    self.vocab_size = vocabulary.vocab_size
    self.unk_id = vocabulary.unk_id
    self.cls_id = vocabulary.cls_id
    self.sep_id = vocabulary.sep_id
    self.mask_id = vocabulary.mask_id
    self.is_word_start = np.array(vocabulary.word_starts, bool)
    self.is_continuation = ~self.is_word_start
    self._ids = {token: i for i, token in enumerate(self.vocab)}

  def token_id(self, token: str) -> int:
    return self._ids.get(token, self.unk_id)

  def tokenize(self, lines: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
    """Piece ids of many lines at once.

    Args:
      lines: the texts [num_lines].

    Returns:
      (ids int32 [total pieces], row_splits int64 [num_lines + 1]): line i's pieces are
      ids[row_splits[i]:row_splits[i + 1]].
    """
    raise NotImplementedError

  def tokenize_lists(self, lines: Sequence[str]) -> List[List[int]]:
    """Piece ids per line, as Python lists (for tests and small inputs)."""
    flat, splits = self.tokenize(lines)
    return [flat[a:b].tolist() for a, b in zip(splits[:-1], splits[1:])]


class NativeWordpieceTokenizer(_NativeTokenizer):
  """Tokenizes batches of lines into flat piece ids (numpy), Rust-speed."""

  def __init__(
      self,
      vocab_file: str,
      do_lower_case: bool = True,
      max_chars_per_word: int = vocab_lib.DEFAULT_MAX_BYTES_PER_WORD,
  ):
    from tokenizers import Tokenizer
    from tokenizers import models
    from tokenizers import normalizers
    from tokenizers import pre_tokenizers

    super().__init__(vocab_lib.Vocabulary.from_wordpiece_tokens(vocab_lib.load_vocab(vocab_file)))
    tokenizer = Tokenizer(
        models.WordPiece(
            self._ids,
            unk_token=vocab_lib.UNK_TOKEN,
            max_input_chars_per_word=max_chars_per_word,
            continuing_subword_prefix=vocab_lib.SUFFIX_INDICATOR,
        )
    )
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=True,
        strip_accents=bool(do_lower_case),
        lowercase=bool(do_lower_case),
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    self._tokenizer = tokenizer

  def tokenize(self, lines: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
    encodings = self._tokenizer.encode_batch(list(lines), add_special_tokens=False)
    return _flatten([e.ids for e in encodings])


class NativeSentencepieceTokenizer(_NativeTokenizer):
  """A SentencePiece model through the `sentencepiece` package (C++), without TensorFlow.

  Gives the ids of the in-graph `sentencepiece_tokenizer.SentencepieceTokenizer`
  (tensorflow-text), which the SavedModel and the fine-tuning features use: BPE and most
  unigram lines as the package encodes them; unigram lines where the two libraries'
  tie rules may part (`_InGraphUnigram`) segmented again with tensorflow-text's rule
  (tests/data/test_sentencepiece.py). The model's normaliser fixes the casing: there is
  no do_lower_case.
  """

  def __init__(self, model_file: str):
    proto = vocab_lib.read_bytes(model_file)
    super().__init__(vocab_lib.Vocabulary.from_sentencepiece(proto, where=model_file))
    self._processor = vocab_lib.load_sentencepiece(proto, where=model_file)
    piece_types, model_type = _read_model_proto(proto)
    self._unigram = (
        _InGraphUnigram(self._processor, piece_types) if model_type == _UNIGRAM else None
    )

  def tokenize(self, lines: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
    lines = list(lines)
    # One thread: the generator's workers already use the cores.
    rows = self._processor.EncodeAsIds(lines, num_threads=1)
    flat, row_splits = _flatten(rows)
    if self._unigram is None:  # BPE: no ties to break (the libraries agree)
      return flat, row_splits
    disputed = self._unigram.disputed_lines(flat, row_splits)
    for i in disputed.tolist():
      rows[i] = self._unigram.encode(self._processor.Normalize(lines[i]))
    return _flatten(rows) if len(disputed) else (flat, row_splits)


# ModelProto (sentencepiece_model.proto) fields read here: pieces = 1 (SentencePiece: type
# = 3), trainer_spec = 2 (TrainerSpec: model_type = 3). Read off the wire format, not with
# the package's sentencepiece_model_pb2: that one needs protobuf 7, and Beam holds it
# below 7 (constraints.txt).
_PIECES, _TRAINER_SPEC, _PIECE_TYPE, _MODEL_TYPE = 1, 2, 3, 3
_NORMAL, _USER_DEFINED, _BYTE = 1, 4, 6  # SentencePiece.Type
_UNIGRAM = 1  # TrainerSpec.ModelType, also the default
_FLOAT32 = struct.Struct("<f")
_FLT_MIN = 1.1754943508222875e-38  # the C++ library's starting max_score
_UNK_PENALTY = 10.0  # [UNK] scores the lowest piece score minus this (the C++ library's)
_NO_PIECE_FURTHER = object()  # `_InGraphUnigram._trie`: no piece starts with this text
# Limits of segments of several pieces remembered (per worker); cleared when this many.
_MAX_CACHED_SEGMENTS = 1 << 18


def _f32(x: float) -> float:
  """x rounded to float32 (nearest, ties to even), as a Python float."""
  return _FLOAT32.unpack(_FLOAT32.pack(x))[0]


def _read_varint(buf: bytes, i: int) -> Tuple[int, int]:
  value = shift = 0
  while True:
    byte = buf[i]
    value |= (byte & 0x7F) << shift
    i += 1
    if byte < 0x80:
      return value, i
    shift += 7


def _proto_fields(buf: bytes):
  """(field number, value) of a serialized protobuf message: int (varint) or bytes."""
  i = 0
  while i < len(buf):
    key, i = _read_varint(buf, i)
    wire = key & 7
    if wire == 0:
      value, i = _read_varint(buf, i)
    elif wire == 2:
      size, i = _read_varint(buf, i)
      value, i = buf[i : i + size], i + size
    else:  # fixed 64 or 32 bits
      size = {1: 8, 5: 4}[wire]
      value, i = buf[i : i + size], i + size
    yield key >> 3, value


def _read_model_proto(proto: bytes) -> Tuple[List[int], int]:
  """(SentencePiece.Type of every piece, index = id; TrainerSpec.ModelType) of a model."""
  types, model_type = [], _UNIGRAM
  for field, value in _proto_fields(proto):
    if field == _PIECES:
      types.append(_NORMAL)  # the proto's default
      for piece_field, piece_value in _proto_fields(value):
        if piece_field == _PIECE_TYPE:
          types[-1] = piece_value
    elif field == _TRAINER_SPEC:
      for spec_field, spec_value in _proto_fields(value):
        if spec_field == _MODEL_TYPE:
          model_type = spec_value
  return types, model_type


class _InGraphUnigram:
  """tensorflow-text's unigram segmentation, in Python, for lines the package may split
  otherwise.

  Both libraries keep, per end position of the normalized text, the best path ending
  there (Viterbi over the pieces' scores), stored as float32, and replace it only by a
  strictly better candidate, trying last pieces from the leftmost start. They differ in
  how they add: the `sentencepiece` package (0.2.x) adds in float32, tensorflow-text's
  build (2.21) in double (its user-defined-symbol bonus `length * max_score - 0.1` is a
  double, which makes the piece score one) and compares the double with the float32 it
  stored. Two segmentations of equal real score, e.g. ['00', '000'] and ['000', '00'] of
  '00000' (a sum is the same in any order, whatever the scores), then tie in the package,
  which keeps the first (the longest last piece), while tensorflow-text takes the second
  when the first's sum was rounded down. Which one it takes depends on the magnitudes of
  the line's scores before the tie, so no rule over pieces alone reproduces it.

  So the package's ids stand where no such near-tie can exist, and the rest is segmented
  here (`encode`). Every path passes between two characters that no piece holds side by
  side (before each "▁" piece, between most punctuation and letters), so a line is a run
  of independent segments cut there. Two candidates at the same end can only be ranked
  differently when within a float32 ulp of the path score; each segment's smallest gap
  between the best and the second-best candidate at any of its ends is computed once in
  double (`_segment_limit`), and a line is segmented again when a segment's gap is
  within the rounding error of its line (`disputed_lines`): few lines but those with
  digit or punctuation runs, each ~50x slower than the package's.
  """

  def __init__(self, processor, piece_types: Sequence[int]):
    """Args: processor: the model's `sentencepiece.SentencePieceProcessor`;
    piece_types: SentencePiece.Type per id (`_read_model_proto`)."""
    scores = [processor.GetScore(i) for i in range(processor.GetPieceSize())]
    normal = [s for s, t in zip(scores, piece_types) if t == _NORMAL]
    max_score = max([_FLT_MIN] + normal)
    self.unk_id = processor.unk_id()
    self._unk_score = _f32(min(normal, default=0.0) - _UNK_PENALTY)
    self._tokens = [processor.IdToPiece(i) for i in range(len(scores))]
    # What the C++ trie holds: piece -> (id, score); unused, control, byte and unknown
    # pieces are not in it.
    self._pieces: Dict[str, Tuple[int, float]] = {}
    for i, (piece, kind) in enumerate(zip(self._tokens, piece_types)):
      if kind == _NORMAL:
        self._pieces[piece] = (i, scores[i])
      elif kind == _USER_DEFINED:  # tensorflow-text's bonus, in double (bytes, not chars)
        self._pieces[piece] = (i, _f32(len(piece.encode("utf-8")) * max_score) - 0.1)
    # Every prefix of a piece: its (id, score) if a piece, else None (longer pieces start
    # with it). A lookup walks the pieces at a position like the C++ trie.
    self._trie: Dict[str, Optional[Tuple[int, float]]] = {}
    for piece in self._pieces:
      for end in range(1, len(piece)):
        self._trie.setdefault(piece[:end], None)
    self._trie.update(self._pieces)
    # Character pairs some piece holds side by side (a path may cross between them), as
    # sorted codes first * 0x110000 + second; per id its first and last characters.
    pairs = {(ord(p[i]), ord(p[i + 1])) for p in self._pieces for i in range(len(p) - 1)}
    self._crossable = np.array(sorted(a * 0x110000 + b for a, b in pairs), np.int64)
    self._first_char = np.array([ord(t[0]) for t in self._tokens], np.int64)
    self._last_char = np.array([ord(t[-1]) for t in self._tokens], np.int64)
    # Per id: magnitude of its score (their sum bounds a line's path scores); whether it
    # hides its text ([UNK], byte pieces: lines with them are segmented here).
    self._abs_scores = np.full(len(scores), abs(self._unk_score))
    for i, score in self._pieces.values():
      self._abs_scores[i] = abs(score)
    self._opaque = np.array([t == _BYTE for t in piece_types])
    self._opaque[self.unk_id] = True
    self._byte_ids = None  # byte fallback: an [UNK] character becomes its UTF-8 bytes' pieces
    if any(t == _BYTE for t in piece_types):
      self._byte_ids = [processor.PieceToId(f"<0x{b:02X}>") for b in range(256)]
    # `_segment_limit`s remembered: of one-piece segments by id (NaN: not yet), of longer
    # ones by their ids' bytes.
    self._piece_limits = np.full(len(scores), np.nan)
    self._segment_limits: Dict[bytes, float] = {}

  def _arcs(self, text: str):
    """The lattice of text, as the C++ library walks it: (start, end, (id, score)) per
    arc, by start, pieces shortest first, then [UNK] over one character where no piece is
    exactly that character."""
    get, unknown, size = self._trie.get, (self.unk_id, self._unk_score), len(text)
    for start in range(size):
      single = False
      for end in range(start + 1, size + 1):
        entry = get(text[start:end], _NO_PIECE_FURTHER)
        if entry is None:
          continue
        if entry is _NO_PIECE_FURTHER:
          break
        single = single or end == start + 1
        yield start, end, entry
      if not single:
        yield start, start + 1, unknown

  def encode(self, normalized: str) -> List[int]:
    """Piece ids of normalized text (`SentencePieceProcessor.Normalize`), as
    tensorflow-text's SentencepieceTokenizer gives them."""
    size, unk_id = len(normalized), self.unk_id
    best = [0.0] * (size + 1)  # the best path's score ending at each position, float32
    starts = [-1] * (size + 1)  # where that path's last piece starts (-1: none yet)
    ids = [0] * (size + 1)  # and its id
    for start, end, (piece_id, score) in self._arcs(normalized):
      # tensorflow-text: [UNK] adds in float32; a piece in double (class docstring).
      candidate = best[start] + score
      if piece_id == unk_id:
        candidate = _f32(candidate)
      if starts[end] < 0 or candidate > best[end]:
        best[end], starts[end], ids[end] = _f32(candidate), start, piece_id
    path, end = [], size
    while end > 0:
      path.append((starts[end], end))
      end = starts[end]
    out: List[int] = []
    for start, end in reversed(path):
      piece_id = ids[end]
      if piece_id != unk_id:
        out.append(piece_id)
      elif self._byte_ids is not None:
        out.extend(self._byte_ids[b] for b in normalized[start:end].encode("utf-8"))
      elif not out or out[-1] != unk_id:  # a run of unknown characters: one [UNK]
        out.append(piece_id)
    return out

  def _segment_limit(self, segment: str) -> float:
    """The largest magnitude of its line's best path score at which a segment's ranking
    of candidates cannot depend on rounding (-inf: never; inf: always).

    The segment's smallest gap, over its end positions, between the best and the
    second-best candidate ending there (in double) must exceed the float32 roundings
    that separate the two libraries: half an ulp per piece of each path within the
    segment, one for the comparison. The ulp is taken at the line's path scores (below
    its best path's magnitude plus this segment's largest), doubled for safety.
    """
    size = len(segment)
    best = [0.0] + [-math.inf] * size
    second = [-math.inf] * (size + 1)
    for start, end, (_, score) in self._arcs(segment):
      candidate = best[start] + score
      if candidate > best[end]:
        best[end], second[end] = candidate, best[end]
      elif candidate > second[end]:
        second[end] = candidate
    # Slack 1e-6: user-defined symbols' bonus is float32 in the package, double in-graph.
    margin = (min([b - s for b, s in zip(best, second)]) - 1e-6) / (size + 4)
    if margin <= 0 or margin == math.inf:  # a tie (or no margin left); no alternative
      return -math.inf if margin <= 0 else math.inf
    # margin >= 2 ulp(x) = 2 ** (frexp(x)[1] - 23) <=> x < 2 ** (frexp(margin)[1] + 22).
    return math.ldexp(1.0, math.frexp(margin)[1] + 22) - max(map(abs, best)) - 1.0

  def disputed_lines(self, flat: np.ndarray, row_splits: np.ndarray) -> np.ndarray:
    """Lines whose package ids may not be tensorflow-text's.

    Args:
      flat: int [total pieces], the package's ids of the lines; row_splits: int64
        [num_lines + 1] (as `_NativeTokenizer.tokenize` returns them).

    Returns:
      int64 [disputed lines], ascending line indices: lines holding [UNK] or byte pieces
      (their text is not in the ids), and lines with a segment whose limit
      (`_segment_limit`) the magnitude of the line's best path score reaches.
    """
    if not len(flat):
      return np.zeros(0, np.int64)
    lengths = np.diff(row_splits)
    line_of = np.repeat(np.arange(len(lengths)), lengths)
    # Segments: from each line start or piece no path crosses into (its first character
    # and the previous piece's last are no crossable pair) to the next.
    pairs = self._last_char[flat[:-1]] * 0x110000 + self._first_char[flat[1:]]
    cut = np.concatenate([[True], ~np.isin(pairs, self._crossable)])
    cut[row_splits[:-1][lengths > 0]] = True
    bounds = np.flatnonzero(cut)
    sizes = np.diff(bounds, append=len(flat))
    limits = np.empty(len(bounds))
    # One-piece segments (most of them): limits by id.
    single = sizes == 1
    single_ids = flat[bounds[single]]
    for i in np.unique(single_ids[np.isnan(self._piece_limits[single_ids])]).tolist():
      self._piece_limits[i] = self._segment_limit(self._tokens[i])
    limits[single] = self._piece_limits[single_ids]
    # Longer segments: limits by their ids' bytes.
    if len(self._segment_limits) > _MAX_CACHED_SEGMENTS:
      self._segment_limits.clear()
    raw, ids, longer = flat.astype(np.int32).tobytes(), flat.tolist(), ~single
    longer_limits = []
    for a, size in zip(bounds[longer].tolist(), sizes[longer].tolist()):
      key = raw[4 * a : 4 * (a + size)]
      limit = self._segment_limits.get(key)
      if limit is None:
        segment = "".join([self._tokens[i] for i in ids[a : a + size]])
        limit = self._segment_limits[key] = self._segment_limit(segment)
      longer_limits.append(limit)
    limits[longer] = longer_limits
    # The magnitude of the line's best path: the package's path, to rounding.
    cumulative = np.concatenate([[0.0], np.cumsum(self._abs_scores[flat])])
    magnitudes = cumulative[row_splits[1:]] - cumulative[row_splits[:-1]]
    segment_lines = line_of[bounds]
    disputed = segment_lines[magnitudes[segment_lines] >= limits]
    return np.union1d(disputed, line_of[self._opaque[flat]]).astype(np.int64)


def make_native_tokenizer(vocab_file: str, do_lower_case: bool = True) -> _NativeTokenizer:
  """The TF-free tokenizer of a vocabulary file (`vocab.vocab_kind` decides which).

  Args:
    vocab_file: a vocab.txt or a SentencePiece `.model`.
    do_lower_case: WordPiece's casing (a SentencePiece model has its own).
  """
  if vocab_lib.vocab_kind(vocab_file) == layout.SENTENCEPIECE:
    return NativeSentencepieceTokenizer(vocab_file)
  return NativeWordpieceTokenizer(vocab_file, do_lower_case)


def _flatten(pieces: List[List[int]]) -> Tuple[np.ndarray, np.ndarray]:
  """(flat int32 ids, int64 row_splits [len(pieces) + 1]) of per-line id lists."""
  lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))
  row_splits = np.zeros(len(pieces) + 1, np.int64)
  np.cumsum(lengths, out=row_splits[1:])
  flat = np.fromiter(itertools.chain.from_iterable(pieces), np.int32, int(row_splits[-1]))
  return flat, row_splits
