"""Issue 31: every value the schema defines is checked where pretraining records are read.

Each out-of-range value sits in record 6 of a shard of 24 valid records; the training and
the held-out pipelines must both stop naming the file, the record, its byte offset (from
the TFRecord format) and the value. Then the whole commands: `pretrain` (training, and
--mode=eval) exit 2 with one line, and --skip_bad_records trains past a damaged record,
counting it in metrics.jsonl.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.data import pretraining_dataset
from recurrent_bert.data import record_errors
from recurrent_bert.errors import InputError
from tests.data.conftest import RESERVED
from tests.data.conftest import write_vocab
from tests.data.test_pretraining_records_bad_input import HEADER
from tests.data.test_pretraining_records_bad_input import NUM_RECORDS
from tests.data.test_pretraining_records_bad_input import PRED
from tests.data.test_pretraining_records_bad_input import SEQ
from tests.data.test_pretraining_records_bad_input import example_bytes
from tests.data.test_pretraining_records_bad_input import features_of
from tests.data.test_pretraining_records_bad_input import frame_offsets
from tests.data.test_pretraining_records_bad_input import shard_dir
from tests.support import forkserver
from tests.training.conftest import REPO
from tests.training.conftest import pretrain_command
from tests.training.conftest import subprocess_env
from tests.training.conftest import write_small_config

VOCAB, TYPES = 50, 2
BAD = 5  # 0-based: record 6


def with_values(**changes):
  """Record BAD's features with `changes` {feature: (index, value)} applied."""
  features = features_of(BAD)
  for name, (index, value) in changes.items():
    values = features[name].astype(np.float32 if name == "masked_lm_weights" else np.int64)
    values[index] = value
    features[name] = values
  return features


# (feature, index, value, what the message says). features_of(5): 8 real tokens.
CASES = [
    ("input_ids", 2, 1_000_000, "input_ids outside [0, 50) (vocab_size of the model) (1000000"),
    ("input_ids", 2, -3, "input_ids outside [0, 50)"),
    ("input_ids", 2, 2**32 + 5, "(4294967301 at index 2)"),  # int32 would read 5
    ("masked_lm_ids", 1, VOCAB, "masked_lm_ids outside [0, 50)"),
    ("segment_ids", 0, TYPES, "segment_ids outside [0, 2) (type_vocab_size of the model)"),
    ("input_mask", 0, 3, "input_mask must be 0 or 1"),
    ("next_sentence_labels", 0, 2, "next_sentence_labels must be 0 or 1"),
    ("masked_lm_positions", 0, SEQ, f"masked_lm_positions outside [0, {SEQ})"),
    ("masked_lm_positions", 0, -1, f"masked_lm_positions outside [0, {SEQ})"),
    ("masked_lm_weights", 1, np.nan, "masked_lm_weights must be finite and in [0, 1] (nan"),
    ("masked_lm_weights", 1, 1.5, "masked_lm_weights must be finite and in [0, 1] (1.5"),
    ("masked_lm_weights", 0, -0.5, "masked_lm_weights must be finite and in [0, 1]"),
]


def shard_with(tmp_path, features):
  records = [example_bytes(features_of(i)) for i in range(NUM_RECORDS)]
  records[BAD] = example_bytes(features)
  return shard_dir(tmp_path, records), frame_offsets(records)[BAD]


def config(path):
  return pretraining_dataset.PretrainingDataConfig(
      input_files=[path],
      max_seq_length=SEQ,
      max_predictions_per_seq=PRED,
      shuffle_buffer_size=4,
      vocab_size=VOCAB,
      type_vocab_size=TYPES,
  )


