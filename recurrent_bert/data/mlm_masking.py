"""BERT's masked-LM masking rules in numpy, for the offline generator's workers.

The rules are those of `dynamic_masking.mask_input_ids` (its module docstring), which masks
at read time in tf.data; this twin runs without TensorFlow, vectorised over a batch, with a
numpy Generator as its randomness (so its draws differ from the in-graph function's; the
rules, and tests/data/test_masking.py's checks of them, are the same).
"""

import dataclasses
from typing import Dict

import numpy as np


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
  """The masked-LM recipe.

  Attributes:
    max_predictions_per_seq: cap on masked positions per sequence (the schema length).
    masked_lm_prob: fraction of tokens to predict.
    mask_token_prob: probability a chosen position becomes [MASK].
    random_token_prob: probability it becomes a random vocabulary id (else it is kept).
    whole_word_mask: choose all pieces of a word together.
  """

  max_predictions_per_seq: int = 20
  masked_lm_prob: float = 0.15
  mask_token_prob: float = 0.8
  random_token_prob: float = 0.1
  whole_word_mask: bool = False

  def __post_init__(self):
    if self.max_predictions_per_seq < 1:
      raise ValueError(f"max_predictions_per_seq must be >= 1, got {self.max_predictions_per_seq}")
    if not 0.0 < self.masked_lm_prob < 1.0:
      raise ValueError(f"masked_lm_prob must be in (0, 1), got {self.masked_lm_prob}")
    for name in ("mask_token_prob", "random_token_prob"):
      value = getattr(self, name)
      if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    if self.mask_token_prob + self.random_token_prob > 1.0 + 1e-9:
      raise ValueError(
          "mask_token_prob + random_token_prob must be <= 1, got "
          f"{self.mask_token_prob} + {self.random_token_prob}"
      )

  @property
  def keep_token_prob(self) -> float:
    return max(0.0, 1.0 - self.mask_token_prob - self.random_token_prob)


def num_to_predict(seq_len: int, config: MaskingConfig) -> int:
  """The number of positions to predict in a sequence of seq_len real tokens."""
  return min(config.max_predictions_per_seq, max(1, int(round(seq_len * config.masked_lm_prob))))


def mask_batch(
    input_ids: np.ndarray,
    input_mask: np.ndarray,
    is_word_start: np.ndarray,
    rng: np.random.Generator,
    config: MaskingConfig,
    *,
    vocab_size: int,
    mask_id: int,
    cls_id: int,
    sep_id: int,
) -> Dict[str, np.ndarray]:
  """Applies BERT's masking to a batch of unmasked sequences (numpy).

  Args:
    input_ids: int [batch, seq_length], right-padded.
    input_mask: int or bool [batch, seq_length], nonzero for real tokens.
    is_word_start: bool [batch, seq_length], False for pieces continuing a word (`##`, or
      no "▁"); only read with whole-word masking.
    rng: the randomness.
    config: the MaskingConfig.
    vocab_size, mask_id, cls_id, sep_id: from the vocabulary.

  Returns:
    dict with input_ids [batch, seq_length] (masked), masked_lm_positions int64,
    masked_lm_ids (original ids) and masked_lm_weights float32, each
    [batch, max_predictions_per_seq], 0-padded, positions ascending.
  """
  input_ids = np.asarray(input_ids)
  batch, length = input_ids.shape
  num_predictions = config.max_predictions_per_seq
  real = np.asarray(input_mask).astype(bool)
  candidate = real & (input_ids != cls_id) & (input_ids != sep_id)
  if config.whole_word_mask:
    previous_is_candidate = np.pad(candidate[:, :-1], [[0, 0], [1, 0]])
    starts = candidate & (np.asarray(is_word_start, bool) | ~previous_is_candidate)
  else:
    starts = candidate
  # word_index[b, t]: the candidate word of position t (garbage off candidates).
  word_index = np.maximum(np.cumsum(starts, axis=1) - 1, 0)
  num_words = starts.sum(axis=1)
  rows = np.arange(batch)[:, None]
  # float32 as in the graph, and np.round rounds half to even like tf.round.
  seq_len = real.sum(axis=1).astype(np.float32)
  budget = np.round(seq_len * np.float32(config.masked_lm_prob)).astype(np.int64)
  budget = np.minimum(num_predictions, np.maximum(1, budget))
  slots = np.arange(length)[None, :]
  # A uniformly random visiting order of the words; empty word slots go last.
  scores = np.where(slots < num_words[:, None], rng.random((batch, length)), 2.0)
  order = np.argsort(scores, axis=1, kind="stable")
  if config.whole_word_mask:
    word_length = np.bincount(
        (rows * length + word_index)[candidate], minlength=batch * length
    ).reshape(batch, length)
    ordered_length = np.take_along_axis(word_length, order, axis=1)
    taken = np.zeros(batch, np.int64)
    chosen_word = np.zeros((batch, length), bool)
    # BERT's greedy rule, one visiting step at a time over the rows still open: most
    # rows fill their budget within ~budget steps, a few visit all their words.
    active = np.arange(batch)
    for step in range(int(num_words.max(initial=0))):
      if step % 8 == 0:
        active = active[(taken[active] < budget[active]) & (num_words[active] > step)]
        if not len(active):
          break
      size = ordered_length[active, step]
      take = (size > 0) & (taken[active] + size <= budget[active])
      taken[active] += np.where(take, size, 0)
      chosen_word[active, order[active, step]] |= take
  else:
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(slots, order.shape), axis=1)
    chosen_word = (rank < budget[:, None]) & (slots < num_words[:, None])
  chosen = candidate & np.take_along_axis(chosen_word, word_index, axis=1)

  action = rng.random((batch, length))
  random_ids = rng.integers(0, vocab_size, (batch, length)).astype(input_ids.dtype)
  use_mask = chosen & (action < config.mask_token_prob)
  use_random = chosen & ~use_mask & (action < config.mask_token_prob + config.random_token_prob)
  masked_ids = np.where(use_mask, mask_id, np.where(use_random, random_ids, input_ids))

  # Chosen positions ascending, each at its rank among its row's chosen ones (no sort:
  # np.nonzero walks rows in order; at most `budget` <= num_predictions per row).
  row, column = np.nonzero(chosen)
  rank = (np.cumsum(chosen, axis=1) - 1)[row, column]
  positions = np.zeros((batch, num_predictions), np.int64)
  positions[row, rank] = column
  masked_lm_ids = np.zeros((batch, num_predictions), input_ids.dtype)
  masked_lm_ids[row, rank] = input_ids[row, column]
  weights = np.zeros((batch, num_predictions), np.float32)
  weights[row, rank] = 1.0
  return {
      "input_ids": masked_ids.astype(input_ids.dtype),
      "masked_lm_positions": positions,
      "masked_lm_ids": masked_lm_ids,
      "masked_lm_weights": weights,
  }
