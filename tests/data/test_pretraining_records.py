"""The TF-free reader of pretraining records (`data/pretraining_records.py`) against the
`tf.data` pipeline: the same features, byte for byte, on the data tool's records, and the
same one-line refusal for every bad record, from the same rule table; then the reader in a
process where `import tensorflow` fails.
"""

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest

from recurrent_bert.data import pretraining_data
from recurrent_bert.data import pretraining_dataset
from recurrent_bert.data import pretraining_options
from recurrent_bert.data import pretraining_records
from recurrent_bert.data.dynamic_masking import MaskingConfig
from recurrent_bert.errors import InputError
from tests.data.conftest import RESERVED
from tests.data.conftest import write_vocab
from tests.data.test_damaged_shards import CASES as DAMAGE
from tests.data.test_damaged_shards import PER_SHARD
from tests.data.test_damaged_shards import SHARDS
from tests.data.test_damaged_shards import make_shards
from tests.data.test_pretraining_records_bad_input import NUM_RECORDS
from tests.data.test_pretraining_records_bad_input import PRED
from tests.data.test_pretraining_records_bad_input import SEQ
from tests.data.test_pretraining_records_bad_input import changed
from tests.data.test_pretraining_records_bad_input import eval_rows as tf_rows
from tests.data.test_pretraining_records_bad_input import example_bytes
from tests.data.test_pretraining_records_bad_input import features_of
from tests.data.test_pretraining_records_bad_input import float_instead_of_int
from tests.data.test_pretraining_records_bad_input import shard_dir
from tests.data.test_record_values import CASES as VALUES
from tests.data.test_record_values import VOCAB
from tests.data.test_record_values import with_values
from tests.training.conftest import REPO
from tests.training.conftest import subprocess_env

WORDS = "the cat sat on a mat while dogs ran in the park and birds sang over old trees".split()


def write_tool_records(directory, num_shards=2, documents=12, seed=0, **options):
  """Runs the data tool (TF-free, numpy-serialised) on a corpus of WORDS, seq 32, 5
  predictions; returns (shard paths, the vocabulary file)."""
  vocab = write_vocab(directory / "vocab.txt", RESERVED + sorted(set(WORDS)) + ["."])
  rng = np.random.default_rng(seed)
  with open(directory / "corpus.txt", "w") as f:
    for _ in range(documents):
      for _ in range(6):
        f.write(" ".join(rng.choice(WORDS, size=rng.integers(4, 12))) + " .\n")
      f.write("\n")
  out = directory / "out"
  out.mkdir()
  generator_options = pretraining_options.GeneratorOptions(
      input_files=[str(directory / "corpus.txt")],
      vocab_file=vocab,
      output_files=[str(out / f"shard-{i}.tfrecord") for i in range(num_shards)],
      stats_file=str(out / "stats.json"),
      max_seq_length=32,
      masking=MaskingConfig(max_predictions_per_seq=5),
      show_progress=False,
      **options,
  )
  pretraining_data.create_pretraining_data(generator_options)
  return generator_options.output_files, vocab


@pytest.fixture(scope="module")
def tool_records(tmp_path_factory):
  """Shards written by the data tool, 2 of them, seq 32; (paths, vocab_size)."""
  files, _ = write_tool_records(tmp_path_factory.mktemp("tool"), dupe_factor=3)
  return files, len(RESERVED) + len(set(WORDS)) + 1


def config(files, seq, pred, vocab_size=None, skipped=None):
  return pretraining_dataset.PretrainingDataConfig(
      input_files=list(files),
      max_seq_length=seq,
      max_predictions_per_seq=pred,
      vocab_size=vocab_size,
      skipped=skipped,
  )


def numpy_rows(cfg, batch=1):
  return [
      {k: v[r] for k, v in b.items()}
      for b in pretraining_records.batches(cfg, batch)
      for r in range(batch)
  ]


@pytest.mark.slow(seconds=2)
def test_the_data_tools_records_read_byte_identical_to_tf_data(tool_records):
  files, vocab_size = tool_records
  cfg = config(files, 32, 5, vocab_size)
  theirs, ours = tf_rows(cfg), numpy_rows(cfg)
  assert len(ours) == len(theirs) > 20
  for a, b in zip(ours, theirs):
    assert a.keys() == b.keys()
    for key in a:
      assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
      assert a[key].tobytes() == b[key].tobytes(), key


def test_batches_are_full_and_drop_the_remainder(tool_records):
  files, vocab_size = tool_records
  cfg = config(files, 32, 5, vocab_size)
  count = pretraining_dataset.count_records(cfg)  # TF-free framing, independent of decoding
  shapes = [{k: v.shape for k, v in b.items()} for b in pretraining_records.batches(cfg, 8)]
  assert len(shapes) == count // 8
  assert shapes[0] == {
      "input_ids": (8, 32),
      "input_mask": (8, 32),
      "segment_ids": (8, 32),
      "masked_lm_positions": (8, 5),
      "masked_lm_ids": (8, 5),
      "masked_lm_weights": (8, 5),
      "next_sentence_labels": (8,),
  }


