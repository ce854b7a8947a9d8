"""BERT's masked-LM masking rules, as one in-graph function.

This function masks at read time in tf.data (fresh masks every epoch);
`mlm_masking.mask_batch` is its numpy twin for the offline tool (rbert-create-pretraining-data,
whose workers run without TensorFlow). Both follow one set of rules, and
tests/data/test_masking.py checks both against them:

- candidates are the real tokens other than [CLS] and [SEP];
- num_to_predict = min(max_predictions_per_seq, max(1, round(seq_len * masked_lm_prob)))
  with seq_len the number of real tokens including [CLS]/[SEP] (BERT's count; `round`
  rounds half to even in both Python and TensorFlow);
- candidate words are visited in a uniformly random order; a word is taken whole if it
  still fits in num_to_predict, otherwise skipped (BERT's greedy rule). Without whole-word
  masking every candidate token is a word of its own; with it, a piece that does not start
  a word (a WordPiece `##` piece; a SentencePiece piece without the "▁" marker:
  `vocab.Vocabulary.word_starts`) belongs to the word of the token before it (within one
  segment: such a piece right after [CLS]/[SEP] starts a group of its own);
- each chosen position independently becomes [MASK] with `mask_token_prob`, a uniformly
  random vocabulary id with `random_token_prob`, and stays unchanged otherwise (BERT's
  80/10/10 by default; the SwishRNN recipe uses 100/0/0);
- masked_lm_positions are sorted ascending and 0-padded, masked_lm_ids hold the original
  ids, masked_lm_weights are 1.0 for real predictions and 0.0 for padding.

All shapes are static ([batch, seq_length] in, [batch, max_predictions_per_seq] out) and
the randomness is stateless (an explicit [2] seed), so the function runs under XLA/TPU and
the offline tool is deterministic.
"""

from typing import Dict, Optional, Sequence, Union

import tensorflow as tf

from recurrent_bert.data.mlm_masking import MaskingConfig
from recurrent_bert.data.mlm_masking import num_to_predict  # noqa: F401  (re-exported)
from recurrent_bert.data.vocab import Vocabulary


