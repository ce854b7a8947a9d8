"""Gradient accumulation end to end (`python -m recurrent_bert.pretrain` subprocesses):
N micro-batches make the update of one batch, on one device, under MultiWorkerMirrored
and under XLA (under MirroredStrategy: test_strategies.py); a run killed inside an
accumulation cycle resumes exactly; bad values fail."""

import json

import numpy as np
import pytest
import tensorflow as tf

from tests.training import test_loop as loop_tests
from tests.training.conftest import free_port
from tests.training.conftest import losses_by_step
from tests.training.conftest import run_pretrain
from tests.training.conftest import subprocess_env
from tests.training.conftest import wait_all

pytestmark = pytest.mark.slow(seconds=105)

# No shuffling, no dropout, one input file: every layout reads the same 8 examples per
# update (test_strategies.STRATEGY_FLAGS); LAMB, so it is exercised under each layout too.
UPDATES = 4
FLAGS = [
    "--shuffle_buffer_size=1",
    f"--num_train_steps={UPDATES}",
    "--train_batch_size=8",
    "--save_checkpoints_steps=2",
    "--steps_per_loop=2",
    "--optimizer=lamb",
]
# MirroredStrategy with 2 micro-batches per replica is test_strategies.py's
# test_mirrored_resume_skips_consumed_batches[2]: 12 updates, the one-batch trajectory.
LAYOUTS = {
    # name: (flags, tolerance against the one-batch run)
    "accumulate_4": (["--gradient_accumulation_steps=4"], 1e-5),
    # XLA fuses differently from the graph executor: float32 rounding differs.
    "xla_accumulate_2": (["--gradient_accumulation_steps=2", "--jit_compile"], 1e-4),
    # Two worker processes (worker 0 writes the checkpoints).
    "multi_worker_accumulate_2": (
        ["--gradient_accumulation_steps=2", "--distribution_strategy=multi_worker_mirrored"],
        1e-5,
    ),
}


def model_weights(model_dir):
  """{checkpoint key: value} of the model's weights in the last checkpoint (the dropout
  seed-generator states advance once per micro-batch, so they are left out)."""
  reader = tf.train.load_checkpoint(str(model_dir))
  return {
      key: reader.get_tensor(key)
      for key in reader.get_variable_to_shape_map()
      if key.startswith("model/") and "seed_generator" not in key
  }


def test_accumulated_updates_equal_one_batch_updates(
    tmp_path, single_shard_records, vocab_file, no_dropout_config
):
  """After 4 updates of batch 8 the weights and losses equal (within float tolerance)
  those of batch 8 in one piece: 4 micro-batches of 2; 2 of 4 with jit_compile; 2 per
  worker x 2 MultiWorkerMirrored workers."""
  flags = [f"--model_config={no_dropout_config}", *FLAGS]
  names = ["one_batch", *LAYOUTS, "worker 1"]
  processes = [
      loop_tests.start_pretrain(tmp_path / "one_batch", vocab_file, single_shard_records, *flags)
  ]
  processes += [
      loop_tests.start_pretrain(tmp_path / name, vocab_file, single_shard_records, *flags, *extra)
      for name, (extra, _) in LAYOUTS.items()
      if name != "multi_worker_accumulate_2"
  ]
  cluster = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(2)]}
  processes += [
      loop_tests.start_pretrain(
          tmp_path / "multi_worker_accumulate_2",
          vocab_file,
          single_shard_records,
          *flags,
          *LAYOUTS["multi_worker_accumulate_2"][0],
          env=subprocess_env(
              TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
          ),
      )
      for index in range(2)
  ]
  outputs = wait_all(processes, timeout=500)
  for name, (returncode, stderr) in zip(names, outputs):
    assert returncode == 0, f"{name}: {stderr[-3000:]}"
  expected = model_weights(tmp_path / "one_batch")
  expected_losses = losses_by_step(tmp_path / "one_batch")
  assert len(expected) > 20 and sorted(expected_losses) == list(range(1, UPDATES + 1))
  for name, (_, tolerance) in LAYOUTS.items():
    # The step counter counts updates: the last checkpoint is ckpt-4 everywhere.
    assert tf.train.latest_checkpoint(str(tmp_path / name)).endswith(f"ckpt-{UPDATES}")
    loop_tests.assert_same_losses(losses_by_step(tmp_path / name), expected_losses, tolerance, name)
    actual = model_weights(tmp_path / name)
    assert sorted(actual) == sorted(expected), name
    for key, value in expected.items():
      np.testing.assert_allclose(
          actual[key], value, rtol=tolerance * 10, atol=tolerance, err_msg=f"{name}: {key}"
      )


def test_kill_inside_an_accumulation_cycle_resumes_exactly(
    tmp_path, masked_records, vocab_file, small_config
):
  """3 micro-batches per update, dropout and shuffling on. The process is killed -9
  right after the 2nd micro-batch of update 7 (the 20th), with ckpt-4 the last
  checkpoint; the restarted run's updates 5..12 match a run never interrupted."""
  flags = [
      f"--model_config={small_config}",
      "--num_train_steps=12",
      "--save_checkpoints_steps=4",
      "--train_batch_size=6",
      "--gradient_accumulation_steps=3",
  ]
  straight = loop_tests.start_pretrain(tmp_path / "straight", vocab_file, masked_records, *flags)
  killed = loop_tests.start_pretrain(
      tmp_path / "resumed", vocab_file, masked_records, *flags, kill_at_micro_batch=6 * 3 + 2
  )
  outputs = wait_all([straight, killed], timeout=300)
  assert outputs[0][0] == 0, outputs[0][1][-3000:]
  loop_tests.assert_killed_after(6, tmp_path / "resumed", *outputs[1])
  result = run_pretrain(tmp_path / "resumed", vocab_file, masked_records, *flags)
  assert "resumed from" in result.stderr and "ckpt-4" in result.stderr
  loop_tests.assert_same_losses(
      losses_by_step(tmp_path / "resumed"), losses_by_step(tmp_path / "straight"), 1e-5, "resumed"
  )


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--gradient_accumulation_steps=0"], "--gradient_accumulation_steps=0 must be >= 1"),
        (
            ["--gradient_accumulation_steps=3"],
            "--train_batch_size=8 must divide by --gradient_accumulation_steps=3",
        ),
        (
            [
                "--gradient_accumulation_steps=4",
                "--distribution_strategy=mirrored",
                "--num_cpu_devices=3",
            ],
            "--gradient_accumulation_steps=4 x 3 replica(s)",
        ),
        (["--decay_schedule=polynomial", "--decay_power=0"], "--decay_power=0.0 must be > 0"),
    ],
)
def test_bad_accumulation_and_schedule_flags_fail_in_one_line(
    tmp_path, masked_records, vocab_file, flags, message
):
  result = run_pretrain(tmp_path, vocab_file, masked_records, *flags, check=False)
  assert result.returncode == 2, result.stderr[-2000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and message in errors[0], result.stderr[-2000:]
  assert "Traceback" not in result.stderr
  assert not (tmp_path / "checkpoint").exists()
