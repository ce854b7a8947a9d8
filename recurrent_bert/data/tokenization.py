"""BERT WordPiece tokenization, in-graph on tensorflow-text.

The algorithm is BERT's (Devlin et al. 2018, google-research/bert `tokenization.py`):

1. Basic tokenization
   - drop NUL, U+FFFD and control/format characters (Unicode Cc/Cf except tab, newline,
     carriage return, which count as whitespace);
   - optional lower-casing, which also strips accents (NFD, then drop Mn marks);
     cased mode leaves the text unnormalised, as BERT does;
   - split on whitespace: tab, newline, carriage return and the Unicode space, line and
     paragraph separators (Zs, Zl, Zp: U+00A0, U+2028, U+2029 ...); what BERT's
     `whitespace_tokenize` (Python's str.split after cleaning) and Hugging Face's
     BertPreTokenizer split on. Other characters Python calls space (U+000B, U+000C,
     U+001C-U+001F, U+0085) are controls, dropped above, so they join their neighbours;
   - every punctuation character (ASCII symbol ranges plus Unicode P*) and every CJK
     ideograph becomes a word of its own.
2. WordPiece: greedy longest-match-first over each word, continuation pieces prefixed with
   `##`; a word with no full segmentation, or longer than `max_bytes_per_word`, becomes a
   single `[UNK]`.

These character classes are the one definition of a word boundary in the package:
`basic_tokenize` applies them, and `split_words_with_offsets` finds the same words with
their byte offsets in the original text (SQuAD's answer alignment, in Python and in a
served model); tests/data/test_word_boundaries.py checks the two agree on random text.
`pieces_with_offsets` locates any tokenizer's pieces in the original text (WordPiece: at
their word; SentencePiece: at their own characters).

Everything runs as TensorFlow ops (tensorflow-text's `regex_split` and
`FastWordpieceTokenizer`), so the same object tokenises inside `tf.data`, inside a
`tf.function`, and inside an exported SavedModel.

One deliberate difference from google-research/bert: the word-length limit is counted in
UTF-8 bytes (tensorflow-text) instead of characters; it only matters for words of more than
~50 non-ASCII characters, which become `[UNK]` a little earlier.
"""

from typing import Tuple, Union

import tensorflow as tf
import tensorflow_text as tf_text

from recurrent_bert import model_dir as layout
from recurrent_bert.data.sentencepiece_tokenizer import SentencepieceTokenizer
from recurrent_bert.data.tokenizer_interface import Tokenizer
from recurrent_bert.data.vocab import CLS_TOKEN  # noqa: F401  (re-exported)
from recurrent_bert.data.vocab import DEFAULT_MAX_BYTES_PER_WORD
from recurrent_bert.data.vocab import MASK_TOKEN  # noqa: F401  (re-exported)
from recurrent_bert.data.vocab import PAD_TOKEN  # noqa: F401  (re-exported)
from recurrent_bert.data.vocab import RESERVED_TOKENS  # noqa: F401  (re-exported)
from recurrent_bert.data.vocab import SEP_TOKEN  # noqa: F401  (re-exported)
from recurrent_bert.data.vocab import SUFFIX_INDICATOR
from recurrent_bert.data.vocab import UNK_TOKEN
from recurrent_bert.data.vocab import Vocabulary
from recurrent_bert.data.vocab import load_vocab
from recurrent_bert.data.vocab import vocab_kind

