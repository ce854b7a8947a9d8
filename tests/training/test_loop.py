"""The training loop end to end, as `python -m recurrent_bert.pretrain` subprocesses on
TFRecords made by the data tool: learning, kill -9 + resume, and strategies."""

import json
import math
import os
import socket
import subprocess

import numpy as np
import pytest

from recurrent_bert.data import tokenization
from tests.training.conftest import (REPO, assert_all_succeeded, losses_by_step,
                                     pretrain_command, run_pretrain, subprocess_env,
                                     wait_all)

FAMILIES = ("bert", "bert_rab", "trans_blstm_2", "swishrnn")


def test_every_family_learns(tmp_path, masked_records, vocab_file):
  """30 steps of each tiny family: MLM loss starts at ln(V) and falls clearly below it."""
  vocab_size = len(tokenization.load_vocab(vocab_file))
  processes = [start_pretrain(tmp_path / family, vocab_file, masked_records,
                              f"--model_config={family}_tiny", "--train_batch_size=16",
                              "--num_train_steps=30", "--warmup_steps=3",
                              "--steps_per_loop=10", "--log_steps=10",
                              "--save_checkpoints_steps=30")
               for family in FAMILIES]
  # Concurrently: the 2 cores are mostly idle while each process traces its graph.
  for family, (returncode, stderr) in zip(FAMILIES, wait_all(processes, timeout=400)):
    assert returncode == 0, f"{family}: {stderr[-3000:]}"
    mlm = losses_by_step(tmp_path / family, "mlm_loss")
    assert sorted(mlm) == list(range(1, 31))
    # Untrained: near-uniform predictions over the vocabulary.
    assert mlm[1] == pytest.approx(math.log(vocab_size), abs=0.15), family
    final = np.mean([mlm[s] for s in range(26, 31)])
    assert final < mlm[1] - 0.7, (family, mlm[1], final)
    assert "step 30/30 loss=" in stderr and "ETA" in stderr


