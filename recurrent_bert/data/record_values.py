"""The values of parsed pretraining records, checked in the input graph (SPEC §8): the
rules of `pretraining_records.value_rules` (which the numpy reader checks too) as asserts.

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

from recurrent_bert.data import pretraining_records
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


class _GraphOps:
  row_sum = staticmethod(lambda x: tf.reduce_sum(tf.cast(x, tf.int64), axis=1, keepdims=True))
  is_finite = staticmethod(tf.math.is_finite)


def value_checks(
    features: Dict[str, tf.Tensor],
    names: tf.Tensor,
    max_seq_length: int,
    vocab_size: Optional[int] = None,
    type_vocab_size: int = 2,
) -> List[tf.Operation]:
  """`pretraining_records.value_rules` as asserts on a parsed batch (the rules of the
  features present: masked ones only in masked records)."""
  rules = pretraining_records.value_rules(max_seq_length, vocab_size, type_vocab_size)
  return [
      check(rule.ok(features, _GraphOps), features[rule.feature], names, rule.what)
      for rule in rules
      if rule.feature in features
  ]