# Characters BERT deletes outright (not replaced by a space): NUL, the replacement
# character, C0/C1 controls other than \t \n \r (so U+000B, U+000C, U+001C-U+001F and U+0085
# too: they join their neighbours), and format characters (Cf, e.g. U+200B, U+FEFF).
DROPPED_CHARS_REGEX = r"[\x{0}-\x{8}\x{B}\x{C}\x{E}-\x{1F}\x{7F}-\x{9F}\x{FFFD}\p{Cf}]"
# BERT's whitespace: \t \n \r and the Unicode space, line and paragraph separators.
WHITESPACE_REGEX = r"[\t\n\r\p{Zs}\p{Zl}\p{Zp}]"
# BERT's punctuation: the four ASCII symbol ranges (so `$`, `+`, `^`, `` ` `` count) and
# every Unicode P* character.
_PUNCTUATION_REGEX = r"[!-/]|[:-@]|[\[-`]|[{-~]|\p{P}"
# The CJK Unified Ideograph blocks BERT isolates (Hangul and kana are not in them).
_CJK_REGEX = (
    r"[\x{4E00}-\x{9FFF}]|[\x{3400}-\x{4DBF}]|[\x{20000}-\x{2A6DF}]|"
    r"[\x{2A700}-\x{2B73F}]|[\x{2B740}-\x{2B81F}]|[\x{2B820}-\x{2CEAF}]|"
    r"[\x{F900}-\x{FAFF}]|[\x{2F800}-\x{2FA1F}]"
)
# Basic tokenization splits words on WORD_SPLIT_REGEX and keeps the WORD_KEEP_REGEX
# delimiters (punctuation, CJK ideographs) as words of their own.
WORD_KEEP_REGEX = _PUNCTUATION_REGEX + "|" + _CJK_REGEX
WORD_SPLIT_REGEX = r"\s+|" + WORD_KEEP_REGEX
# All of the above: part of the key of caches that depend on where words start and end.
WORD_BOUNDARY_RULES = (DROPPED_CHARS_REGEX, WHITESPACE_REGEX, WORD_KEEP_REGEX)


def basic_tokenize(texts: tf.Tensor, do_lower_case: bool) -> tf.RaggedTensor:
  """BERT's basic tokenization (step 1 of the module docstring), in-graph.

  Args:
    texts: string Tensor of any rank (usually [batch]) of UTF-8 text.
    do_lower_case: lower-case and strip accents.

  Returns:
    string RaggedTensor [*texts.shape, (words)].
  """
  texts = tf.convert_to_tensor(texts, dtype=tf.string)
  texts = tf.strings.regex_replace(texts, DROPPED_CHARS_REGEX, "")
  texts = tf.strings.regex_replace(texts, WHITESPACE_REGEX, " ")
  if do_lower_case:
    texts = tf.strings.lower(texts, encoding="utf-8")
    texts = tf_text.normalize_utf8(texts, "NFD")
    texts = tf.strings.regex_replace(texts, r"\p{Mn}", "")
  return tf_text.regex_split(texts, WORD_SPLIT_REGEX, WORD_KEEP_REGEX)


# The same words found in the original text, without cleaning it first (offsets must stay
# those of the original): a delimiter is a run of whitespace, with any dropped characters
# among it, or a kept delimiter; dropped characters elsewhere stay inside their word and are
# trimmed from its ends afterwards.
_SPACE_OR_DROPPED = f"(?:{WHITESPACE_REGEX}|{DROPPED_CHARS_REGEX})"
_BOUNDARY_REGEX = f"{_SPACE_OR_DROPPED}*{WHITESPACE_REGEX}{_SPACE_OR_DROPPED}*|{WORD_KEEP_REGEX}"
_LEADING_DROPPED_REGEX = f"^(?:{DROPPED_CHARS_REGEX})+"
_TRAILING_DROPPED_REGEX = f"(?:{DROPPED_CHARS_REGEX})+$"
# tensorflow-text's regex_split stops reading a string at its first NUL; U+0001 stands in for
# it: one byte too (offsets unchanged), and dropped like NUL.
_NUL_STAND_IN = "\x01"


