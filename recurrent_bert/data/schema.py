"""The pretraining TFRecord schema (SPEC §8) — the one place that defines it.

google-research/bert and the TF Model Garden write, per instance, one `tf.train.Example`:

  input_ids             int64 [max_seq_length]            word-piece ids, 0-padded
  input_mask            int64 [max_seq_length]            1 for real tokens, 0 for padding
  segment_ids           int64 [max_seq_length]            0 for [CLS] A [SEP], 1 for B [SEP]
  masked_lm_positions   int64 [max_predictions_per_seq]   sorted, 0-padded
  masked_lm_ids         int64 [max_predictions_per_seq]   original ids, 0-padded
  masked_lm_weights     float [max_predictions_per_seq]   1.0 real, 0.0 padding
  next_sentence_labels  int64 [1]                         0 = IsNext, 1 = random next

Unmasked records (for dynamic masking at read time) carry only the first three features
and `next_sentence_labels`.
"""

from typing import Dict, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

from recurrent_bert.data import pretraining_records

UNMASKED_FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "next_sentence_labels")
MASKED_LM_FEATURE_NAMES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
PRETRAINING_FEATURE_NAMES = (
    UNMASKED_FEATURE_NAMES[:3] + MASKED_LM_FEATURE_NAMES + ("next_sentence_labels",)
)
_FLOAT_FEATURES = frozenset({"masked_lm_weights"})


def _specs(layout) -> Dict[str, tf.io.FixedLenFeature]:
  dtypes = {"int64": tf.int64, "float": tf.float32}
  return {name: tf.io.FixedLenFeature([n], dtypes[kind]) for name, (n, kind) in layout.items()}


def unmasked_feature_spec(max_seq_length: int) -> Dict[str, tf.io.FixedLenFeature]:
  """Feature spec of unmasked records: input_ids/input_mask/segment_ids, NSP label."""
  return _specs(pretraining_records.feature_layout(max_seq_length, None))


def pretraining_feature_spec(
    max_seq_length: int, max_predictions_per_seq: int
) -> Dict[str, tf.io.FixedLenFeature]:
  """Feature spec of masked pretraining records, exactly google-research/bert's."""
  return _specs(pretraining_records.feature_layout(max_seq_length, max_predictions_per_seq))


def serialize_example(features: Mapping[str, Sequence]) -> bytes:
  """Serializes one instance as a tf.train.Example.

  Args:
    features: name -> 1-D sequence (list or numpy array). `masked_lm_weights` is stored
      as float, everything else as int64. Lengths must already be padded to the schema.

  Returns:
    The serialized `tf.train.Example`.
  """
  feature = {}
  for name, values in features.items():
    if name in _FLOAT_FEATURES:
      values = np.asarray(values, np.float32).reshape(-1).tolist()
      feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
    else:
      values = np.asarray(values, np.int64).reshape(-1).tolist()
      feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
  # deterministic=True sorts the feature map: byte-identical shards across runs/processes.
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(
      deterministic=True
  )


def _cast_ints(parsed: Dict[str, tf.Tensor], int_dtype) -> Dict[str, tf.Tensor]:
  if int_dtype == tf.int64:
    return parsed
  return {k: (tf.cast(v, int_dtype) if v.dtype == tf.int64 else v) for k, v in parsed.items()}


def parse_pretraining_example(
    serialized,
    max_seq_length: int,
    max_predictions_per_seq: int,
    int_dtype=tf.int32,
    names: Optional[tf.Tensor] = None,
) -> Dict[str, tf.Tensor]:
  """Parses masked pretraining records.

  Args:
    serialized: string Tensor, scalar (one record) or [batch].
    max_seq_length, max_predictions_per_seq: the schema's lengths.
    int_dtype: int features are cast to this (int32 by default: TPUs and XLA prefer it).
    names: optional string Tensor shaped like `serialized`: each record's name, which the
      parser's errors (a missing feature, a wrong length or type) start with ("Name: ...").

  Returns:
    dict of the SPEC §8 features, shapes [(batch,) length] as in the module docstring.
  """
  spec = pretraining_feature_spec(max_seq_length, max_predictions_per_seq)
  return _cast_ints(tf.io.parse_example(serialized, spec, example_names=names), int_dtype)


def parse_unmasked_example(
    serialized, max_seq_length: int, int_dtype=tf.int32, names: Optional[tf.Tensor] = None
) -> Dict[str, tf.Tensor]:
  """Parses unmasked records (scalar or [batch] string Tensor); see parse_pretraining_example."""
  spec = unmasked_feature_spec(max_seq_length)
  return _cast_ints(tf.io.parse_example(serialized, spec, example_names=names), int_dtype)


# Field 15 of tf.train.Example is unused, and parsers skip fields they do not know. The
# one error TF's parser reports without the record's name — bytes that are not an Example
# at all — quotes the bytes instead ("Could not parse example input, value: '...'"), so
# a record that starts with its name in that field is named by that error too.
NAME_FIELD_TAG = b"\x7a"  # field 15, wire type 2 (length-delimited)
_MAX_NAME_BYTES = (1 << 14) - 1  # a two-byte varint length


def with_name_field(serialized: tf.Tensor, names: tf.Tensor) -> tf.Tensor:
  """Records [batch] with field 15 = their name [batch] in front (in-graph, no Python).

  The parsed features are unchanged; `read_name_field` reads the name back from the bytes
  an error message quotes.
  """
  byte = tf.constant([bytes([i]) for i in range(256)])
  names = tf.strings.substr(names, 0, _MAX_NAME_BYTES)
  length = tf.strings.length(names)
  two_bytes = length >= 128
  low = tf.gather(byte, length % 128 + tf.where(two_bytes, 128, 0))
  high = tf.where(two_bytes, tf.gather(byte, length // 128), "")
  return tf.strings.join([NAME_FIELD_TAG, low, high, names, serialized])


def read_name_field(data: bytes) -> Optional[str]:
  """The name `with_name_field` put at the start of `data` (None: there is none)."""
  if len(data) < 2 or data[:1] != NAME_FIELD_TAG:
    return None
  length, start = data[1] & 0x7F, 2
  if data[1] & 0x80:
    if len(data) < 3:
      return None
    length, start = length | (data[2] << 7), 3
  name = data[start : start + length]
  return name.decode("utf-8", "replace") if len(name) == length else None
