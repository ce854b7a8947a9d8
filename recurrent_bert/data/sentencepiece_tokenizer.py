"""SentencePiece (unigram LM or BPE) tokenization, in-graph on tensorflow-text.

The model is a SentencePiece `.model` (rbert-build-vocab --tokenizer=unigram|bpe writes
one; ALBERT's and other models' work if they hold [CLS] [SEP] [MASK] and a pad piece).
tensorflow-text's `SentencepieceTokenizer` runs an older build of the C++ library behind
the `sentencepiece` package, with the model's bytes held in the graph: the object
tokenises in tf.data, in a `tf.function` and inside an exported SavedModel without the
file. Its pieces are the package's but where a unigram model has segmentations of equal
score ('00000' as ['00', '000'] or ['000', '00']), which it ranks its own way; the data
tools' TF-free tokenizer (`native_tokenizer.NativeSentencepieceTokenizer`) follows it
there, so records, features and the SavedModel get the same ids
(tests/data/test_sentencepiece.py).

The model decides everything the WordPiece tokenizer takes as options: normalisation
(NFKC, and lower-casing when it was trained with --do_lower_case: `do_lower_case` reports
it), and how text is split: no pre-tokenization, pieces may cross punctuation, and a word
is a run of pieces from one starting with "▁" (U+2581, a preceding space) to the next.

Our models hold [CLS] [SEP] [MASK] as *user-defined* symbols (rbert-build-vocab): the
literal text "[MASK]" (exactly, case included) becomes the [MASK] id, as Hugging Face
tokenizers treat special tokens in text, so "Paris is the [MASK] of France." asks for one
masked word; decoding gives the text back. The space before such a symbol is a piece "▁"
of its own (a SentencePiece rule: user-defined symbols are split off before segmentation).
"""

import hashlib
from typing import Union

import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.python.ops import sentencepiece_tokenizer as tf_text_sentencepiece

from recurrent_bert.data import vocab as vocab_lib
from recurrent_bert.data.tokenizer_interface import Tokenizer

_ModelResource = tf_text_sentencepiece._SentencepieceModelResource  # pylint: disable=protected-access


class _SharedModelResource(_ModelResource):
  """tensorflow-text's model resource, under a shared name.

  tensorflow-text creates the model resource without a shared name: the resource is
  private to the op's kernel and dies with it, and the eager kernel cache is cleared by
  every `tf.random.set_seed` (so by Keras' `set_random_seed`), after which each tokenize
  fails with "Resource ... SentencepieceResource does not exist". Named (by the model's
  hash), it belongs to the resource manager: a new kernel finds it again, and tokenizers
  of the same model share it.
  """

  def __init__(self, model: bytes, shared_name: str):
    self._shared_name = shared_name
    super().__init__(model, None)

  def _create_resource(self):
    with tf.name_scope("SentenceTokenizerInitializer"):
      return tf_text_sentencepiece.gen_sentencepiece_tokenizer.sentencepiece_op(
          model=self._model, shared_name=self._shared_name
      )


class SentencepieceTokenizer(Tokenizer):
  """A SentencePiece model as TensorFlow ops (saveable in a SavedModel).

  Example:
    tokenizer = SentencepieceTokenizer("spm.model")
    ids = tokenizer.tokenize_flat(["Hello, world!"])  # int64 [1, (pieces)]
    words = tokenizer.tokenize(["Hello, world!"])     # int64 [1, (words), (pieces)]

  Attributes: those of `tokenizer_interface.Tokenizer`; `do_lower_case` is the model's
  (its normaliser lower-cases), `model_proto` the serialized model.
  """

  def __init__(self, model: Union[str, bytes], name=None):
    """Args: model: path of a `.model` file, or its serialized bytes."""
    proto = model if isinstance(model, bytes) else vocab_lib.read_bytes(model)
    where = model if isinstance(model, str) else ""
    vocabulary = vocab_lib.Vocabulary.from_sentencepiece(proto, where=where)
    super().__init__(
        vocabulary, where or "<SentencePiece model>", bool(vocabulary.folds_case), name=name
    )
    self.model_proto = proto
    self._sentencepiece = tf_text.SentencepieceTokenizer(model=proto, out_type=tf.int32)
    self._sentencepiece._model_resource = _SharedModelResource(  # pylint: disable=protected-access
        proto, "sentencepiece_" + hashlib.sha256(proto).hexdigest()[:32]
    )

  def tokenize_flat(self, texts) -> tf.RaggedTensor:
    """Tokenizes text into piece ids: int64 RaggedTensor [batch, (pieces)]."""
    texts = tf.convert_to_tensor(texts, dtype=tf.string)
    pieces = self._sentencepiece.tokenize(texts)
    return pieces.with_flat_values(tf.cast(pieces.flat_values, tf.int64))

  def tokenize_with_offsets(self, texts):
    """Piece ids with their byte offsets in the original text.

    Args:
      texts: string Tensor [batch].

    Returns:
      (ids, starts, ends): int64 RaggedTensors [batch, (pieces)]; piece j of text i was
      made from texts[i][starts[i][j]:ends[i][j]] (before normalisation).
    """
    texts = tf.convert_to_tensor(texts, dtype=tf.string)
    ids, starts, ends = self._sentencepiece.tokenize_with_offsets(texts)
    return (
        ids.with_flat_values(tf.cast(ids.flat_values, tf.int64)),
        starts.with_flat_values(tf.cast(starts.flat_values, tf.int64)),
        ends.with_flat_values(tf.cast(ends.flat_values, tf.int64)),
    )

  def detokenize(self, ids) -> tf.Tensor:
    """Decodes piece ids into text: int [batch, (pieces)] -> string [batch].

    "▁" becomes a space (none at the start); [PAD] and control pieces decode to nothing,
    [CLS] [SEP] [MASK] to their text. The model's normalisation is not undone.
    """
    if isinstance(ids, tf.RaggedTensor):
      ids = ids.with_flat_values(tf.cast(ids.flat_values, tf.int32))
    else:
      ids = tf.cast(ids, tf.int32)
    return self._sentencepiece.detokenize(ids)