# A graph: eagerly, its ~20 ragged ops would cost more than the work (Python callers).
@tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
def split_words_with_offsets(texts) -> Tuple[tf.RaggedTensor, tf.RaggedTensor, tf.RaggedTensor]:
  """The words of `basic_tokenize`, located in the original text, in-graph.

  Word boundaries are exactly `basic_tokenize`'s (the character classes above); the words
  are not normalised: each is the original text between its offsets, which never start or
  end with a dropped character (a word of dropped characters only is no word). With
  lower-casing, `basic_tokenize` normalises before it splits (as BERT); that can only delete
  a word made of combining marks alone (Mn), or split one at the four characters whose
  decomposition holds punctuation (U+1FEF, U+2260, U+226E, U+226F): tokenizing each word
  on its own still gives the text's pieces, only coarser-grained there.

  Args:
    texts: string Tensor [batch] (or a list of Python strings) of UTF-8 text.

  Returns:
    (words, byte_starts, byte_ends): RaggedTensors [batch, (words)] of strings and int64
    offsets; words[i][j] is texts[i][byte_starts[i][j]:byte_ends[i][j]], except that a NUL
    inside a word reads as U+0001 (both are dropped by the tokenizer).
  """
  texts = tf.strings.regex_replace(texts, r"\x00", _NUL_STAND_IN)
  words, starts, ends = tf_text.regex_split_with_offsets(texts, _BOUNDARY_REGEX, WORD_KEEP_REGEX)
  flat = words.flat_values
  length = tf.strings.length(flat)
  leading = length - tf.strings.length(tf.strings.regex_replace(flat, _LEADING_DROPPED_REGEX, ""))
  trailing = length - tf.strings.length(tf.strings.regex_replace(flat, _TRAILING_DROPPED_REGEX, ""))
  trailing = tf.where(leading == length, 0, trailing)  # a dropped-only word: removed below
  is_word = words.with_flat_values(leading < length)
  trimmed = (
      words.with_flat_values(tf.strings.substr(flat, leading, length - leading - trailing)),
      starts.with_flat_values(starts.flat_values + tf.cast(leading, starts.dtype)),
      ends.with_flat_values(ends.flat_values - tf.cast(trailing, ends.dtype)),
  )
  return tuple(tf.ragged.boolean_mask(part, is_word) for part in trimmed)


class BertWordpieceTokenizer(Tokenizer):
  """BERT's basic + WordPiece tokenizer as TensorFlow ops (saveable in a SavedModel).

  Example:
    tokenizer = BertWordpieceTokenizer("vocab.txt", do_lower_case=True)
    ids = tokenizer.tokenize(["Hello, world!"])   # int64 [1, (words), (pieces)]
    flat = tokenizer.tokenize_flat(["Hello, world!"])  # int64 [1, (pieces)]

  Attributes: those of `tokenizer_interface.Tokenizer` (vocab, vocab_size, do_lower_case:
  lower-case and strip accents, pad_id ... mask_id).
  """

  def __init__(
      self,
      vocab_file: str,
      do_lower_case: bool = True,
      max_bytes_per_word: int = DEFAULT_MAX_BYTES_PER_WORD,
      name=None,
  ):
    vocabulary = Vocabulary.from_wordpiece_tokens(load_vocab(vocab_file))
    super().__init__(vocabulary, vocab_file, do_lower_case, name=name)
    self._wordpiece = tf_text.FastWordpieceTokenizer(
        vocab=self.vocab,
        suffix_indicator=SUFFIX_INDICATOR,
        max_bytes_per_word=max_bytes_per_word,
        token_out_type=tf.int64,
        unknown_token=UNK_TOKEN,
        no_pretokenization=True,
        support_detokenization=True,
    )

  def split_words(self, texts) -> tf.RaggedTensor:
    """Basic tokenization only: string RaggedTensor [batch, (words)]."""
    return basic_tokenize(texts, self.do_lower_case)

  def tokenize(self, texts) -> tf.RaggedTensor:
    """Tokenizes text into word-piece ids grouped by word.

    Args:
      texts: string Tensor [batch] (or a list of Python strings).

    Returns:
      int64 RaggedTensor [batch, (words), (pieces)]; words[i] are the pieces of one
      basic-tokenized word (the grouping whole-word masking uses).
    """
    words = self.split_words(texts)
    return words.with_flat_values(self._wordpiece.tokenize(words.flat_values))

  def tokenize_flat(self, texts) -> tf.RaggedTensor:
    """Tokenizes text into word-piece ids: int64 RaggedTensor [batch, (pieces)]."""
    return self.tokenize(texts).merge_dims(-2, -1)

  def detokenize(self, ids) -> tf.Tensor:
    """Joins word-piece ids back into text: int [batch, (pieces)] -> string [batch].

    `##` pieces are glued to the previous piece, words are separated by one space.
    Lower-casing, accent stripping and punctuation splitting are not undone.
    """
    return self._wordpiece.detokenize(ids)


