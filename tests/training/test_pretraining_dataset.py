"""The tf.data pipeline on TFRecords written by recurrent_bert.tools.create_pretraining_data."""

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert import io_utils
from recurrent_bert.data import dynamic_masking
from recurrent_bert.data import pretraining_dataset
from recurrent_bert.data import tokenization
from recurrent_bert.errors import InputError
from tests.training.conftest import MAX_PREDICTIONS
from tests.training.conftest import SEQ_LEN


def data_config(pattern, **kwargs):
  files = io_utils.expand_input_patterns([pattern])
  return pretraining_dataset.PretrainingDataConfig(
      input_files=files, max_seq_length=SEQ_LEN, max_predictions_per_seq=MAX_PREDICTIONS, **kwargs
  )


def take(dataset, n):
  return [{k: v.numpy() for k, v in batch.items()} for batch in dataset.take(n)]


@pytest.mark.slow(seconds=6)
def test_batches_have_static_shapes_and_schema_dtypes(masked_records):
  dataset = pretraining_dataset.make_pretraining_dataset(data_config(masked_records), 4)
  spec = dataset.element_spec
  for name in ("input_ids", "input_mask", "segment_ids"):
    assert spec[name].shape == (4, SEQ_LEN) and spec[name].dtype == tf.int32
  for name in ("masked_lm_positions", "masked_lm_ids"):
    assert spec[name].shape == (4, MAX_PREDICTIONS) and spec[name].dtype == tf.int32
  assert spec["masked_lm_weights"].dtype == tf.float32
  assert spec["next_sentence_labels"].shape == (4,)
  batch = take(dataset, 1)[0]
  # Records as the tool wrote them: [CLS] first, weights 1 exactly where positions are set.
  assert (batch["input_ids"][:, 0] == 2).all()
  assert ((batch["masked_lm_positions"] > 0) == (batch["masked_lm_weights"] > 0)).all()


@pytest.mark.slow(seconds=4)
def test_same_seed_same_batches_and_skip_is_an_offset(masked_records):
  config = data_config(masked_records, seed=7)
  first = take(pretraining_dataset.make_pretraining_dataset(config, 4), 6)
  again = take(pretraining_dataset.make_pretraining_dataset(config, 4), 6)
  skipped = take(pretraining_dataset.make_pretraining_dataset(config, 4, skip_batches=2), 4)
  for a, b in zip(first, again):
    np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
  for a, b in zip(first[2:], skipped):
    np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
  other = take(
      pretraining_dataset.make_pretraining_dataset(data_config(masked_records, seed=8), 4), 1
  )
  assert not np.array_equal(first[0]["input_ids"], other[0]["input_ids"])


def _all_records(files):
  return {bytes(r.numpy()) for r in tf.data.TFRecordDataset(files)}


@pytest.mark.slow(seconds=4)
def test_file_level_sharding_splits_files_between_pipelines(masked_records):
  config = data_config(masked_records, shuffle_buffer_size=1)
  assert len(config.input_files) == 2
  seen = []
  for pipeline in range(2):
    dataset = pretraining_dataset.make_pretraining_dataset(config, 1, pipeline, 2)
    ids = {tuple(b["input_ids"][0]) for b in take(dataset, 50)}
    seen.append(ids)
  assert not seen[0] & seen[1]
  # Each pipeline reads exactly one file.
  for pipeline, ids in enumerate(seen):
    file_ids = {
        tuple(
            tf.io.parse_single_example(
                r, {"input_ids": tf.io.FixedLenFeature([SEQ_LEN], tf.int64)}
            )["input_ids"].numpy()
        )
        for r in tf.data.TFRecordDataset(config.input_files[pipeline])
    }
    assert ids <= file_ids


@pytest.mark.slow(seconds=4)
def test_dynamic_masking_masks_unmasked_records(unmasked_records, vocab_file):
  masker = dynamic_masking.DynamicMasker(
      dynamic_masking.MaskingConfig(max_predictions_per_seq=MAX_PREDICTIONS),
      tokenization.load_vocab(vocab_file),
  )
  config = data_config(unmasked_records, masker=masker)
  pretraining_dataset.check_record_layout(config.input_files[0], config)
  batch = take(pretraining_dataset.make_pretraining_dataset(config, 8), 1)[0]
  assert batch["masked_lm_positions"].shape == (8, MAX_PREDICTIONS)
  real = batch["masked_lm_weights"] > 0
  assert real.sum(axis=1).min() >= 1
  masked_tokens = np.take_along_axis(batch["input_ids"], batch["masked_lm_positions"], 1)
  assert (masked_tokens[real] == masker.mask_id).mean() > 0.5  # 80% [MASK]


def test_layout_mismatches_name_the_flag(masked_records, unmasked_records, vocab_file):
  wrong_length = pretraining_dataset.PretrainingDataConfig(
      io_utils.expand_input_patterns([masked_records]), 128, MAX_PREDICTIONS
  )
  with pytest.raises(InputError, match="--max_seq_length=128"):
    pretraining_dataset.check_record_layout(wrong_length.input_files[0], wrong_length)
  config = data_config(unmasked_records)
  with pytest.raises(InputError, match="--dynamic_masking"):
    pretraining_dataset.check_record_layout(config.input_files[0], config)
  with pytest.raises(InputError, match="--input_files"):
    io_utils.expand_input_patterns(["/nonexistent/*.tfrecord"])
