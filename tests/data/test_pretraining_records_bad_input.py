"""Issue 15 for pretraining TFRecords: every record is checked as it streams, every shard
against its stats.json before training, and a bad one stops the run with one line
"path: record N: what" (exit status 2 from the command).

The shards here are written with TF's own protos and writer (not the package's codec),
the expected values are the hand-made features, and the framing is cut or flipped by
byte offsets computed from the TFRecord format (12-byte header, data, 4-byte CRC).
"""

import json
import os

from hypothesis import given
from hypothesis import strategies as st
import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.data import pretraining_data
from recurrent_bert.data import pretraining_dataset
from recurrent_bert.data import pretraining_options
from recurrent_bert.data import pretraining_output
from recurrent_bert.data import pretraining_records
from recurrent_bert.data import record_errors
from recurrent_bert.data.dynamic_masking import DynamicMasker
from recurrent_bert.data.dynamic_masking import MaskingConfig
from recurrent_bert.errors import InputError
from tests.data.conftest import RESERVED
from tests.data.conftest import write_vocab
from tests.support import forkserver
from tests.support import mutations
from tests.training.conftest import REPO
from tests.training.conftest import pretrain_command
from tests.training.conftest import subprocess_env
from tests.training.conftest import write_small_config

SEQ, PRED = 8, 2
NUM_RECORDS = 24
INT_FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids")
MASKED_FEATURES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
HEADER, FOOTER = 12, 4  # TFRecord framing: length + CRC, then the data's CRC


