"""The TFRecord schema is google-research/bert's (written out independently here)."""

import numpy as np
import tensorflow as tf

from recurrent_bert.data import schema

GOOGLE_BERT_SPEC = {  # run_pretraining.py's name_to_features, for 128 / 20
    "input_ids": tf.io.FixedLenFeature([128], tf.int64),
    "input_mask": tf.io.FixedLenFeature([128], tf.int64),
    "segment_ids": tf.io.FixedLenFeature([128], tf.int64),
    "masked_lm_positions": tf.io.FixedLenFeature([20], tf.int64),
    "masked_lm_ids": tf.io.FixedLenFeature([20], tf.int64),
    "masked_lm_weights": tf.io.FixedLenFeature([20], tf.float32),
    "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
}


def test_spec_matches_google_bert():
  assert schema.pretraining_feature_spec(128, 20) == GOOGLE_BERT_SPEC


def test_round_trip_through_plain_parse_single_example():
  rng = np.random.default_rng(0)
  features = {
      "input_ids": rng.integers(0, 30000, 128),
      "input_mask": np.ones(128, int),
      "segment_ids": np.zeros(128, int),
      "masked_lm_positions": np.arange(20),
      "masked_lm_ids": rng.integers(0, 30000, 20),
      "masked_lm_weights": np.ones(20),
      "next_sentence_labels": [1],
  }
  record = schema.serialize_example(features)
  parsed = tf.io.parse_single_example(record, GOOGLE_BERT_SPEC)
  for name, value in features.items():
    np.testing.assert_array_equal(parsed[name].numpy(), np.asarray(value).reshape(-1))
  ours = schema.parse_pretraining_example(tf.constant([record, record]), 128, 20)
  assert ours["input_ids"].dtype == tf.int32 and ours["input_ids"].shape == (2, 128)
  assert ours["masked_lm_weights"].dtype == tf.float32
  assert schema.serialize_example(features) == record  # deterministic bytes
