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

A SentencePiece model is run by the `sentencepiece` package (`NativeSentencepieceTokenizer`),
the C++ library tensorflow-text's in-graph tokenizer wraps too.
"""

import itertools
from typing import List, Sequence, Tuple

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

  The same library, and so the same pieces and ids, as the in-graph
  `sentencepiece_tokenizer.SentencepieceTokenizer` (tests/data/test_sentencepiece.py).
  The model's normaliser fixes the casing: there is no do_lower_case.
  """

  def __init__(self, model_file: str):
    super().__init__(vocab_lib.Vocabulary.from_sentencepiece(model_file))
    self._processor = vocab_lib.load_sentencepiece(model_file)

  def tokenize(self, lines: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
    # One thread: the generator's workers already use the cores.
    return _flatten(self._processor.EncodeAsIds(list(lines), num_threads=1))


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