def mask_input_ids(
    input_ids: tf.Tensor,
    input_mask: tf.Tensor,
    is_word_start: tf.Tensor,
    seed: tf.Tensor,
    config: MaskingConfig,
    *,
    vocab_size: int,
    mask_id: int,
    cls_id: int,
    sep_id: int,
) -> Dict[str, tf.Tensor]:
  """Applies BERT's masking (module docstring) to a batch of unmasked sequences.

  Args:
    input_ids: int Tensor [batch, seq_length], right-padded.
    input_mask: int or bool Tensor [batch, seq_length], nonzero for real tokens.
    is_word_start: bool Tensor [batch, seq_length], False for pieces that continue a word
      (`##` pieces, SentencePiece pieces without "▁"). Only read when
      `config.whole_word_mask`.
    seed: int Tensor [2], the stateless RNG seed.
    config: the MaskingConfig.
    vocab_size, mask_id, cls_id, sep_id: from the tokenizer.

  Returns:
    dict with
      input_ids: [batch, seq_length], same dtype as the input, with masking applied;
      masked_lm_positions: int32 [batch, max_predictions_per_seq];
      masked_lm_ids: same dtype as input_ids, [batch, max_predictions_per_seq];
      masked_lm_weights: float32 [batch, max_predictions_per_seq].
  """
  input_ids = tf.convert_to_tensor(input_ids)
  id_dtype = input_ids.dtype
  batch_size = tf.shape(input_ids)[0]
  seq_length = input_ids.shape[1] if input_ids.shape[1] is not None else tf.shape(input_ids)[1]
  num_predictions = config.max_predictions_per_seq
  seed = tf.cast(seed, tf.int64)
  order_seed, action_seed, random_id_seed = tf.unstack(
      tf.random.experimental.stateless_split(seed, 3)
  )

  real = tf.cast(input_mask, tf.bool)
  candidate = (
      real
      & tf.not_equal(input_ids, tf.cast(cls_id, id_dtype))
      & tf.not_equal(input_ids, tf.cast(sep_id, id_dtype))
  )
  if config.whole_word_mask:
    previous_is_candidate = tf.pad(candidate[:, :-1], [[0, 0], [1, 0]])
    starts = candidate & (tf.cast(is_word_start, tf.bool) | tf.logical_not(previous_is_candidate))
  else:
    starts = candidate
  # word_index[b, t]: which candidate word position t belongs to (garbage off candidates).
  word_index = tf.maximum(tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1, 0)
  num_words = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)  # [batch]
  row_offset = tf.range(batch_size)[:, tf.newaxis] * seq_length
  word_length = tf.reshape(
      tf.math.unsorted_segment_sum(
          tf.cast(candidate, tf.int32), word_index + row_offset, batch_size * seq_length
      ),
      [batch_size, seq_length],
  )  # [batch, words]

  seq_len = tf.reduce_sum(tf.cast(real, tf.float32), axis=1)
  budget = tf.cast(tf.round(seq_len * config.masked_lm_prob), tf.int32)
  budget = tf.minimum(num_predictions, tf.maximum(1, budget))  # [batch]

  # A uniformly random visiting order of the words; empty word slots go last.
  scores = tf.random.stateless_uniform([batch_size, seq_length], order_seed)
  slots = tf.range(seq_length)[tf.newaxis, :]
  scores = tf.where(slots < num_words[:, tf.newaxis], scores, 2.0)
  order = tf.argsort(scores, axis=1, stable=True)  # [batch, words]

  if config.whole_word_mask:
    ordered_length = tf.gather(word_length, order, batch_dims=1)

    def visit(step, taken_count, chosen):
      length = ordered_length[:, step]
      take = (length > 0) & (taken_count + length <= budget)
      taken_count += tf.where(take, length, 0)
      chosen = chosen | (
          tf.one_hot(order[:, step], seq_length, on_value=True, off_value=False, dtype=tf.bool)
          & take[:, tf.newaxis]
      )
      return step + 1, taken_count, chosen

    _, _, chosen_word = tf.while_loop(
        lambda step, taken_count, chosen: (step < seq_length) & tf.reduce_any(taken_count < budget),
        visit,
        (
            tf.constant(0),
            tf.zeros([batch_size], tf.int32),
            tf.zeros([batch_size, seq_length], tf.bool),
        ),
    )
  else:
    # Every word has one piece, so the greedy rule takes the first `budget` words.
    rank = tf.argsort(order, axis=1, stable=True)  # inverse permutation
    chosen_word = (rank < budget[:, tf.newaxis]) & (slots < num_words[:, tf.newaxis])
  chosen = candidate & tf.gather(chosen_word, word_index, batch_dims=1)  # [batch, seq]

  action = tf.random.stateless_uniform([batch_size, seq_length], action_seed)
  random_ids = tf.cast(
      tf.random.stateless_uniform(
          [batch_size, seq_length], random_id_seed, minval=0, maxval=vocab_size, dtype=tf.int32
      ),
      id_dtype,
  )
  use_mask = chosen & (action < config.mask_token_prob)
  use_random = (
      chosen
      & (action >= config.mask_token_prob)
      & (action < config.mask_token_prob + config.random_token_prob)
  )
  masked_input_ids = tf.where(
      use_mask, tf.cast(mask_id, id_dtype), tf.where(use_random, random_ids, input_ids)
  )

  # Sorted positions: the largest keys (seq_length - t) are the smallest chosen t.
  positions_key = tf.where(chosen, seq_length - slots, 0)
  k = (
      min(num_predictions, input_ids.shape[1])
      if input_ids.shape[1] is not None
      else (num_predictions)
  )
  top_keys, top_positions = tf.math.top_k(positions_key, k=k, sorted=True)
  is_real = top_keys > 0
  positions = tf.where(is_real, top_positions, 0)
  masked_lm_ids = tf.where(
      is_real, tf.gather(input_ids, positions, batch_dims=1), tf.zeros([], id_dtype)
  )
  weights = tf.cast(is_real, tf.float32)
  if k < num_predictions:
    pad = [[0, 0], [0, num_predictions - k]]
    positions, masked_lm_ids, weights = (
        tf.pad(positions, pad),
        tf.pad(masked_lm_ids, pad),
        tf.pad(weights, pad),
    )
  return {
      "input_ids": masked_input_ids,
      "masked_lm_positions": positions,
      "masked_lm_ids": masked_lm_ids,
      "masked_lm_weights": weights,
  }


