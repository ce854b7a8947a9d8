"""BERT WordPiece tokenization at native speed, without TensorFlow, for the data tools.

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
"""

import itertools
from typing import List, Sequence, Tuple

import numpy as np

from recurrent_bert.data import vocab as vocab_lib


class NativeWordpieceTokenizer:
  """Tokenizes batches of lines into flat piece ids (numpy), Rust-speed.

  Attributes:
    vocab: tokens, index = id; vocab_size, unk_id, cls_id, sep_id, mask_id as the in-graph
    tokenizer's; is_continuation: bool [vocab_size], True for `##` pieces.
  """

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

    self.vocab = vocab_lib.load_vocab(vocab_file)
    self.vocab_size = len(self.vocab)
    ids = {token: i for i, token in enumerate(self.vocab)}
    self.unk_id = ids[vocab_lib.UNK_TOKEN]
    self.cls_id = ids[vocab_lib.CLS_TOKEN]
    self.sep_id = ids[vocab_lib.SEP_TOKEN]
    self.mask_id = ids[vocab_lib.MASK_TOKEN]
    self._ids = ids
    self.is_continuation = np.array(
        [
            t.startswith(vocab_lib.SUFFIX_INDICATOR) and len(t) > len(vocab_lib.SUFFIX_INDICATOR)
            for t in self.vocab
        ],
        bool,
    )
    tokenizer = Tokenizer(
        models.WordPiece(
            ids,
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
    encodings = self._tokenizer.encode_batch(list(lines), add_special_tokens=False)
    pieces: List[List[int]] = [e.ids for e in encodings]
    lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))
    row_splits = np.zeros(len(pieces) + 1, np.int64)
    np.cumsum(lengths, out=row_splits[1:])
    flat = np.fromiter(itertools.chain.from_iterable(pieces), np.int32, int(row_splits[-1]))
    return flat, row_splits

  def tokenize_lists(self, lines: Sequence[str]) -> List[List[int]]:
    """Piece ids per line, as Python lists (for tests and small inputs)."""
    flat, splits = self.tokenize(lines)
    return [flat[a:b].tolist() for a, b in zip(splits[:-1], splits[1:])]
