"""Fixtures of the training tests: TFRecords made by the real data tool, and a runner
for `python -m recurrent_bert.pretrain` subprocesses."""

import json
import os
import socket
import subprocess
import sys

import pytest

from recurrent_bert.config import get_preset
from tests.data.conftest import corpus_file
from tests.data.conftest import vocab_file
from tests.support import forkserver

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEQ_LEN = 64
MAX_PREDICTIONS = 10


def subprocess_env(**extra):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
  env.pop("TF_CONFIG", None)
  env.update(extra)
  return env


def make_records(
    output_dir, corpus, vocab, *extra_flags, seq_len=SEQ_LEN, max_predictions=MAX_PREDICTIONS
):
  """Runs recurrent_bert.tools.create_pretraining_data (the real tool) into output_dir."""
  result = forkserver.run(
      [
          sys.executable,
          "-m",
          "recurrent_bert.tools.create_pretraining_data",
          f"--input_files={corpus}",
          f"--vocab_file={vocab}",
          f"--output_dir={output_dir}",
          f"--max_seq_length={seq_len}",
          f"--max_predictions_per_seq={max_predictions}",
          "--noprogress",
          *extra_flags,
      ],
      REPO,
      subprocess_env(),
      timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  return os.path.join(str(output_dir), "*.tfrecord")


@pytest.fixture(scope="session")
def masked_records(tmp_path_factory, corpus_file, vocab_file):
  """Glob of 2 shards of masked MLM+NSP records (seq 64, 10 predictions)."""
  return make_records(
      tmp_path_factory.mktemp("masked"),
      corpus_file,
      vocab_file,
      "--dupe_factor=2",
      "--num_output_shards=2",
  )


@pytest.fixture(scope="session")
def single_shard_records(tmp_path_factory, corpus_file, vocab_file):
  """Glob of one shard of masked records (record-level sharding across workers)."""
  return make_records(
      tmp_path_factory.mktemp("single"),
      corpus_file,
      vocab_file,
      "--dupe_factor=1",
      "--num_output_shards=1",
  )


@pytest.fixture(scope="session")
def unmasked_records(tmp_path_factory, corpus_file, vocab_file):
  """Glob of 2 shards of unmasked, NSP-free records for --dynamic_masking."""
  return make_records(
      tmp_path_factory.mktemp("unmasked"),
      corpus_file,
      vocab_file,
      "--dupe_factor=1",
      "--num_output_shards=2",
      "--dynamic_masking",
      "--nouse_nsp",
  )


# bert_tiny cut to one layer, 32 wide, for the runs compared with each other: what each
# process spends tracing and compiling grows with the graph, and the comparisons do not
# need depth (every layer is updated by the same code).
SMALL_MODEL = dict(num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64)


def write_small_config(directory, name, **changes):
  """Path of a JSON ModelConfig: bert_tiny with SMALL_MODEL and `changes` applied."""
  path = directory / f"{name}.json"
  path.write_text(get_preset("bert_tiny").replace(**SMALL_MODEL, **changes).to_json())
  return str(path)


@pytest.fixture(scope="session")
def no_dropout_config(tmp_path_factory):
  """The small bert without dropout: runs with different replica layouts must agree."""
  return write_small_config(
      tmp_path_factory.mktemp("config"),
      "small_bert_no_dropout",
      dropout_rate=0.0,
      attention_dropout_rate=0.0,
  )


@pytest.fixture(scope="session")
def small_config(tmp_path_factory):
  """The small bert with bert_tiny's dropout."""
  return write_small_config(tmp_path_factory.mktemp("config"), "small_bert")


def pretrain_command(
    model_dir, vocab, input_files, *flags, entry=("-m", "recurrent_bert.pretrain")
):
  """The pretrain command line with the tiny defaults of these tests; flags override."""
  return [
      sys.executable,
      *entry,
      f"--model_dir={model_dir}",
      f"--vocab_file={vocab}",
      f"--input_files={input_files}",
      f"--max_seq_length={SEQ_LEN}",
      f"--max_predictions_per_seq={MAX_PREDICTIONS}",
      "--model_config=bert_tiny",
      "--train_batch_size=8",
      "--num_train_steps=12",
      "--warmup_steps=2",
      "--learning_rate=1e-3",
      "--log_steps=1",
      "--steps_per_loop=4",
      "--save_checkpoints_steps=4",
      "--shuffle_buffer_size=100",
      *flags,
  ]


def run_pretrain(model_dir, vocab, input_files, *flags, check=True, timeout=300, env=None):
  result = forkserver.run(
      pretrain_command(model_dir, vocab, input_files, *flags),
      REPO,
      env or subprocess_env(),
      timeout=timeout,
  )
  if check:
    assert result.returncode == 0, result.stderr[-4000:]
  return result


def wait_all(processes, timeout):
  """Waits for every process; on any failure or timeout kills the rest. Returns outputs."""
  outputs = []
  try:
    for process in processes:
      stdout, stderr = process.communicate(timeout=timeout)
      outputs.append((process.returncode, stderr))
  finally:
    for process in processes:
      if process.poll() is None:
        process.kill()
        process.wait()
  return outputs


def assert_all_succeeded(names, outputs):
  """Every process exited 0. A worker's crash surfaces in the others as an aborted
  collective, so the message shows every process's log, not only the first failure's."""
  assert all(code == 0 for code, _ in outputs), "\n".join(
      f"{name} (exit {code}): {err[-3000:]}" for name, (code, err) in zip(names, outputs)
  )


def losses_by_step(model_dir, key="loss"):
  """{step: loss} from model_dir/metrics.jsonl (later lines win after a resume)."""
  from recurrent_bert.io_utils import read_metrics_log

  return {step: record[key] for step, record in read_metrics_log(str(model_dir)).items()}


def read_json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def metrics_rows(model_dir):
  """model_dir/metrics.jsonl's rows in file order, every line (no later-wins merging)."""
  with open(os.path.join(str(model_dir), "metrics.jsonl"), encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def free_port():
  """A TCP port free on 127.0.0.1 now (for a MultiWorkerMirrored cluster's workers)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]
