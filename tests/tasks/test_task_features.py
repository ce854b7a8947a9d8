"""Sentence-pair packing, longest-first truncation, and the TFRecord feature cache.

A tiny word-level vocabulary (every test word is one piece) makes the expected packing
writable by hand.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.tasks import task_features
from recurrent_bert.io_utils import InputError
from recurrent_bert.tasks.task_features import PairExample
from recurrent_bert.data.tokenization import BertWordpieceTokenizer
from tests.data.conftest import RESERVED
from tests.data.conftest import write_vocab

WORDS = ["a1", "a2", "a3", "a4", "a5", "b1", "b2", "b3", "b4", "b5", "b6"]


@pytest.fixture(scope="module")
def word_tokenizer(tmp_path_factory):
  path = write_vocab(tmp_path_factory.mktemp("wordvocab") / "vocab.txt", RESERVED + WORDS)
  return BertWordpieceTokenizer(path, do_lower_case=True)


def _ids(tokenizer, words):
  return tokenizer.convert_tokens_to_ids(words)


def test_pair_packing_layout(word_tokenizer):
  t = word_tokenizer
  examples = [PairExample("e0", "a1 a2", "b1 b2 b3", "1"),
              PairExample("e1", "A3", None, "0")]
  features = task_features.convert_pair_examples(examples, t, 9, label_list=("0", "1"))
  cls, sep, pad = t.cls_id, t.sep_id, t.pad_id
  expected_pair = [cls, *_ids(t, ["a1", "a2"]), sep, *_ids(t, ["b1", "b2", "b3"]), sep, pad]
  np.testing.assert_array_equal(features["input_ids"][0], expected_pair)
  np.testing.assert_array_equal(features["segment_ids"][0], [0, 0, 0, 0, 1, 1, 1, 1, 0])
  np.testing.assert_array_equal(features["input_mask"][0], [1] * 8 + [0])
  expected_single = [cls, *_ids(t, ["a3"]), sep] + [pad] * 6
  np.testing.assert_array_equal(features["input_ids"][1], expected_single)
  np.testing.assert_array_equal(features["segment_ids"][1], [0] * 9)
  np.testing.assert_array_equal(features["input_mask"][1], [1, 1, 1] + [0] * 6)
  np.testing.assert_array_equal(features["label_ids"], [1, 0])
  assert features["input_ids"].dtype == np.int32 and features["input_ids"].shape == (2, 9)


@pytest.mark.parametrize("text_a, text_b, max_seq_length, kept_a, kept_b", [
    # 5 + 6 pieces into 10 - 3 = 7: b (longer) loses b6 -> 5 + 5; tie, b loses b5 ->
    # 5 + 4; a is longer, loses a5 -> 4 + 4; tie, b loses b4 -> 4 + 3.
    ("a1 a2 a3 a4 a5", "b1 b2 b3 b4 b5 b6", 10, 4, 3),
    # A short a keeps everything; the long b is cut from its end.
    ("a1", "b1 b2 b3 b4 b5 b6", 7, 1, 3),
    # A tie removes from b first (google-research/bert): 3 + 3 into 5 -> 3 + 2.
    ("a1 a2 a3", "b1 b2 b3", 8, 3, 2),
])
def test_longest_first_truncation(word_tokenizer, text_a, text_b, max_seq_length, kept_a,
                                  kept_b):
  t = word_tokenizer
  features = task_features.convert_pair_examples(
      [PairExample("e", text_a, text_b, None)], t, max_seq_length, label_list=("0", "1"))
  expected = ([t.cls_id, *_ids(t, text_a.split()[:kept_a]), t.sep_id,
               *_ids(t, text_b.split()[:kept_b]), t.sep_id])
  expected += [t.pad_id] * (max_seq_length - len(expected))
  np.testing.assert_array_equal(features["input_ids"][0], expected)
  removed = len(text_a.split()) + len(text_b.split()) - kept_a - kept_b
  assert features["num_truncated_tokens"][0] == removed
  assert features["label_ids"][0] == -1  # unlabeled


def test_single_sentence_truncation_and_regression_labels(word_tokenizer):
  t = word_tokenizer
  features = task_features.convert_pair_examples(
      [PairExample("e", "a1 a2 a3 a4", None, 3.2), PairExample("f", "a1", None, None)],
      t, 4, label_list=None)
  np.testing.assert_array_equal(features["input_ids"][0],
                                [t.cls_id, *_ids(t, ["a1", "a2"]), t.sep_id])
  assert features["label_ids"].dtype == np.float32
  assert features["label_ids"][0] == pytest.approx(3.2)
  assert np.isnan(features["label_ids"][1])


def test_unknown_label_is_rejected(word_tokenizer):
  with pytest.raises(ValueError, match="'maybe'"):
    task_features.convert_pair_examples([PairExample("e", "a1", None, "maybe")],
                                        word_tokenizer, 8, label_list=("0", "1"))


def _example_features(num_rows=5, seq_length=6):
  rng = np.random.default_rng(0)
  return {"input_ids": rng.integers(0, 100, (num_rows, seq_length)).astype(np.int32),
          "label_ids": rng.normal(size=num_rows).astype(np.float32),
          "example_index": np.arange(num_rows, dtype=np.int32)}


def test_cache_roundtrip_through_numpy_and_tf_data(tmp_path):
  features = _example_features()
  path = str(tmp_path / "cache" / "train.tfrecord")
  task_features.write_feature_cache(path, features, "fp1")
  back = task_features.read_feature_cache(path)
  for name, array in features.items():
    np.testing.assert_array_equal(back[name], array)
  rows = list(task_features.load_feature_dataset(path).as_numpy_iterator())
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
      features["input_ids"][0].tolist())


def test_cached_features_reuses_only_a_matching_complete_cache(tmp_path):
  path = str(tmp_path / "f.tfrecord")
  calls = []

  def build():
    calls.append(1)
    return _example_features()

  task_features.cached_features(path, "fp1", build)
  task_features.cached_features(path, "fp1", build)
  assert len(calls) == 1  # second call read the cache
  task_features.cached_features(path, "fp2", build)
  assert len(calls) == 2  # different fingerprint: rebuilt
  os.remove(path + ".json")  # as if the write had been interrupted before the sidecar
  task_features.cached_features(path, "fp2", build)
  assert len(calls) == 3


def test_interrupted_cache_write_leaves_no_valid_cache(tmp_path, monkeypatch):
  path = str(tmp_path / "f.tfrecord")

  def failing_serialize(features, row):
    raise KeyboardInterrupt

  monkeypatch.setattr(task_features, "_serialize_row", failing_serialize)
  with pytest.raises(KeyboardInterrupt):
    task_features.write_feature_cache(path, _example_features(), "fp")
  assert os.listdir(tmp_path) == []
  with pytest.raises(InputError, match="no complete feature cache"):
    task_features.load_feature_dataset(path)


def test_fingerprint_changes_with_any_part():
  assert task_features.fingerprint("a", 1) == task_features.fingerprint("a", 1)
  assert task_features.fingerprint("a", 1) != task_features.fingerprint("a", 2)
