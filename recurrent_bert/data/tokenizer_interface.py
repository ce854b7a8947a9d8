"""What every in-graph tokenizer offers, and the lookups they share.

Two implementations: `tokenization.BertWordpieceTokenizer` (BERT's basic tokenization +
WordPiece) and `sentencepiece_tokenizer.SentencepieceTokenizer` (a SentencePiece unigram
or BPE model). `tokenization.make_tokenizer(vocab_file)` picks one from the file
(`vocab.vocab_kind`). Both are `tf.Module`s of TensorFlow ops, so one object tokenises in
tf.data, in a `tf.function` and inside an exported SavedModel.

A *word* is what whole-word masking keeps together: a basic-tokenized word for WordPiece
(its `##` pieces follow the first), a run of pieces from one starting with U+2581 ("▁",
SentencePiece's mark of a preceding space) to the next for SentencePiece. The special
symbols ([PAD] [CLS] [SEP] [MASK]) always start a word.
"""

import abc
from typing import Dict, List, Sequence

import tensorflow as tf

from recurrent_bert.data.vocab import Vocabulary


class Tokenizer(tf.Module, abc.ABC):
  """Raw text -> piece ids, in-graph; the base of every tokenizer of the package.

  Subclasses implement `tokenize_flat` and `detokenize` (and may override `tokenize`);
  the id <-> token lookups, word starts and special ids come from the `Vocabulary`.

  Attributes:
    kind: model_dir.WORDPIECE or model_dir.SENTENCEPIECE.
    vocab_file: the file the vocabulary came from (caches key on it).
    vocab: tokens (pieces), index = id; vocab_size: len(vocab).
    do_lower_case: whether text is lower-cased before splitting into pieces.
    pad_id, unk_id, cls_id, sep_id, mask_id: ids of the reserved tokens.
  """

  def __init__(self, vocabulary: Vocabulary, vocab_file: str, do_lower_case: bool, name=None):
    super().__init__(name=name)
    self.kind = vocabulary.kind
    self.vocab_file = vocab_file
    self.vocab: List[str] = list(vocabulary.tokens)
    self.vocab_size = vocabulary.vocab_size
    self.do_lower_case = bool(do_lower_case)
    self.pad_id = vocabulary.pad_id
    self.unk_id = vocabulary.unk_id
    self.cls_id = vocabulary.cls_id
    self.sep_id = vocabulary.sep_id
    self.mask_id = vocabulary.mask_id
    # A tf.Module tracks attributes: a plain dict here, not the Vocabulary object.
    self._special_ids = dict(vocabulary.special_ids)
    self._token_to_id_py = {token: i for i, token in enumerate(self.vocab)}
    self._id_to_token = tf.constant(self.vocab, dtype=tf.string)
    self._token_to_id = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            self._id_to_token, tf.range(self.vocab_size, dtype=tf.int64)
        ),
        default_value=self.unk_id,
    )
    self._word_starts = tf.constant(vocabulary.word_starts, dtype=tf.bool)

  @property
  def special_ids(self) -> Dict[str, int]:
    """{"pad", "unk", "cls", "sep", "mask"} -> id."""
    return dict(self._special_ids)

  @abc.abstractmethod
  def tokenize_flat(self, texts) -> tf.RaggedTensor:
    """Tokenizes text into piece ids.

    Args:
      texts: string Tensor [batch] (or a list of Python strings).

    Returns:
      int64 RaggedTensor [batch, (pieces)].
    """

  @abc.abstractmethod
  def detokenize(self, ids) -> tf.Tensor:
    """Joins piece ids back into text: int [batch, (pieces)] -> string [batch]."""

  def tokenize(self, texts) -> tf.RaggedTensor:
    """Tokenizes text into piece ids grouped by word (module docstring).

    Args:
      texts: string Tensor [batch] (or a list of Python strings).

    Returns:
      int64 RaggedTensor [batch, (words), (pieces)].
    """
    pieces = self.tokenize_flat(texts)
    ids = pieces.flat_values
    positions = tf.range(tf.size(ids, out_type=tf.int64))
    # A word starts at a word-start piece, and at the first piece of every text.
    first_of_row = tf.equal(positions, tf.gather(pieces.row_splits, pieces.value_rowids()))
    boundary = self.is_word_start(ids) | first_of_row
    word_splits = tf.concat([tf.where(boundary)[:, 0], tf.size(ids, out_type=tf.int64)[None]], 0)
    words = tf.RaggedTensor.from_row_splits(ids, word_splits, validate=False)
    words_per_text = tf.math.unsorted_segment_sum(
        tf.cast(boundary, tf.int64), pieces.value_rowids(), pieces.nrows()
    )
    return tf.RaggedTensor.from_row_lengths(words, words_per_text, validate=False)

  def tokenize_to_pieces(self, texts) -> tf.RaggedTensor:
    """Tokenizes text into piece strings: string RaggedTensor [batch, (pieces)]."""
    return self.ids_to_tokens(self.tokenize_flat(texts))

  def ids_to_tokens(self, ids):
    """Maps ids (Tensor or RaggedTensor of any shape) to token strings of the same shape."""
    if isinstance(ids, tf.RaggedTensor):
      return ids.with_flat_values(self.ids_to_tokens(ids.flat_values))
    return tf.gather(self._id_to_token, tf.cast(ids, tf.int64))

  def tokens_to_ids(self, tokens):
    """Maps token strings to int64 ids ([UNK] for strings not in the vocabulary)."""
    if isinstance(tokens, tf.RaggedTensor):
      return tokens.with_flat_values(self.tokens_to_ids(tokens.flat_values))
    return self._token_to_id.lookup(tf.convert_to_tensor(tokens, tf.string))

  def is_word_start(self, ids):
    """bool, same shape as `ids` (Tensor or RaggedTensor): whether the piece starts a word."""
    if isinstance(ids, tf.RaggedTensor):
      return ids.with_flat_values(self.is_word_start(ids.flat_values))
    return tf.gather(self._word_starts, tf.cast(ids, tf.int64))

  # Plain-Python conveniences for tools and tests.
  def convert_ids_to_tokens(self, ids: Sequence[int]) -> List[str]:
    return [self.vocab[int(i)] for i in ids]

  def convert_tokens_to_ids(self, tokens: Sequence[str]) -> List[int]:
    return [self._token_to_id_py.get(t, self.unk_id) for t in tokens]