class DynamicMasker(tf.Module):
  """Masks unmasked pretraining features, in-graph (offline tool and tf.data share it).

  Example:
    masker = DynamicMasker(MaskingConfig(max_predictions_per_seq=20), read_vocabulary(vocab_file))
    dataset = masker.mask_dataset(unmasked_batches, seed=1)   # fresh masks each epoch
  """

  def __init__(self, config: MaskingConfig, vocab: Union[Sequence[str], Vocabulary], name=None):
    """Args: config: the masking recipe; vocab: a `vocab.Vocabulary` (any kind, e.g.
    `vocab.read_vocabulary(vocab_file)`), or WordPiece tokens (index = id)."""
    super().__init__(name=name)
    if not isinstance(vocab, Vocabulary):  # InputError (a ValueError) without [MASK] ...
      vocab = Vocabulary.from_wordpiece_tokens(vocab)
    self.config = config
    self.vocab_size = vocab.vocab_size
    self.mask_id = vocab.mask_id
    self.cls_id = vocab.cls_id
    self.sep_id = vocab.sep_id
    self._word_starts = tf.constant(vocab.word_starts, tf.bool)

  def __call__(self, features: Dict[str, tf.Tensor], seed) -> Dict[str, tf.Tensor]:
    """Masks one example ([seq_length] features) or a batch ([batch, seq_length]).

    Args:
      features: dict with at least input_ids and input_mask (other keys pass through).
      seed: int Tensor [2].

    Returns:
      the features plus masked_lm_positions/ids/weights (SPEC §8), input_ids masked.
    """
    input_ids = features["input_ids"]
    unbatched = input_ids.shape.rank == 1
    expand = (lambda x: x[tf.newaxis]) if unbatched else (lambda x: x)
    ids = expand(input_ids)
    is_word_start = tf.gather(self._word_starts, tf.cast(ids, tf.int32))
    masked = mask_input_ids(
        ids,
        expand(features["input_mask"]),
        is_word_start,
        seed,
        self.config,
        vocab_size=self.vocab_size,
        mask_id=self.mask_id,
        cls_id=self.cls_id,
        sep_id=self.sep_id,
    )
    if unbatched:
      masked = {k: v[0] for k, v in masked.items()}
    out = dict(features)
    out.update(masked)
    out["masked_lm_positions"] = tf.cast(out["masked_lm_positions"], input_ids.dtype)
    return out

  def mask_dataset(
      self,
      dataset: tf.data.Dataset,
      seed: Optional[int] = None,
      num_parallel_calls=tf.data.AUTOTUNE,
  ) -> tf.data.Dataset:
    """Masks every element of a dataset of unmasked features, freshly each epoch.

    Seeds come from `tf.data.Dataset.random(seed, rerandomize_each_iteration=True)`, so
    a given `seed` reproduces the same sequence of epochs, and each epoch differs.
    """
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
    return tf.data.Dataset.zip((dataset, seeds)).map(
        lambda features, pair: self(features, pair),
        num_parallel_calls=num_parallel_calls,
        deterministic=True,
    )