def test_unpacked_and_negative_int64_and_unknown_fields_decode_as_protobuf_says():
  # Int64List{value: [5, -2]} written unpacked (tag 8 = field 1, varint), -2 as a 10-byte
  # varint; FloatList{value: [0.5]} unpacked (tag 13 = field 1, fixed32); an unknown field
  # 15 (bytes) in the Example, which parsers skip.
  minus_two = bytes([0xFE] + [0xFF] * 8 + [0x01])
  int_list = b"\x08\x05\x08" + minus_two
  float_list = b"\x0d" + np.float32(0.5).tobytes()

  def entry(key, kind_field, body):
    feature = bytes([(kind_field << 3) | 2, len(body)]) + body
    data = b"\x0a" + bytes([len(key)]) + key + b"\x12" + bytes([len(feature)]) + feature
    return b"\x0a" + bytes([len(data)]) + data

  features = entry(b"ids", 3, int_list) + entry(b"w", 2, float_list)
  example = b"\x7a\x03abc" + b"\x0a" + bytes([len(features)]) + features
  decoded = pretraining_records.decode_example(example)
  assert decoded["ids"][0] == "int64" and decoded["ids"][1].tolist() == [5, -2]
  assert decoded["w"][0] == "float" and decoded["w"][1].tolist() == [0.5]


def bad_records():
  """(id, record bytes) of each schema and value error both readers must refuse alike."""
  cases = [
      ("missing", changed(5, drop=("segment_ids",))),
      ("length", changed(5, input_ids=np.ones(SEQ - 1, np.int64))),
      ("dtype", float_instead_of_int(5, "masked_lm_ids")),
      ("not_an_example", b"\xff\xfe\x00 not an Example \xe9"),
  ]
  for name, index, value, _ in VALUES:
    cases.append((f"{name}={value}", example_bytes(with_values(**{name: (index, value)}))))
  return cases


@pytest.mark.slow(seconds=58)
@pytest.mark.parametrize("record", [r for _, r in bad_records()], ids=[i for i, _ in bad_records()])
def test_every_bad_record_is_refused_with_the_tf_pipelines_own_line(tmp_path, record):
  records = [example_bytes(features_of(i)) for i in range(NUM_RECORDS)]
  records[5] = record
  cfg = config([shard_dir(tmp_path, records)], SEQ, PRED, VOCAB)
  with pytest.raises(InputError) as theirs:
    tf_rows(cfg)
  with pytest.raises(InputError) as ours:
    numpy_rows(cfg, batch=4)
  assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("case", DAMAGE)
def test_damaged_shards_are_refused_or_skipped_as_in_tf_data(tmp_path, case):
  paths, good, _, _ = make_shards(tmp_path, 1, case)
  cfg = config(paths, SEQ, PRED)
  with pytest.raises(InputError) as theirs:
    tf_rows(cfg)
  with pytest.raises(InputError) as ours:
    numpy_rows(cfg)
  assert str(ours.value) == str(theirs.value)
  skipped = pretraining_records.SkippedRecords()
  rows = numpy_rows(config(paths, SEQ, PRED, skipped=skipped))
  assert [int(row["input_ids"][1]) - 100 for row in rows] == good
  assert skipped.count() == SHARDS * PER_SHARD - len(good)


def test_the_reader_runs_where_tensorflow_cannot_be_imported(tool_records, tmp_path):
  files, vocab_size = tool_records
  script = (
      "import hashlib, json, sys\n"
      "sys.modules['tensorflow'] = None  # import tensorflow now fails\n"
      "from recurrent_bert.data import pretraining_records as r\n"
      "cfg = r.PretrainingDataConfig(json.loads(sys.argv[1]), 32, 5, vocab_size=int(sys.argv[2]))\n"
      "digest = hashlib.sha256()\n"
      "for b in r.batches(cfg, 4):\n"
      "  for key in sorted(b):\n"
      "    digest.update(key.encode() + b[key].tobytes())\n"
      "print(digest.hexdigest())\n"
      "assert 'tensorflow' not in [m.split('.')[0] for m in sys.modules if sys.modules[m]]\n"
  )
  # A real process: the fork server has TensorFlow loaded already.
  result = subprocess.run(
      [sys.executable, "-c", script, json.dumps(files), str(vocab_size)],
      cwd=REPO,
      env=subprocess_env(),
      capture_output=True,
      text=True,
      timeout=120,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  digest = hashlib.sha256()
  for b in pretraining_records.batches(config(files, 32, 5, vocab_size), 4):
    for key in sorted(b):
      digest.update(key.encode() + b[key].tobytes())
  assert result.stdout.strip() == digest.hexdigest()
