"""Token tagging inside the graph: words to pieces, and the model's logits back to word tags.

Tagging (`token_tagger`): `tag` splits text into the basic tokenizer's words
(`tokenization.split_words_with_offsets`, as SQuAD contexts); `tag_words` takes words as
given. Either way each word is tokenized on its own, a word of no piece stands as [UNK],
and its tag is read at its first piece (as `tasks/tagging/tagging_features.py` trains). Serving
reads ONE window per row, [CLS] words [SEP] cut to `max_seq_length`, with NO document
context (training, by default, fills windows with the neighbouring sentences, and cuts a
long sentence into several windows): words whose first piece falls past the cut get the
tag "" and `truncated` is set.
"""

from typing import Dict, Tuple

import tensorflow as tf


def word_pieces(tokenizer, words: tf.RaggedTensor) -> Tuple[tf.RaggedTensor, tf.RaggedTensor]:
  """Each word tokenized on its own, a word of no piece as [UNK].

  Args:
    tokenizer: a `tokenizer_interface.Tokenizer`.
    words: string RaggedTensor [B, (W)].
  Returns:
    (pieces, ids): int64 RaggedTensors, pieces [words, (pieces)] of the flat words, ids
    [B, (P)] each row's pieces in a row.
  """
  pieces = tokenizer.tokenize_flat(words.flat_values)  # [words, (pieces)]
  empty = tf.cast(pieces.row_lengths() == 0, tf.int64)
  unk = tf.RaggedTensor.from_row_lengths(
      tf.fill([tf.reduce_sum(empty)], tf.constant(tokenizer.unk_id, tf.int64)), empty
  )
  pieces = tf.concat([pieces, unk], axis=1)  # a word of no piece reads as [UNK]
  ids = words.with_flat_values(pieces).merge_dims(1, 2)  # [B, (P)]
  return pieces, ids


def word_tags(
    words: tf.RaggedTensor,
    pieces: tf.RaggedTensor,
    ids: tf.RaggedTensor,
    logits: tf.Tensor,
    tag_names: tf.Tensor,
    max_seq_length: int,
) -> Dict[str, tf.Tensor]:
  """The tag of each word, read at its first piece; "" past the window's cut.

  Args:
    words: string RaggedTensor [B, (W)].
    pieces, ids: `word_pieces(tokenizer, words)`.
    logits: float32 [B, T, K], the tagger's on [CLS] ids [SEP] (packed, cut to
      max_seq_length).
    tag_names: string [K].
    max_seq_length: the packing's limit, special tokens included.
  Returns:
    dict of words [B, W] string (padded ""), tags [B, W] string, num_words [B] int32,
    logits [B, W, K] float32 (0 where the tag is ""), truncated [B] bool.
  """
  counts = words.with_flat_values(tf.cast(pieces.row_lengths(), tf.int32)).to_tensor()
  first = tf.math.cumsum(counts, axis=1, exclusive=True) + 1  # [B, W] row positions
  num_words = tf.cast(words.row_lengths(), tf.int32)
  real = tf.range(tf.shape(counts)[1])[None, :] < num_words[:, None]
  seen = real & (first <= max_seq_length - 2)
  word_logits = tf.gather(logits, tf.minimum(first, tf.shape(logits)[1] - 1), batch_dims=1)
  word_logits = tf.where(seen[:, :, None], word_logits, 0.0)  # [B, W, K]
  tag_id = tf.argmax(word_logits, axis=-1, output_type=tf.int32)
  return {
      "words": words.to_tensor(default_value=""),
      "tags": tf.where(seen, tf.gather(tag_names, tag_id), ""),
      "num_words": num_words,
      "logits": word_logits,
      "truncated": ids.row_lengths() > max_seq_length - 2,
  }
