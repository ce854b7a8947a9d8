"""Issue 31: pretraining shards are read whole or refused, through every reader.

Three shards of 8 records with the generator's stats.json; one of them is damaged six ways
(cut inside a record, cut at a record boundary, a flipped data CRC, a flipped payload byte,
emptied, replaced by text) and placed first, in the middle or last. The training pipeline
runs with file shuffling, interleave and record shuffling on. Each case stops with the
file and the record named, or, with `skipped` (--skip_bad_records), yields exactly the good
records and counts the others. Expected offsets and records come from the TFRecord format
(12-byte header, data, 4-byte CRC) and from the records as written, not from the package's
reader; `tfrecord_frames.read_frames` is checked against TF's own reader.
"""

import os

import pytest
import tensorflow as tf

from recurrent_bert.data import pretraining_dataset
from recurrent_bert.data import record_errors
from recurrent_bert.data import tfrecord_frames
from recurrent_bert.errors import InputError
from tests.data.test_pretraining_records_bad_input import FOOTER
from tests.data.test_pretraining_records_bad_input import HEADER
from tests.data.test_pretraining_records_bad_input import PRED
from tests.data.test_pretraining_records_bad_input import SEQ
from tests.data.test_pretraining_records_bad_input import example_bytes
from tests.data.test_pretraining_records_bad_input import features_of
from tests.data.test_pretraining_records_bad_input import frame_offsets
from tests.data.test_pretraining_records_bad_input import write_shard
from tests.data.test_pretraining_records_bad_input import write_stats

PER_SHARD, SHARDS = 8, 3
DAMAGED_RECORD = 5  # 1-based, inside the damaged shard
CASES = ("cut_inside", "cut_at_boundary", "flipped_crc", "flipped_payload", "empty", "not_tfrecord")


def record(i):
  """Record i: valid, told apart by input_ids[1] = 100 + i."""
  features = features_of(i)
  features["input_ids"][1] = 100 + i
  return example_bytes(features)


def make_shards(directory, damaged_shard, case, stats=True):
  """Three shards (record i of shard s is global index 8 s + i); one damaged as `case`.

  Returns:
    (paths, the global indices that can still be read, the damaged shard's path, the
    expected damaged (1-based record, byte offset), or None where no record is named).
  """
  paths, counts = [], []
  for s in range(SHARDS):
    name = f"pretraining-{s:05d}-of-{SHARDS:05d}.tfrecord"
    records = [record(PER_SHARD * s + i) for i in range(PER_SHARD)]
    paths.append(write_shard(directory / name, records))
    counts.append(len(records))
  if stats:
    write_stats(directory, paths, counts)
  path = paths[damaged_shard]
  records = [record(PER_SHARD * damaged_shard + i) for i in range(PER_SHARD)]
  offsets = frame_offsets(records)
  with open(path, "rb") as f:
    data = bytearray(f.read())
  k = DAMAGED_RECORD - 1
  lost = set()
  named = (DAMAGED_RECORD, offsets[k])
  if case == "cut_inside":
    data = data[: offsets[k] + HEADER + 3]
    lost = set(range(k, PER_SHARD))
  elif case == "cut_at_boundary":
    data = data[: offsets[k]]
    lost, named = set(range(k, PER_SHARD)), None
  elif case == "flipped_crc":
    data[offsets[k + 1] - FOOTER] ^= 0x01
    lost = {k}
  elif case == "flipped_payload":
    data[offsets[k] + HEADER + 5] ^= 0x20
    lost = {k}
  elif case == "empty":
    data, lost, named = b"", set(range(PER_SHARD)), None
  else:  # a text file where a shard should be
    data = b"input_ids\t2 5 6 7 3\n" * 40
    lost, named = set(range(PER_SHARD)), (1, 0)
  with open(path, "wb") as f:
    f.write(bytes(data))
  good = [
      PER_SHARD * s + i
      for s in range(SHARDS)
      for i in range(PER_SHARD)
      if s != damaged_shard or i not in lost
  ]
  return paths, good, path, named


def config(paths, skipped=None):
  return pretraining_dataset.PretrainingDataConfig(
      input_files=paths,
      max_seq_length=SEQ,
      max_predictions_per_seq=PRED,
      seed=3,
      shuffle_buffer_size=5,
      cycle_length=SHARDS,
      skipped=skipped,
  )