def start_pretrain(model_dir, vocab, records, *flags, kill_after_step=None,
                   kill_at_micro_batch=None, env=None):
  """Popen of pretrain; with kill_after_step it SIGKILLs itself after logging that step,
  with kill_at_micro_batch after that many micro-batches (kill_after_step.py)."""
  entry = ("-m", "recurrent_bert.pretrain")
  env = dict(env or subprocess_env())
  kill = {"KILL_AFTER_STEP": kill_after_step, "KILL_AT_MICRO_BATCH": kill_at_micro_batch}
  kill = {name: str(value) for name, value in kill.items() if value is not None}
  if kill:
    entry = (os.path.join(REPO, "tests", "training", "kill_after_step.py"),)
    env.update(kill)
  return subprocess.Popen(pretrain_command(model_dir, vocab, records, *flags, entry=entry),
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def assert_killed_after(step, model_dir, returncode, stderr):
  assert returncode == -9, stderr[-3000:]
  with open(os.path.join(model_dir, "checkpoint")) as f:
    assert 'model_checkpoint_path: "ckpt-4"' in f.read()
  assert max(losses_by_step(model_dir)) == step


def assert_same_losses(actual, expected, rel, what):
  assert sorted(actual) == sorted(expected), what
  for step in expected:
    assert actual[step] == pytest.approx(expected[step], rel=rel, abs=rel), (what, step)


def test_killed_run_resumes_exactly(tmp_path, masked_records, vocab_file):
  """Default strategy (the iterator is in the checkpoint). Kill -9 after step 6, the
  last checkpoint at 4; the restarted run's steps 5..12 match a run never interrupted.
  Dropout and shuffling are on: RNG and input positions must come back, not just weights."""
  flags = ["--num_train_steps=12", "--save_checkpoints_steps=4"]
  outputs = wait_all([
      start_pretrain(tmp_path / "straight", vocab_file, masked_records, *flags),
      start_pretrain(tmp_path / "resumed", vocab_file, masked_records, *flags,
                     kill_after_step=6)], timeout=300)
  assert outputs[0][0] == 0, outputs[0][1][-3000:]
  assert_killed_after(6, tmp_path / "resumed", *outputs[1])
  result = run_pretrain(tmp_path / "resumed", vocab_file, masked_records, *flags)
  assert "resumed from" in result.stderr and "ckpt-4" in result.stderr
  assert_same_losses(losses_by_step(tmp_path / "resumed"),
                     losses_by_step(tmp_path / "straight"), 1e-5, "resumed")


# One input file, no shuffling, no dropout: with the same global batch of 8 every layout
# sees the same examples per step (two pipelines share the file record by record).
STRATEGY_FLAGS = ["--shuffle_buffer_size=1", "--num_train_steps=12",
                  "--save_checkpoints_steps=4"]


@pytest.fixture(scope="module")
def single_device_run(tmp_path_factory, single_shard_records, vocab_file, no_dropout_config):
  model_dir = tmp_path_factory.mktemp("single_device")
  run_pretrain(model_dir, vocab_file, single_shard_records,
               f"--model_config={no_dropout_config}", *STRATEGY_FLAGS)
  losses = losses_by_step(model_dir)
  assert sorted(losses) == list(range(1, 13))
  return losses


def free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_mirrored_and_multi_worker_match_single_device(
    tmp_path, single_shard_records, vocab_file, no_dropout_config, single_device_run):
  """MirroredStrategy over two logical CPUs and MultiWorkerMirroredStrategy with two
  worker processes on 127.0.0.1 follow the single-device loss trajectory."""
  flags = [f"--model_config={no_dropout_config}", *STRATEGY_FLAGS]
  cluster = {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]}
  processes = [
      start_pretrain(tmp_path / "multi_worker", vocab_file, single_shard_records, *flags,
                     "--distribution_strategy=multi_worker_mirrored",
                     env=subprocess_env(TF_CONFIG=json.dumps(
                         {"cluster": cluster, "task": {"type": "worker", "index": index}})))
      for index in range(2)]
  processes.append(start_pretrain(
      tmp_path / "mirrored", vocab_file, single_shard_records, *flags,
      "--distribution_strategy=mirrored", "--num_cpu_devices=2"))
  assert_all_succeeded(("worker 0", "worker 1", "mirrored"),
                       wait_all(processes, timeout=400))
  for name in ("mirrored", "multi_worker"):
    assert_same_losses(losses_by_step(tmp_path / name), single_device_run, 1e-4, name)
  # Only the chief keeps checkpoints; the other worker's scratch copy is gone.
  assert os.path.exists(tmp_path / "multi_worker" / "ckpt-12.index")
  assert not os.listdir(tmp_path / "multi_worker" / ".scratch")


@pytest.mark.parametrize("accumulation", [1, 2])
def test_mirrored_resume_skips_consumed_batches(tmp_path, single_shard_records, vocab_file,
                                                no_dropout_config, single_device_run,
                                                accumulation):
  """Distributed iterators are not checkpointable: the restarted mirrored run rebuilds
  the dataset and skips 4 steps x N micro-batches x 2 replicas of batches, then continues
  exactly. With N = 2 micro-batches the kill comes inside update 7 (after 6 updates x 2
  micro-batches x 2 replicas and one more replica's micro-batch), and the trajectory is
  still the single-device one of whole batches."""
  flags = [f"--model_config={no_dropout_config}", *STRATEGY_FLAGS,
           "--distribution_strategy=mirrored", "--num_cpu_devices=2",
           f"--gradient_accumulation_steps={accumulation}"]
  kill = (dict(kill_after_step=6) if accumulation == 1 else
          dict(kill_at_micro_batch=6 * accumulation * 2 + 1))
  (outcome,) = wait_all([start_pretrain(tmp_path / "run", vocab_file, single_shard_records,
                                        *flags, **kill)], timeout=300)
  assert_killed_after(6, tmp_path / "run", *outcome)
  run_pretrain(tmp_path / "run", vocab_file, single_shard_records, *flags)
  assert_same_losses(losses_by_step(tmp_path / "run"), single_device_run, 1e-4, "resumed")