def features_of(i, seq=SEQ, pred=PRED, masked=True):
  """Record i's features as numpy arrays: all valid, each record different."""
  real = 3 + i % (seq - 3)
  ids = np.zeros(seq, np.int64)
  ids[:real] = [2] + [5 + (i + j) % 20 for j in range(real - 2)] + [3]
  features = {
      "input_ids": ids,
      "input_mask": (np.arange(seq) < real).astype(np.int64),
      "segment_ids": ((np.arange(seq) >= real // 2) & (np.arange(seq) < real)).astype(np.int64),
      "next_sentence_labels": np.array([i % 2], np.int64),
  }
  if masked:
    features["masked_lm_positions"] = np.arange(1, pred + 1, dtype=np.int64)
    features["masked_lm_ids"] = ids[1 : pred + 1].copy()
    features["masked_lm_weights"] = np.ones(pred, np.float32)
  return features


def example_bytes(features):
  """tf.train.Example bytes of {name: values}; float arrays become float_list."""
  feature = {}
  for name, values in features.items():
    values = np.asarray(values).reshape(-1).tolist()
    if np.asarray(values).dtype.kind == "f":
      feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
    else:
      feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_shard(path, records):
  with tf.io.TFRecordWriter(str(path)) as writer:
    for record in records:
      writer.write(record)
  return str(path)


def write_stats(directory, shard_paths, num_records, sizes=True):
  """The generator's stats.json: with per-shard sizes, or (sizes=False) as older runs wrote it
  (instances and num_output_shards only; instance k in shard k mod n)."""
  stats = {"instances": sum(num_records), "num_output_shards": len(shard_paths)}
  if sizes:
    stats["shards"] = [
        {"file": os.path.basename(p), "bytes": os.path.getsize(p), "records": n}
        for p, n in zip(shard_paths, num_records)
    ]
  with open(os.path.join(str(directory), "stats.json"), "w") as f:
    json.dump(stats, f)


def shard_dir(tmp_path, records, name="pretraining-00000-of-00001.tfrecord", sizes=True):
  """One shard holding `records` and its stats.json; returns the shard's path."""
  path = write_shard(tmp_path / name, records)
  write_stats(tmp_path, [path], [len(records)], sizes=sizes)
  return path


def valid_records(n=NUM_RECORDS, masked=True):
  return [example_bytes(features_of(i, masked=masked)) for i in range(n)]


VOCAB = 64  # features_of's ids are below 30


def data_config(path, masker=None):
  return pretraining_dataset.PretrainingDataConfig(
      input_files=[path],
      max_seq_length=SEQ,
      max_predictions_per_seq=PRED,
      shuffle_buffer_size=1,  # file order: record k is in batch k // batch
      masker=masker,
      vocab_size=VOCAB,
  )


def read_training_epoch(path, batch=4, masker=None):
  """One epoch of the training pipeline, bad records turned into InputError as the loop does."""
  config = data_config(path, masker)
  pretraining_records.check_shards(config.input_files)
  dataset = pretraining_dataset.make_pretraining_dataset(config, batch)
  with record_errors.reading_records():
    return [{k: v.numpy() for k, v in b.items()} for b in dataset.take(NUM_RECORDS // batch)]


def eval_rows(config, batch=4):
  """Every record once through the tf.data held-out pipeline: [{feature: row}] in file order."""
  num_batches = -(-pretraining_dataset.count_records(config) // batch)
  dataset = pretraining_dataset.make_eval_dataset(config, batch, num_batches)
  rows = []
  with record_errors.reading_records():
    for b in dataset:
      for r in range(batch):
        if b["example_weights"][r] > 0:
          rows.append({k: v[r].numpy() for k, v in b.items() if k != "example_weights"})
  return rows


def read_eval_rows(path, batch=4):
  return eval_rows(data_config(path), batch)


def expected_row(i):
  features = features_of(i)
  return {
      **{k: features[k].astype(np.int32) for k in INT_FEATURES},
      "masked_lm_weights": features["masked_lm_weights"],
      "next_sentence_labels": np.int32(features["next_sentence_labels"][0]),
  }


def rows_equal(a, b):
  return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def with_record(k, record, n=NUM_RECORDS):
  records = valid_records(n)
  records[k] = record
  return records


def changed(i, drop=(), **values):
  features = features_of(i)
  features.update(values)
  return example_bytes({k: v for k, v in features.items() if k not in drop})


def float_instead_of_int(i, name):
  return changed(i, **{name: features_of(i)[name].astype(np.float32)})


# -------------------------------------------------------------- the examples of the issue


@pytest.mark.slow(seconds=8)
@pytest.mark.parametrize(
    "bad, what",
    [
        (changed(4, drop=("segment_ids",)), "feature 'segment_ids' (int64) is missing"),
        (changed(4, input_ids=np.ones(SEQ - 1, np.int64)), "'input_ids' has 7 values, expected 8"),
        (float_instead_of_int(4, "input_ids"), "'input_ids' holds float values, expected int64"),
        (b"\xff\xfe\x00 not an Example \xe9", "not a tf.train.Example"),
        (changed(4, segment_ids=np.full(SEQ, 2)), "segment_ids outside [0, 2)"),
        (changed(4, masked_lm_positions=np.array([1, SEQ])), "masked_lm_positions outside [0, 8)"),
    ],
    ids=["missing", "length", "dtype", "not_an_example", "segment_value", "position"],
)
def test_a_bad_later_record_stops_training_naming_file_and_record(tmp_path, bad, what):
  records = with_record(13, bad)
  path = shard_dir(tmp_path, records)
  with pytest.raises(InputError) as raised:
    read_training_epoch(path)
  message = str(raised.value)
  assert message.startswith(f"{path}: record 14 (byte {frame_offsets(records)[13]}): "), message
  assert what in message and "\n" not in message


def test_a_feature_without_a_value_list_is_named(tmp_path):
  # TF's parser says only "Unsupported datatype" for a Feature holding none of its three
  # lists (here: an unknown field, as flipped bytes make); found by the 300-example property.
  example = tf.train.Example.FromString(example_bytes(features_of(9)))
  no_list = tf.train.Feature()
  no_list.MergeFromString(b"\x28\x01")  # field 5, varint 1: not bytes/float/int64_list
  example.features.feature["segment_ids"].CopyFrom(no_list)
  path = shard_dir(tmp_path, with_record(9, example.SerializeToString()))
  with pytest.raises(
      InputError, match=r": record 10 \(byte \d+\): feature 'segment_ids' holds no value list"
  ):
    read_training_epoch(path)


def test_a_bad_later_record_of_the_held_out_set_is_named(tmp_path):
  path = shard_dir(tmp_path, with_record(6, float_instead_of_int(6, "masked_lm_ids")))
  with pytest.raises(
      InputError, match=r": record 7 \(byte \d+\): feature 'masked_lm_ids' holds float"
  ):
    read_eval_rows(path)


@pytest.mark.slow(seconds=3)
def test_a_bad_later_unmasked_record_is_named_under_dynamic_masking(tmp_path):
  records = valid_records(masked=False)
  records[9] = example_bytes({k: v for k, v in features_of(9).items()})  # a masked one
  records[5] = example_bytes(
      {**features_of(5, masked=False), "input_mask": np.ones(SEQ - 2, np.int64)}
  )
  path = shard_dir(tmp_path, records)
  vocab = RESERVED + [f"w{i}" for i in range(30)]
  masker = DynamicMasker(MaskingConfig(max_predictions_per_seq=PRED), vocab)
  with pytest.raises(
      InputError, match=r": record 6 \(byte \d+\): feature 'input_mask' has 6 values"
  ):
    read_training_epoch(path, masker=masker)
  records[5] = example_bytes(features_of(5, masked=False))
  path = shard_dir(tmp_path, records)
  with pytest.raises(InputError, match=r": record 10 \(byte \d+\): holds masked_lm_positions"):
    read_training_epoch(path, masker=masker)


def frame_offsets(records):
  """Byte offset of each record's frame in a shard of `records`, and the shard's size."""
  sizes = [HEADER + len(r) + FOOTER for r in records]
  return np.concatenate([[0], np.cumsum(sizes)]).tolist()


@pytest.mark.parametrize("sizes", [True, False], ids=["stats_with_sizes", "older_stats"])
@pytest.mark.parametrize("inside", ["header", "data"])
def test_a_shard_cut_short_is_refused_before_training(tmp_path, sizes, inside):
  records = valid_records()
  path = shard_dir(tmp_path, records, sizes=sizes)
  offsets = frame_offsets(records)
  # The case: 12 of 24 records, then part of the 13th's header (TF reads: 12).
  cut = offsets[12] + (5 if inside == "header" else HEADER + 3)
  with open(path, "rb") as f:
    data = f.read()
  with open(path, "wb") as f:
    f.write(data[:cut])
  with pytest.raises(InputError) as raised:
    pretraining_records.check_shards([path])
  message = str(raised.value)
  assert message.startswith(f"{path}: expected 24 records"), message
  assert "found 12 whole records" in message and "record 13" in message
  if sizes:
    assert f"{len(data)} bytes" in message and f"{cut} bytes" in message
  # check_record_layout, which the pretrain flags call on the first file, runs it too.
  with pytest.raises(InputError, match="expected 24 records"):
    pretraining_dataset.check_record_layout(path, data_config(path))


def test_a_shard_cut_at_a_record_boundary_is_refused_by_its_size(tmp_path):
  records = valid_records()
  path = shard_dir(tmp_path, records)
  with open(path, "rb") as f:
    data = f.read()
  with open(path, "wb") as f:
    f.write(data[: frame_offsets(records)[20]])
  with pytest.raises(InputError, match=r"expected 24 records and \d+ bytes .* found 20 whole"):
    pretraining_records.check_shards([path])


def test_older_stats_of_several_shards_expect_instance_k_in_shard_k_mod_n(tmp_path):
  names = pretraining_output.shard_names(3)
  counts = [4, 3, 3]  # 10 instances over 3 shards
  paths = [write_shard(tmp_path / n, valid_records(c)) for n, c in zip(names, counts)]
  write_stats(tmp_path, paths, counts, sizes=False)
  pretraining_records.check_shards(paths)  # all as expected
  write_shard(tmp_path / names[0], valid_records(3))
  with pytest.raises(InputError, match=r"00000-of-00003.tfrecord: expected 4 records .* found 3"):
    pretraining_records.check_shards(paths)


def test_without_stats_a_damaged_record_is_still_named(tmp_path):
  records = valid_records()
  path = write_shard(tmp_path / "shard.tfrecord", records)  # no stats.json beside it
  offsets = frame_offsets(records)
  with open(path, "rb") as f:
    data = bytearray(f.read())
  data[offsets[7] + HEADER + 2] ^= 0x40  # record 8's data: its CRC no longer matches
  with open(path, "wb") as f:
    f.write(bytes(data))
  with pytest.raises(InputError, match=r"shard.tfrecord: record 8 \(byte \d+\): its data is corr"):
    read_training_epoch(path)
  data[offsets[7] + HEADER + 2] ^= 0x40
  with open(path, "wb") as f:
    f.write(bytes(data[: offsets[10] + HEADER + 5]))  # inside record 11's data
  with pytest.raises(InputError, match=r"shard.tfrecord: record 11 .*: the file ends inside it"):
    pretraining_dataset.count_records(data_config(path))


def test_a_first_record_that_is_not_an_example_is_named(tmp_path):
  path = shard_dir(tmp_path, with_record(0, b"\x08\x96\x01\xff\xff"))
  with pytest.raises(InputError, match=r": record 1 \(byte \d+\): not a tf.train.Example"):
    pretraining_dataset.check_record_layout(path, data_config(path))


def test_the_generator_writes_each_shards_size_and_records(tmp_path):
  vocab = write_vocab(tmp_path / "vocab.txt", RESERVED + list("abcdefghij"))
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("a b c d e f g.\nh i j a b.\n\nc d e f g h.\ni j a b c.\nd e f.\n")
  out = tmp_path / "out"
  out.mkdir()
  options = pretraining_options.GeneratorOptions(
      input_files=[str(corpus)],
      vocab_file=vocab,
      output_files=[str(out / f"shard-{i}.tfrecord") for i in range(3)],
      stats_file=str(out / "stats.json"),
      max_seq_length=SEQ,
      masking=MaskingConfig(max_predictions_per_seq=PRED),
      dupe_factor=5,
      show_progress=False,
  )
  stats = pretraining_data.create_pretraining_data(options)
  with open(out / "stats.json") as f:
    assert json.load(f)["shards"] == stats["shards"]
  for row, path in zip(stats["shards"], options.output_files):
    assert row["file"] == os.path.basename(path)
    assert row["bytes"] == os.path.getsize(path)
    assert row["records"] == sum(1 for _ in tf.data.TFRecordDataset(path))
  pretraining_records.check_shards(options.output_files)


def test_valid_records_read_back_unchanged(tmp_path):
  path = shard_dir(tmp_path, valid_records())
  rows = read_eval_rows(path)
  assert len(rows) == NUM_RECORDS
  assert all(rows_equal(row, expected_row(i)) for i, row in enumerate(rows))


# -------------------------------------------------------------------- the whole command


@pytest.mark.slow(seconds=17)
def test_pretrain_stops_at_a_bad_later_record_with_one_line_and_keeps_checkpoints(tmp_path):
  seq, pred = 16, 2
  vocab = write_vocab(tmp_path / "vocab.txt", RESERVED + [f"w{i}" for i in range(40)])
  records = [example_bytes(features_of(i, seq, pred)) for i in range(NUM_RECORDS)]
  records[19] = example_bytes(
      {**features_of(19, seq, pred), "segment_ids": np.zeros(seq - 1, np.int64)}
  )
  path = shard_dir(tmp_path, records)
  command = pretrain_command(
      tmp_path / "model",
      vocab,
      path,
      f"--max_seq_length={seq}",
      f"--max_predictions_per_seq={pred}",
      f"--model_config={write_small_config(tmp_path, 'small')}",
      "--shuffle_buffer_size=1",
      "--steps_per_loop=1",
      "--save_checkpoints_steps=1",
      "--num_train_steps=6",
  )
  result = forkserver.run(command, REPO, subprocess_env(), timeout=300)
  assert result.returncode == 2, result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and result.stderr.rstrip().endswith(errors[0]), result.stderr[-3000:]
  # Batches of 8: records 17-24 are step 3's; steps 1 and 2 were trained and saved.
  at = f"error: {path}: record 20 (byte {frame_offsets(records)[19]})"
  assert errors[0].startswith(f"{at}: feature 'segment_ids' has 15 values"), errors[0]
  assert "training stopped after step 2" in errors[0] and "ckpt-2" in errors[0]
  assert tf.train.latest_checkpoint(str(tmp_path / "model")).endswith("ckpt-2")


# ------------------------------------------------------------------------ the property

FORMAT = "pretraining tfrecord"
FEATURE_NAMES = sorted(features_of(0))


@st.composite
def mutated_record(draw, k):
  """A record k changed one way: (its bytes, whether it may still be accepted)."""
  features = features_of(k)
  kinds = ["drop", "rename", "length", "dtype", "flip", "bytes", "extra", "value"]
  kind = draw(st.sampled_from(kinds))
  name = draw(st.sampled_from(FEATURE_NAMES))
  if kind == "value":  # one value outside what the schema allows (issue 31)
    values = features[name].copy()
    if name == "masked_lm_weights":
      bad = draw(st.sampled_from([np.nan, np.inf, -0.25, 1.5]))
    else:
      limit = {"input_ids": VOCAB, "masked_lm_ids": VOCAB, "masked_lm_positions": SEQ}.get(name, 2)
      bad = draw(st.sampled_from([-1, limit, limit + 7, 10**6, 2**32 + 1]))
    values.flat[draw(st.integers(0, values.size - 1))] = bad
    return example_bytes({**features, name: values}), False
  if kind == "drop":
    return example_bytes({n: v for n, v in features.items() if n != name}), False
  if kind == "rename":
    renamed = {(n + "_x" if n == name else n): v for n, v in features.items()}
    return example_bytes(renamed), False
  if kind == "length":
    size = draw(st.integers(0, 2 * SEQ).filter(lambda s: s != features[name].size))
    return example_bytes({**features, name: np.resize(features[name], size)}), False
  if kind == "dtype":
    values = features[name]
    other = values.astype(np.int64) if values.dtype.kind == "f" else values.astype(np.float32)
    return example_bytes({**features, name: other}), False
  if kind == "extra":  # an unknown feature: ignored, the record reads as before
    return example_bytes({**features, "comment": np.array([7])}), True
  data = bytearray(example_bytes(features))
  if kind == "flip":  # framing stays valid: whatever the bytes now say is read
    at = draw(st.integers(0, len(data) - 1))
    data[at] ^= draw(st.integers(1, 255))
    return bytes(data), True
  return draw(st.binary(min_size=1, max_size=40)), True


@st.composite
def mutated_shard(draw):
  """How to change a valid shard: ("record", k, new bytes) — the generator wrote them, its
  stats.json agrees —, ("flip", k, offset, xor) in record k's frame, ("cut", offset), or
  ("cut_without_stats", offset): no stats.json beside the shard (issue 31)."""
  k = draw(st.integers(1, NUM_RECORDS - 1))  # record 1 is read by the layout check too
  offsets = frame_offsets(valid_records())
  how = draw(st.sampled_from(["record", "record", "record", "flip", "cut", "cut_without_stats"]))
  if how == "record":
    return how, k, draw(mutated_record(k))[0]
  if how == "flip":
    return how, k, draw(st.integers(offsets[k], offsets[k + 1] - 1)), draw(st.integers(1, 255))
  return how, draw(st.integers(0, offsets[-1] - 1))


@pytest.mark.slow(seconds=7)
@mutations.fuzz_settings(max_examples=10)
@given(mutated_shard())
def test_property_mutated_records_are_named_or_read_as_before(tmp_path, mutation):
  directory = tmp_path / f"case-{len(os.listdir(tmp_path))}"
  directory.mkdir()
  records = valid_records()
  record, unchanged = None, []
  if mutation[0] == "record":
    _, k, records[k] = mutation
    path = shard_dir(directory, records)
    record, unchanged = k + 1, [i for i in range(NUM_RECORDS) if i != k]
  else:
    path = shard_dir(directory, records)
    with open(path, "rb") as f:
      data = bytearray(f.read())
    if mutation[0] == "flip":  # the CRCs no longer match: the reader's error, located
      _, k, offset, xor = mutation
      data[offset] ^= xor
      record, unchanged = k + 1, [i for i in range(NUM_RECORDS) if i != k]
    else:  # stats.json says what was cut; without it, only a cut inside a record shows
      data = data[: mutation[1]]
      if mutation[0] == "cut_without_stats":
        os.remove(directory / "stats.json")
        offsets = frame_offsets(records)
        if mutation[1] in offsets:  # a shorter shard of whole records: read as one
          unchanged = list(range(offsets.index(mutation[1])))
        else:
          record = sum(1 for o in offsets if o <= mutation[1])
    with open(path, "wb") as f:
      f.write(bytes(data))

  whole_shorter_shard = mutation[0] == "cut_without_stats" and record is None

  def read():
    rows = read_eval_rows(path)
    if whole_shorter_shard:
      return len(rows) == len(unchanged) and all(
          rows_equal(rows[i], expected_row(i)) for i in unchanged
      )
    return [i < len(rows) and rows_equal(rows[i], expected_row(i)) for i in unchanged]

  expected = [True] * len(unchanged) if unchanged else None
  if whole_shorter_shard:
    expected = True if unchanged else None
  error = mutations.check_outcome(FORMAT, read, path, expected=expected, record=record)
  if error is None:
    assert mutation[0] == "record" or whole_shorter_shard, "a flipped or cut shard was accepted"


def test_records_of_another_vocabulary_are_refused_naming_their_stats(tmp_path):
  """stats.json's vocab_sha256 against the vocabulary given: the same file passes, the same
  tokens in another order are refused, a stats.json written before the field is not
  checked. The expected digests are hashlib's of the bytes written here."""
  import hashlib

  shard = tmp_path / "data" / "pretraining-00000-of-00001.tfrecord"
  shard.parent.mkdir()
  shard.write_bytes(b"")
  tokens = list(RESERVED) + ["the", "cat"]
  ours, theirs = tmp_path / "ours.txt", tmp_path / "theirs.txt"
  ours.write_text("\n".join(tokens) + "\n", encoding="utf-8")
  theirs.write_text("\n".join(tokens[:-2] + ["cat", "the"]) + "\n", encoding="utf-8")
  stats = shard.parent / pretraining_output.STATS_FILE
  digest = hashlib.sha256(ours.read_bytes()).hexdigest()
  stats.write_text(json.dumps({"options": {"vocab_file": "v.txt", "vocab_sha256": digest}}))
  pretraining_records.check_vocabulary([str(shard)], str(ours))
  with pytest.raises(InputError) as error:
    pretraining_records.check_vocabulary([str(shard)], str(theirs))
  message = str(error.value)
  assert "\n" not in message and message.startswith(f"{stats}: ")
  assert digest[:12] in message and str(theirs) in message
  stats.write_text(json.dumps({"options": {"vocab_file": "v.txt"}}))
  pretraining_records.check_vocabulary([str(shard)], str(theirs))