def training_records(paths, skipped=None, batch=2):
  """Global indices of the records the training pipeline yields over about three epochs."""
  dataset = pretraining_dataset.make_pretraining_dataset(config(paths, skipped), batch)
  seen = []
  with record_errors.reading_records():
    for batch_features in dataset.take(3 * SHARDS * PER_SHARD // batch):
      seen += (batch_features["input_ids"][:, 1].numpy() - 100).tolist()
  return seen


def eval_records(paths, skipped=None, batch=2):
  """Global indices of the held-out pipeline's records, each once, in file order."""
  eval_config = config(paths, skipped)
  num = pretraining_dataset.count_records(eval_config)
  dataset = pretraining_dataset.make_eval_dataset(eval_config, batch, -(-num // batch))
  seen = []
  with record_errors.reading_records():
    for b in dataset:
      ids = b["input_ids"][:, 1].numpy() - 100
      seen += [int(i) for i, w in zip(ids, b["example_weights"].numpy()) if w > 0]
  return num, seen


def expected_message(case, path, named):
  if case == "cut_at_boundary":
    return rf"{path}: expected 8 records .* found {DAMAGED_RECORD - 1} whole records"
  if case == "empty":
    return rf"{path}: expected 8 records .* found 0 whole records, 0 bytes"
  record_no, offset = named
  return rf"{path}: .*record {record_no} \(byte {offset}\)"


@pytest.mark.slow(seconds=8)
@pytest.mark.parametrize("damaged_shard", [0, 1, 2], ids=["first", "middle", "last"])
@pytest.mark.parametrize("case", CASES)
def test_a_damaged_shard_stops_training_naming_file_and_record(tmp_path, case, damaged_shard):
  paths, _, path, named = make_shards(tmp_path, damaged_shard, case)
  with pytest.raises(InputError, match=expected_message(case, path, named)) as raised:
    training_records(paths)
  assert "\n" not in str(raised.value)


@pytest.mark.slow(seconds=46)
@pytest.mark.parametrize("damaged_shard", [0, 1, 2], ids=["first", "middle", "last"])
@pytest.mark.parametrize("case", CASES)
def test_skip_bad_records_reads_exactly_the_good_records_and_counts_the_rest(
    tmp_path, case, damaged_shard
):
  paths, good, _, _ = make_shards(tmp_path, damaged_shard, case)
  skipped = record_errors.SkippedRecords()
  seen = training_records(paths, skipped)
  assert set(seen) == set(good)
  assert skipped.count() == SHARDS * PER_SHARD - len(good)
  held_out = record_errors.SkippedRecords()
  num, rows = eval_records(paths, held_out)
  assert num == len(good) and rows == good
  assert held_out.count() == SHARDS * PER_SHARD - len(good)


@pytest.mark.parametrize("case", ["cut_inside", "flipped_payload", "not_tfrecord"])
def test_without_stats_json_the_reader_alone_names_the_record(tmp_path, case):
  # The first case: no stats.json beside the shards, the last one cut inside a
  # record. TF's reader reads that shard as a shorter one; the pipeline must not.
  paths, _, path, named = make_shards(tmp_path, 2, case, stats=False)
  with pytest.raises(InputError, match=expected_message(case, path, named)):
    training_records(paths)
  with pytest.raises(InputError, match=expected_message(case, path, named)):
    eval_records(paths)


def test_an_empty_file_without_stats_json_is_refused(tmp_path):
  paths, _, path, _ = make_shards(tmp_path, 1, "empty", stats=False)
  with pytest.raises(InputError, match=rf"{path}: holds no records \(an empty file\)"):
    training_records(paths)
  skipped = record_errors.SkippedRecords()
  assert set(training_records(paths, skipped)) == set(range(8)) | set(range(16, 24))
  assert "holds no records" in skipped.summary()


def test_read_frames_equals_tensorflows_reader_on_a_clean_shard(tmp_path):
  paths, _, _, _ = make_shards(tmp_path, 0, "flipped_crc")
  clean = paths[1]
  ours = list(tfrecord_frames.read_frames(clean))
  theirs = [r.numpy() for r in tf.data.TFRecordDataset(clean)]
  assert [data for _, _, data in ours] == theirs
  assert [offset for _, offset, _ in ours] == frame_offsets(theirs)[:-1]
  assert [number for number, _, _ in ours] == list(range(1, PER_SHARD + 1))
  assert tfrecord_frames.walk_frames(clean).records == PER_SHARD
  assert os.path.getsize(clean) == frame_offsets(theirs)[-1]


def test_records_are_read_through_ram_filesystems_too(tmp_path):
  paths, _, _, _ = make_shards(tmp_path, 0, "flipped_crc", stats=False)
  ram = "ram://damaged/shard.tfrecord"
  tf.io.gfile.makedirs("ram://damaged")
  tf.io.gfile.copy(paths[0], ram, overwrite=True)
  skipped = record_errors.SkippedRecords()
  numbers = [n for n, _, _ in tfrecord_frames.read_frames(ram, skipped.add)]
  assert numbers == [n for n in range(1, PER_SHARD + 1) if n != DAMAGED_RECORD]
  assert skipped.count() == 1 and "record 5" in skipped.summary()