def read_training(path):
  dataset = pretraining_dataset.make_pretraining_dataset(config(path), 4)
  with record_errors.reading_records():
    for _ in dataset.take(2 * NUM_RECORDS // 4):
      pass


def read_held_out(path):
  dataset = pretraining_dataset.make_eval_dataset(config(path), 4, NUM_RECORDS // 4)
  with record_errors.reading_records():
    for _ in dataset:
      pass


@pytest.mark.slow(seconds=42)
@pytest.mark.parametrize("read", [read_training, read_held_out], ids=["training", "held_out"])
@pytest.mark.parametrize("name, index, value, what", CASES, ids=[f"{c[0]}={c[2]}" for c in CASES])
def test_an_out_of_range_value_is_named_with_file_record_and_value(
    tmp_path, read, name, index, value, what
):
  path, offset = shard_with(tmp_path, with_values(**{name: (index, value)}))
  with pytest.raises(InputError) as raised:
    read(path)
  message = str(raised.value)
  assert message.startswith(f"{path}: record {BAD + 1} (byte {offset}): "), message
  assert what in message and "\n" not in message


@pytest.mark.slow(seconds=2)
def test_a_weighted_position_outside_the_input_mask_is_refused_and_padding_is_not(tmp_path):
  features = features_of(BAD)
  real = int(features["input_mask"].sum())
  # A padding prediction (weight 0) at position 0 is how the generator fills the slots.
  padding = with_values(masked_lm_positions=(1, 0), masked_lm_weights=(1, 0.0))
  path, _ = shard_with(tmp_path, padding)
  read_training(path)
  beyond = with_values(masked_lm_positions=(1, real))
  (tmp_path / "beyond").mkdir()
  path, offset = shard_with(tmp_path / "beyond", beyond)
  at = rf"{path}: record 6 \(byte {offset}\): a weighted masked_lm_position outside the input_mask"
  with pytest.raises(InputError, match=at):
    read_held_out(path)


# ------------------------------------------------------------------- the whole command


def run_pretrain(tmp_path, shard, *flags):
  seq, pred = SEQ, PRED
  vocab = write_vocab(tmp_path / "vocab.txt", RESERVED + [f"w{i}" for i in range(VOCAB - 5)])
  command = pretrain_command(
      tmp_path / "model",
      vocab,
      shard,
      f"--max_seq_length={seq}",
      f"--max_predictions_per_seq={pred}",
      f"--model_config={write_small_config(tmp_path, 'small')}",
      "--shuffle_buffer_size=1",
      "--steps_per_loop=1",
      "--save_checkpoints_steps=2",
      *flags,
  )
  return forkserver.run(command, REPO, subprocess_env(), timeout=300)


def one_error_line(result):
  assert result.returncode == 2, result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and result.stderr.rstrip().endswith(errors[0]), result.stderr[-3000:]
  return errors[0]


@pytest.mark.slow(seconds=12)
def test_pretrain_stops_at_an_id_past_the_vocabulary_with_one_line(tmp_path):
  # The case: an id of 1e6 ended in a Keras traceback naming no file.
  path, offset = shard_with(tmp_path, with_values(input_ids=(2, 1_000_000)))
  error = one_error_line(run_pretrain(tmp_path, path, "--num_train_steps=4"))
  assert error.startswith(f"error: {path}: record 6 (byte {offset}): input_ids outside [0, 50)")


@pytest.mark.slow(seconds=22)
def test_pretrain_mode_eval_stops_at_a_nan_weight_with_one_line(tmp_path):
  good = shard_dir(tmp_path, [example_bytes(features_of(i)) for i in range(NUM_RECORDS)])
  run = run_pretrain(tmp_path, good, "--num_train_steps=3")
  assert run.returncode == 0, run.stderr[-3000:]
  held_out_dir = tmp_path / "held_out"
  held_out_dir.mkdir()
  path, offset = shard_with(held_out_dir, with_values(masked_lm_weights=(0, np.nan)))
  result = run_pretrain(
      tmp_path, good, "--num_train_steps=3", "--mode=eval", f"--eval_input_files={path}"
  )
  error = one_error_line(result)
  assert error.startswith(f"error: {path}: record 6 (byte {offset}): masked_lm_weights"), error


@pytest.mark.slow(seconds=26)
def test_pretrain_skip_bad_records_trains_past_a_damaged_record_and_counts_it(tmp_path):
  records = [example_bytes(features_of(i)) for i in range(NUM_RECORDS)]
  path = shard_dir(tmp_path, records)
  with open(path, "rb") as f:
    data = bytearray(f.read())
  data[frame_offsets(records)[BAD] + HEADER + 4] ^= 0x10  # record 6's data: CRC fails
  with open(path, "wb") as f:
    f.write(bytes(data))
  refused = run_pretrain(tmp_path, path, "--num_train_steps=4")
  assert "record 6" in one_error_line(refused) and "its data is corrupted" in refused.stderr
  tf.io.gfile.rmtree(str(tmp_path / "model"))
  result = run_pretrain(tmp_path, path, "--num_train_steps=4", "--skip_bad_records")
  assert result.returncode == 0, result.stderr[-3000:]
  assert f"skipped 1 records: {path}: record 6 (byte" in result.stderr
  with open(tmp_path / "model" / "metrics.jsonl") as f:
    rows = [json.loads(line) for line in f]
  assert [row["step"] for row in rows] == [1, 2, 3, 4]
  assert rows[-1]["skipped_records"] == 1
