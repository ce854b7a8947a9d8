"""The values of parsed pretraining records, checked in the input graph (SPEC §8).

Every batch the training and held-out pipelines produce passes these asserts before the
model sees it: ids the embedding can look up, segment ids, 0/1 masks and labels, masked
positions inside the sequence (and, where weighted, inside the input_mask), finite weights
in [0, 1]. Each failing check names the first bad record ("path: record N (byte B)", from
`names`) and its value, bracketed for `record_errors` to read back. A passing batch pays
the comparisons and a reduction per check (`benchmarks/record_checks.py` measures it); the
message is built only when a check fails.

Features are int64 [B, T] / [B, P] as parsed (checked before the cast to int32, which
would wrap 2**32 + 5 around to 5), float32 [B, P] weights, int64 [B, 1] NSP labels.
"""

from typing import Dict, List, Optional

import tensorflow as tf

from recurrent_bert.data.record_errors import CHECK_BEGIN
from recurrent_bert.data.record_errors import CHECK_END


def check(ok: tf.Tensor, values: tf.Tensor, names: tf.Tensor, what: str) -> tf.Operation:
  """Asserts `ok` [B, K] everywhere; the error names the first bad record and its value.

  The message is built only when a check fails (a cond): a passing batch pays the
  comparisons and one reduction.
  """
  ok_rows = tf.reduce_all(ok, axis=1)
  all_ok = tf.reduce_all(ok_rows)

  def message():
    row = tf.argmin(tf.cast(ok_rows, tf.int32))
    column = tf.argmin(tf.cast(tf.gather(ok, row), tf.int32))
    value = tf.gather(tf.gather(values, row), column)
    return tf.strings.join(
        [
            CHECK_BEGIN,
            tf.gather(names, row),
            ": ",
            what,
            " (",
            tf.strings.as_string(value),
            " at index ",
            tf.strings.as_string(column),
            ")",
            CHECK_END,
        ]
    )

  return tf.debugging.Assert(all_ok, [tf.cond(all_ok, lambda: tf.constant(""), message)])


def in_range(values: tf.Tensor, low, high) -> tf.Tensor:
  return (values >= low) & (values < high)


def value_checks(
    features: Dict[str, tf.Tensor],
    names: tf.Tensor,
    max_seq_length: int,
    vocab_size: Optional[int] = None,
    type_vocab_size: int = 2,
) -> List[tf.Operation]:
  """The schema's value rules on a parsed batch (masked fields only when present).

  (TF's Assert escapes quotes in what it prints: the messages hold none.)
  """
  vocab = vocab_size
  ids_rule = f"outside [0, {vocab}) (vocab_size of the model)" if vocab else "negative"
  max_id = vocab if vocab else 2**31  # int32 in the model
  types = type_vocab_size
  input_mask = features["input_mask"]
  checks = [
      check(
          in_range(features["input_ids"], 0, max_id),
          features["input_ids"],
          names,
          f"input_ids {ids_rule}",
      ),
      check(in_range(input_mask, 0, 2), input_mask, names, "input_mask must be 0 or 1"),
      check(
          in_range(features["segment_ids"], 0, types),
          features["segment_ids"],
          names,
          f"segment_ids outside [0, {types}) (type_vocab_size of the model)",
      ),
      check(
          in_range(features["next_sentence_labels"], 0, 2),
          features["next_sentence_labels"],
          names,
          "next_sentence_labels must be 0 or 1",
      ),
  ]
  if "masked_lm_positions" not in features:
    return checks
  positions, weights = features["masked_lm_positions"], features["masked_lm_weights"]
  seq_len = max_seq_length
  real_length = tf.reduce_sum(tf.cast(input_mask, positions.dtype), axis=1, keepdims=True)
  finite_weights = tf.where(tf.math.is_finite(weights), weights, -1.0)
  return checks + [
      check(
          in_range(positions, 0, seq_len),
          positions,
          names,
          f"masked_lm_positions outside [0, {seq_len})",
      ),
      # Padding predictions (weight 0) sit at position 0; a weighted one must be real.
      check(
          (weights == 0) | (positions < real_length),
          positions,
          names,
          "a weighted masked_lm_position outside the input_mask",
      ),
      check(
          in_range(features["masked_lm_ids"], 0, max_id),
          features["masked_lm_ids"],
          names,
          f"masked_lm_ids {ids_rule}",
      ),
      check(
          (finite_weights >= 0) & (finite_weights <= 1),
          weights,
          names,
          "masked_lm_weights must be finite and in [0, 1]",
      ),
  ]