def make_tokenizer(vocab_file: str, do_lower_case: Union[bool, str] = True) -> Tokenizer:
  """The tokenizer of a vocabulary file: SentencePiece for a `.model`, else WordPiece.

  Args:
    vocab_file: a vocab.txt or a SentencePiece model (`vocab.vocab_kind` tells which).
    do_lower_case: WordPiece's casing; may also be the strings "true"/"false". A
      SentencePiece model's own normaliser fixes its casing, so it is ignored there.
  """
  if vocab_kind(vocab_file) == layout.SENTENCEPIECE:
    return SentencepieceTokenizer(vocab_file)
  if isinstance(do_lower_case, str):
    do_lower_case = do_lower_case.strip().lower() in ("1", "true", "yes")
  return BertWordpieceTokenizer(vocab_file, do_lower_case=do_lower_case)


_LEADING_SPACE_REGEX = f"^{_SPACE_OR_DROPPED}+"
_TRAILING_SPACE_REGEX = f"{_SPACE_OR_DROPPED}+$"


def _trim_spaces(texts, starts: tf.RaggedTensor, ends: tf.RaggedTensor):
  """Moves each [start, end) byte span off the whitespace and dropped characters at its ends.

  A span of such characters only (SentencePiece's lone "▁" piece) becomes start = its end,
  end = its start: it can neither start nor end an answer (start < end for every piece
  that can), yet a span of pieces around it keeps the text between its outer pieces.
  """
  row_texts = tf.gather(texts, starts.value_rowids())
  start, end = starts.flat_values, ends.flat_values
  spans = tf.strings.substr(row_texts, start, end - start, unit="BYTE")
  length = tf.cast(tf.strings.length(spans), start.dtype)
  stripped = lambda regex: tf.cast(
      tf.strings.length(tf.strings.regex_replace(spans, regex, "")), start.dtype
  )
  leading = length - stripped(_LEADING_SPACE_REGEX)
  trailing = length - stripped(_TRAILING_SPACE_REGEX)
  blank = leading == length
  return (
      starts.with_flat_values(start + leading),
      ends.with_flat_values(tf.where(blank, start, end - trailing)),
  )


def pieces_with_offsets(tokenizer: Tokenizer, texts):
  """Each text's piece ids with the byte span of the original text each piece stands for.

  WordPiece: the text's words (`split_words_with_offsets`), each tokenized on its own;
  every piece spans its whole word. SentencePiece: the model's own offsets (pieces may
  cross punctuation; the "▁" of a piece covers the whitespace before it), moved off
  whitespace and dropped characters (`_trim_spaces`). Either way a span of pieces i..j maps
  to texts[start[i]:end[j]], a substring of the original text that neither starts nor ends
  with whitespace.

  Args:
    tokenizer: a `tokenizer_interface.Tokenizer`.
    texts: string Tensor [B].

  Returns:
    (ids, byte_start, byte_end): int64 RaggedTensors [B, (pieces)].
  """
  texts = tf.convert_to_tensor(texts, tf.string)
  if isinstance(tokenizer, SentencepieceTokenizer):
    ids, starts, ends = tokenizer.tokenize_with_offsets(texts)
    return (ids, *_trim_spaces(texts, starts, ends))
  words, starts, ends = split_words_with_offsets(texts)
  word_pieces = tokenizer.tokenize_flat(words.flat_values)  # [words, (pieces)]
  ids = words.with_flat_values(word_pieces).merge_dims(1, 2)
  per_piece = lambda offsets: ids.with_flat_values(
      tf.repeat(offsets.flat_values, word_pieces.row_lengths())
  )
  return ids, per_piece(starts), per_piece(ends)
