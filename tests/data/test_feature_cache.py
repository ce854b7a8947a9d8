"""The TFRecord feature cache: round trip, fingerprint-keyed reuse, interrupted writes."""

import os

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.data import feature_cache
from recurrent_bert.errors import InputError


def _example_features(num_rows=5, seq_length=6):
  rng = np.random.default_rng(0)
  return {
      "input_ids": rng.integers(0, 100, (num_rows, seq_length)).astype(np.int32),
      "label_ids": rng.normal(size=num_rows).astype(np.float32),
      "example_index": np.arange(num_rows, dtype=np.int32),
  }


def test_cache_roundtrip_through_numpy_and_tf_data(tmp_path):
  features = _example_features()
  path = str(tmp_path / "cache" / "train.tfrecord")
  feature_cache.write_feature_cache(path, features, "fp1")
  back = feature_cache.read_feature_cache(path)
  for name, array in features.items():
    np.testing.assert_array_equal(back[name], array)
  rows = list(feature_cache.load_feature_dataset(path).as_numpy_iterator())
  assert len(rows) == 5
  np.testing.assert_array_equal(rows[2]["input_ids"], features["input_ids"][2])
  assert rows[2]["input_ids"].dtype == np.int32
  assert rows[2]["label_ids"] == pytest.approx(features["label_ids"][2])
  # Only the two final files, no temporaries left behind.
  assert sorted(os.listdir(tmp_path / "cache")) == ["train.tfrecord", "train.tfrecord.json"]
  # Each line is a standard tf.train.Example any TF reader can parse.
  record = next(iter(tf.data.TFRecordDataset(path)))
  parsed = tf.train.Example.FromString(record.numpy())
  assert list(parsed.features.feature["input_ids"].int64_list.value) == (
      features["input_ids"][0].tolist()
  )


def test_cached_features_reuses_only_a_matching_complete_cache(tmp_path):
  path = str(tmp_path / "f.tfrecord")
  calls = []

  def build():
    calls.append(1)
    return _example_features()

  feature_cache.cached_features(path, "fp1", build)
  feature_cache.cached_features(path, "fp1", build)
  assert len(calls) == 1  # second call read the cache
  feature_cache.cached_features(path, "fp2", build)
  assert len(calls) == 2  # different fingerprint: rebuilt
  os.remove(path + ".json")  # as if the write had been interrupted before the sidecar
  feature_cache.cached_features(path, "fp2", build)
  assert len(calls) == 3


def test_interrupted_cache_write_leaves_no_valid_cache(tmp_path, monkeypatch):
  path = str(tmp_path / "f.tfrecord")

  def failing_serialize(features, row):
    raise KeyboardInterrupt

  monkeypatch.setattr(feature_cache, "_serialize_row", failing_serialize)
  with pytest.raises(KeyboardInterrupt):
    feature_cache.write_feature_cache(path, _example_features(), "fp")
  assert os.listdir(tmp_path) == []
  with pytest.raises(InputError, match="no complete feature cache"):
    feature_cache.load_feature_dataset(path)


def test_fingerprint_changes_with_any_part():
  assert feature_cache.fingerprint("a", 1) == feature_cache.fingerprint("a", 1)
  assert feature_cache.fingerprint("a", 1) != feature_cache.fingerprint("a", 2)
