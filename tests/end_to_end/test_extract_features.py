"""python -m recurrent_bert.extract_features and tasks/feature_extraction.py.

Reference: the in-process Keras encoder's `encoder_outputs` on inputs packed by the
numpy pipeline (`tasks/pair_features.py`) from the texts and pairs written out here, not
parsed by the code under test. The command line runs (MirroredStrategy over 2 logical
CPUs writing tfrecord shards, bad input) start together in one fixture; the other formats
run in-process on the default strategy.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.data.tokenization import BertWordpieceTokenizer
from recurrent_bert.tasks import feature_extraction
from recurrent_bert.tasks.pair_features import PairExample
from recurrent_bert.tasks.pair_features import convert_pair_examples
from tests.support.export_checks import LONG_TEXT
from tests.support.export_checks import encoder
from tests.support.export_checks import write_model_dir
from tests.support.export_checks import write_vocab
from tests.support.readme_text import finish
from tests.support.readme_text import start_module

pytestmark = pytest.mark.slow(seconds=45)

SEQ_LEN = 16
LAYERS = [-1, 0]  # bert_tiny has 2 blocks: the last, then the first
# (input line, (text, text_b) it means)
LINES = [
    ("The cat sat on the mat.", ("The cat sat on the mat.", None)),
    (
        "Hello, world! ||| Paris is the capital of France.",
        ("Hello, world!", "Paris is the capital of France."),
    ),
    ("", ("", None)),
    (LONG_TEXT, (LONG_TEXT, None)),  # cut to SEQ_LEN
    ("who|||what ||| café", ("who|||what", "café")),
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  """(root, model dir, tokenizer, encoder, reference inputs, reference features [N, T, k, H])."""
  root = tmp_path_factory.mktemp("features")
  vocab_file = write_vocab(root)
  model = encoder("bert_tiny")
  write_model_dir(root / "model", model, vocab_file)
  (root / "input.txt").write_text("\n".join(line for line, _ in LINES) + "\n", encoding="utf-8")
  tokenizer = BertWordpieceTokenizer(vocab_file, do_lower_case=True)
  examples = [PairExample(str(i), a, b, None) for i, (_, (a, b)) in enumerate(LINES)]
  packed = convert_pair_examples(examples, tokenizer, SEQ_LEN)
  inputs = {k: packed[k] for k in ("input_ids", "input_mask", "segment_ids")}
  blocks = model(inputs, training=False)["encoder_outputs"]
  want = np.stack([blocks[i].numpy() for i in LAYERS], axis=2)
  return root, root / "model", tokenizer, model, inputs, want


@pytest.fixture(scope="module")
def command_runs(setup):
  """{name: (CompletedProcess, output path)} of the command-line runs, run side by side."""
  root, model_dir, *_ = setup
  (root / "empty.txt").write_bytes(b"")
  (root / "latin1.txt").write_bytes(b"fine\ncaf\xe9\n")
  common = [f"--init_checkpoint={model_dir}", f"--max_seq_length={SEQ_LEN}", "--log_steps=1"]
  runs = {
      "mirrored": [
          f"--input_file={root / 'input.txt'}",
          "--output_format=tfrecord",
          "--num_shards=2",
          "--layers=-1,0",
          "--distribution_strategy=mirrored",
          "--num_cpu_devices=2",
          "--batch_size=4",  # 5 rows: the second batch is mostly padding
      ],
      "empty": [f"--input_file={root / 'empty.txt'}", "--layers=-1"],
      "not_utf8": [f"--input_file={root / 'latin1.txt'}", "--layers=-1"],
      "layer_range": [f"--input_file={root / 'input.txt'}", "--layers=-1,-3"],
      "layer_parse": [f"--input_file={root / 'input.txt'}", "--layers=-1,x"],
  }
  started = {}
  for name, flags in runs.items():
    output = root / f"{name}.out"
    started[name] = (
        start_module("recurrent_bert.extract_features", *common, *flags, f"--output_file={output}"),
        output,
    )
  return {name: (finish(process), output) for name, (process, output) in started.items()}


def _extract(setup, tmp_path, output_format, **kwargs):
  _, _, tokenizer, model, _, _ = setup
  examples = feature_extraction.read_inputs(str(setup[0] / "input.txt"))
  path = str(tmp_path / f"features.{output_format}")
  rows, files = feature_extraction.extract_features(
      tf.distribute.get_strategy(),
      model,
      tokenizer,
      examples,
      path,
      output_format,
      LAYERS,
      SEQ_LEN,
      batch_size=kwargs.pop("batch_size", 2),
      log_steps=1,
      **kwargs,
  )
  assert rows == len(LINES)
  return files


def test_input_lines_and_pairs_are_read_as_written(setup):
  examples = feature_extraction.read_inputs(str(setup[0] / "input.txt"))
  assert [(e.text_a, e.text_b) for e in examples] == [pair for _, pair in LINES]


def test_npz_holds_the_encoders_block_outputs(setup, tmp_path):
  *_, inputs, want = setup
  [path] = _extract(setup, tmp_path, "npz")
  with np.load(path) as npz:
    got = dict(npz)
  assert got["features"].shape == (len(LINES), SEQ_LEN, 2, 128)
  assert got["features"].dtype == np.float32
  np.testing.assert_array_equal(got["layers"], LAYERS)
  for key, value in inputs.items():
    np.testing.assert_array_equal(got[key], value)
  np.testing.assert_allclose(got["features"], want, atol=1e-5)
  assert got["input_mask"][3].sum() == SEQ_LEN  # the long text was cut
  assert list(got["segment_ids"][1][:7]) == [0] * 6 + [1]  # [CLS] hello , world ! [SEP] paris


def test_xla_compiled_extraction_gives_the_same_vectors(setup):
  *_, model, inputs, want = setup
  extractor = feature_extraction.LayerExtractor(
      tf.distribute.get_strategy(), model, [1, 0], jit_compile=True
  )
  batches = list(extractor(inputs, global_batch_size=4))
  assert [first for first, _ in batches] == [0, 4]
  np.testing.assert_allclose(np.concatenate([v for _, v in batches]), want, atol=1e-5)


def test_jsonl_lists_pieces_and_rounded_vectors(setup, tmp_path):
  *_, inputs, want = setup
  [path] = _extract(setup, tmp_path, "jsonl", batch_size=3)
  with open(path, encoding="utf-8") as f:
    rows = [json.loads(line) for line in f]
  assert [row["line_index"] for row in rows] == list(range(len(LINES)))
  tokens = [[piece["token"] for piece in row["features"]] for row in rows]
  assert tokens[0] == ["[CLS]", "the", "cat", "sat", "on", "the", "mat", ".", "[SEP]"]
  assert tokens[2] == ["[CLS]", "[SEP]"]
  # Lower-cased, accents stripped: "cafe" is not in the vocabulary, "café" is.
  assert tokens[4][-6:] == ["[SEP]", "c", "##a", "##f", "##e", "[SEP]"]
  for n, row in enumerate(rows):
    assert len(row["features"]) == inputs["input_mask"][n].sum()
    for t, piece in enumerate(row["features"]):
      assert [layer["index"] for layer in piece["layers"]] == LAYERS
      values = np.array([layer["values"] for layer in piece["layers"]])  # [k, H]
      np.testing.assert_allclose(values, want[n, t], atol=5e-6)  # 6 decimals + float32


def _read_tfrecords(paths):
  rows = []
  for path in paths:
    for record in tf.data.TFRecordDataset(path):
      parsed = feature_extraction.parse_tfrecord_example(record, SEQ_LEN, 2, 128)
      rows.append({k: v.numpy() for k, v in parsed.items()})
  return rows


def test_command_under_mirrored_strategy_writes_tfrecord_shards_in_input_order(setup, command_runs):
  """2 replicas on 2 logical CPUs, a padded last batch: the same vectors, in order."""
  *_, inputs, want = setup
  result, output = command_runs["mirrored"]
  assert result.returncode == 0, result.stderr[-3000:]
  paths = feature_extraction.shard_paths(str(output), 2)
  assert paths == [f"{output}-00000-of-00002", f"{output}-00001-of-00002"]
  assert str(output) + "-00000-of-00002" in result.stdout
  assert "rows/s" in result.stderr and "ETA" in result.stderr  # the progress line
  rows = _read_tfrecords(paths)
  assert [int(row["line_index"][0]) for row in rows] == list(range(len(LINES)))
  assert len(_read_tfrecords(paths[:1])) == 2  # rows 0-1, then 2-4
  for n, row in enumerate(rows):
    np.testing.assert_array_equal(row["layers"], LAYERS)
    for key in inputs:
      np.testing.assert_array_equal(row[key], inputs[key][n])
    np.testing.assert_allclose(row["features"], want[n], atol=1e-5)


@pytest.mark.parametrize(
    "case,expected",
    [
        ("empty", "empty.txt: empty"),
        ("not_utf8", "latin1.txt:2: "),
        ("layer_range", "--layers: -3 is out of range for an encoder of 2 blocks"),
        ("layer_parse", "--layers must be distinct integers"),
    ],
)
def test_bad_input_exits_2_with_one_line(command_runs, case, expected):
  result, output = command_runs[case]
  assert result.returncode == 2, result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and expected in last, last
  assert not output.exists()


def test_layer_indices_are_python_style():
  assert feature_extraction.resolve_layers([-1, 0, -3, 2], 4) == [3, 0, 1, 2]
  with pytest.raises(ValueError, match="out of range for an encoder of 4 blocks"):
    feature_extraction.resolve_layers([4], 4)
  with pytest.raises(ValueError, match="-1,3 name a block twice"):
    feature_extraction.resolve_layers([-1, 3], 4)


def test_a_failed_write_leaves_no_output(setup, tmp_path):
  _, _, tokenizer, model, _, _ = setup

  def failing_batches():
    yield 0, np.zeros((1, SEQ_LEN, 2, 128), np.float32)
    raise RuntimeError("interrupted")

  inputs = {k: np.zeros((2, SEQ_LEN), np.int32) for k in ("input_ids", "input_mask", "segment_ids")}
  for output_format in feature_extraction.OUTPUT_FORMATS:
    path = tmp_path / f"out.{output_format}"
    with pytest.raises(RuntimeError, match="interrupted"):
      feature_extraction.write_features(
          str(path), output_format, inputs, failing_batches(), LAYERS, tokenizer, num_shards=1
      )
    assert list(tmp_path.iterdir()) == []
