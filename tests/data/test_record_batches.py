"""The JAX loop's training batches (`record_batches.training_batches`): file order against
tf.data's, epochs, the resume contract, sharding and masking at read time."""

import collections
import itertools

import numpy as np
import pytest

from recurrent_bert.data import pretraining_dataset
from recurrent_bert.data import record_batches
from recurrent_bert.data import vocab as vocab_lib
from recurrent_bert.data.dynamic_masking import MaskingConfig
from tests.data.test_pretraining_records import config
from tests.data.test_pretraining_records import tool_records  # noqa: F401
from tests.data.test_pretraining_records import write_tool_records


def _rows(batches):
  """Each row of `batches` as bytes (features in key order), in order."""
  for batch in batches:
    for r in range(len(batch["input_ids"])):
      yield b"".join(batch[k][r].tobytes() for k in sorted(batch))


def _take(iterator, n):
  return list(itertools.islice(iterator, n))


def test_one_file_unshuffled_reads_as_tf_data_does(tool_records):
  """One shard, a shuffle buffer of 1: the batches of tf.data's training pipeline."""
  files, vocab_size = tool_records
  cfg = config(files[:1], 32, 5, vocab_size)
  cfg = pretraining_dataset.PretrainingDataConfig(**{**cfg.__dict__, "shuffle_buffer_size": 1})
  count = pretraining_dataset.count_records(cfg)
  steps = 2 * count // 4 + 1  # past the end of the first epoch
  theirs = [
      {k: v.numpy() for k, v in batch.items()}
      for batch in pretraining_dataset.make_pretraining_dataset(cfg, 4).take(steps)
  ]
  ours = _take(record_batches.training_batches(cfg, 4), steps)
  assert list(_rows(ours)) == list(_rows(theirs))


def test_epochs_shuffle_every_record_in_and_resume_where_they_left(tool_records):
  files, vocab_size = tool_records
  cfg = config(files, 32, 5, vocab_size)
  cfg = pretraining_dataset.PretrainingDataConfig(**{**cfg.__dict__, "shuffle_buffer_size": 8})
  count = pretraining_dataset.count_records(cfg)
  file_order = list(_rows(pretraining_dataset.pretraining_records.batches(cfg, 1)))
  stream = list(_rows(_take(record_batches.training_batches(cfg, 2), 10 * count // 2)))
  assert stream[:count] != file_order  # shuffled
  seen = collections.Counter(stream)
  assert set(seen) == set(file_order)
  # 10 epochs through a buffer of 8: each record 10 times, give or take the buffer.
  assert all(9 <= n <= 11 for n in seen.values()), seen.most_common(3)
  resumed = list(_rows(_take(record_batches.training_batches(cfg, 2, skip_batches=7), 5)))
  assert resumed == stream[14:24]


def test_shards_split_each_epoch_between_processes(tool_records):
  files, vocab_size = tool_records
  cfg = config(files, 32, 5, vocab_size)
  cfg = pretraining_dataset.PretrainingDataConfig(**{**cfg.__dict__, "shuffle_buffer_size": 1})
  count = pretraining_dataset.count_records(cfg)
  half = count // 2
  first, second = (
      list(_rows(_take(record_batches.training_batches(cfg, 1, shard=(i, 2)), half)))
      for i in (0, 1)
  )
  whole = list(_rows(_take(record_batches.training_batches(cfg, 1), 2 * half)))
  assert first == whole[0::2] and second == whole[1::2]


@pytest.fixture(scope="module")
def unmasked(tmp_path_factory):
  """One shard of unmasked records (--dynamic_masking) and their vocabulary."""
  files, vocab = write_tool_records(
      tmp_path_factory.mktemp("unmasked"), num_shards=1, documents=8, seed=1, dynamic_masking=True
  )
  return files, vocab_lib.read_vocabulary(str(vocab))


def test_unmasked_records_are_masked_by_batch_index(unmasked):
  files, vocabulary = unmasked
  cfg = config(files, 32, 5, vocabulary.vocab_size)
  masker = record_batches.BatchMasker.from_vocabulary(
      MaskingConfig(max_predictions_per_seq=5), vocabulary
  )
  batches = _take(record_batches.training_batches(cfg, 4, masker), 6)
  for batch in batches:
    assert batch["masked_lm_positions"].shape == (4, 5)
    weights = batch["masked_lm_weights"]
    assert (weights.sum(axis=1) >= 1).all()
    # A masked position holds [MASK], a random id or the original; the original id is kept.
    rows, slots = np.nonzero(weights)
    positions = batch["masked_lm_positions"][rows, slots]
    assert (batch["input_mask"][rows, positions] == 1).all()
  # Batch k's masks are its index's: a resumed stream masks as the uninterrupted one did.
  again = _take(record_batches.training_batches(cfg, 4, masker, skip_batches=3), 3)
  assert list(_rows(again)) == list(_rows(batches[3:]))
