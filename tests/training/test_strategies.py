"""Distribution strategies of the training loop, as `python -m recurrent_bert.pretrain`
subprocesses: MultiWorkerMirroredStrategy (two worker processes on 127.0.0.1) and
MirroredStrategy over two logical CPUs follow the single-device loss trajectory, and a
killed mirrored run resumes exactly. (A file of its own, apart from test_loop.py, so that
the two test workers share these runs.)"""

import json
import os

import pytest

from tests.training.conftest import assert_all_succeeded
from tests.training.conftest import free_port
from tests.training.conftest import losses_by_step
from tests.training.conftest import run_pretrain
from tests.training.conftest import subprocess_env
from tests.training.conftest import wait_all
from tests.training.test_loop import assert_killed_after
from tests.training.test_loop import assert_same_losses
from tests.training.test_loop import start_pretrain

pytestmark = pytest.mark.slow(seconds=165)

# One input file, no shuffling, no dropout: with the same global batch of 8 every layout
# sees the same examples per step (two pipelines share the file record by record).
STRATEGY_FLAGS = ["--shuffle_buffer_size=1", "--num_train_steps=12", "--save_checkpoints_steps=4"]


@pytest.fixture(scope="module")
def single_device_run(tmp_path_factory, single_shard_records, vocab_file, no_dropout_config):
  model_dir = tmp_path_factory.mktemp("single_device")
  run_pretrain(
      model_dir,
      vocab_file,
      single_shard_records,
      f"--model_config={no_dropout_config}",
      *STRATEGY_FLAGS,
  )
  losses = losses_by_step(model_dir)
  assert sorted(losses) == list(range(1, 13))
  return losses


def test_multi_worker_matches_single_device(
    tmp_path, single_shard_records, vocab_file, no_dropout_config, single_device_run
):
  """MultiWorkerMirroredStrategy with two worker processes on 127.0.0.1 follows the
  single-device loss trajectory. (MirroredStrategy's whole trajectory is checked by
  test_mirrored_resume_skips_consumed_batches[1]: steps 1..4 of its killed run, 5..12
  of the resumed one.)"""
  cluster = {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]}
  processes = [
      start_pretrain(
          tmp_path / "multi_worker",
          vocab_file,
          single_shard_records,
          f"--model_config={no_dropout_config}",
          *STRATEGY_FLAGS,
          "--distribution_strategy=multi_worker_mirrored",
          env=subprocess_env(
              TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
          ),
      )
      for index in range(2)
  ]
  assert_all_succeeded(("worker 0", "worker 1"), wait_all(processes, timeout=400))
  assert_same_losses(
      losses_by_step(tmp_path / "multi_worker"), single_device_run, 1e-4, "multi_worker"
  )
  # Only the chief keeps checkpoints; the other worker's scratch copy is gone.
  assert os.path.exists(tmp_path / "multi_worker" / "ckpt-12.index")
  assert not os.listdir(tmp_path / "multi_worker" / ".scratch")


@pytest.mark.parametrize("accumulation", [1, 2])
def test_mirrored_resume_skips_consumed_batches(
    tmp_path, single_shard_records, vocab_file, no_dropout_config, single_device_run, accumulation
):
  """Distributed iterators are not checkpointable: the restarted mirrored run rebuilds
  the dataset and skips 4 steps x N micro-batches x 2 replicas of batches, then continues
  exactly. With N = 2 micro-batches the kill comes inside update 7 (after 6 updates x 2
  micro-batches x 2 replicas and one more replica's micro-batch), and the trajectory is
  still the single-device one of whole batches. Steps 1..4 come from the killed run:
  the whole trajectory is the single-device one."""
  flags = [
      f"--model_config={no_dropout_config}",
      *STRATEGY_FLAGS,
      "--distribution_strategy=mirrored",
      "--num_cpu_devices=2",
      f"--gradient_accumulation_steps={accumulation}",
  ]
  kill = (
      dict(kill_after_step=6)
      if accumulation == 1
      else dict(kill_at_micro_batch=6 * accumulation * 2 + 1)
  )
  (outcome,) = wait_all(
      [start_pretrain(tmp_path / "run", vocab_file, single_shard_records, *flags, **kill)],
      timeout=300,
  )
  assert_killed_after(6, tmp_path / "run", *outcome)
  run_pretrain(tmp_path / "run", vocab_file, single_shard_records, *flags)
  assert_same_losses(losses_by_step(tmp_path / "run"), single_device_run, 1e-4, "resumed")
