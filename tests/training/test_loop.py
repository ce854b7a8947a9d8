"""The training loop end to end, as `python -m recurrent_bert.pretrain` subprocesses on
TFRecords made by the data tool: learning, kill -9 + resume, Ctrl-C + resume (the
distribution strategies are in test_strategies.py); and the loop's bookkeeping
(throughput, metrics log, interruption) in-process."""

import json
import math
import os
import signal
import subprocess
import threading
import types

import numpy as np
import pytest

from recurrent_bert import io_utils
from recurrent_bert.data import tokenization
from tests.support import forkserver
from tests.training.conftest import REPO
from tests.training.conftest import losses_by_step
from tests.training.conftest import metrics_rows
from tests.training.conftest import pretrain_command
from tests.training.conftest import run_pretrain
from tests.training.conftest import subprocess_env
from tests.training.conftest import wait_all

pytestmark = pytest.mark.slow(seconds=125)

FAMILIES = ("bert", "bert_rab", "trans_blstm_2", "swishrnn")


def test_every_family_learns(tmp_path, masked_records, vocab_file):
  """30 steps of each tiny family: MLM loss starts at ln(V) and falls clearly below it."""
  vocab_size = len(tokenization.load_vocab(vocab_file))
  processes = [
      start_pretrain(
          tmp_path / family,
          vocab_file,
          masked_records,
          f"--model_config={family}_tiny",
          "--train_batch_size=16",
          "--num_train_steps=30",
          "--warmup_steps=3",
          "--steps_per_loop=10",
          "--log_steps=10",
          "--save_checkpoints_steps=30",
      )
      for family in FAMILIES
  ]
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


def start_pretrain(
    model_dir,
    vocab,
    records,
    *flags,
    kill_after_step=None,
    kill_at_micro_batch=None,
    wait_for_sigint_after_step=None,
    env=None,
    stderr=subprocess.PIPE,
):
  """Popen of pretrain; with kill_after_step it SIGKILLs itself after logging that step,
  with kill_at_micro_batch after that many micro-batches, with wait_for_sigint_after_step
  it says so on stdout and waits for a SIGINT there (kill_after_step.py)."""
  entry = ("-m", "recurrent_bert.pretrain")
  env = dict(env or subprocess_env())
  stops = {
      "KILL_AFTER_STEP": kill_after_step,
      "KILL_AT_MICRO_BATCH": kill_at_micro_batch,
      "WAIT_FOR_SIGINT_AFTER_STEP": wait_for_sigint_after_step,
  }
  stops = {name: str(value) for name, value in stops.items() if value is not None}
  if stops:
    entry = (os.path.join(REPO, "tests", "training", "kill_after_step.py"),)
    env.update(stops)
  command = pretrain_command(model_dir, vocab, records, *flags, entry=entry)
  if wait_for_sigint_after_step is None and stderr == subprocess.PIPE:
    return forkserver.start(command, REPO, env)  # read at the end: no TF start-up each
  return subprocess.Popen(
      pretrain_command(model_dir, vocab, records, *flags, entry=entry),
      cwd=REPO,
      env=env,
      stdout=subprocess.PIPE,
      stderr=stderr,
      text=True,
      preexec_fn=_default_sigint,
  )


def _default_sigint():
  # A test run started in the background of a non-interactive shell (`make test &`)
  # inherits SIGINT ignored, and pretrain rightly leaves an ignored SIGINT ignored: the
  # Ctrl-C test's run must start as a terminal's would.
  signal.signal(signal.SIGINT, signal.SIG_DFL)


def assert_killed_after(step, model_dir, returncode, stderr):
  assert returncode == -9, stderr[-3000:]
  with open(os.path.join(model_dir, "checkpoint")) as f:
    assert 'model_checkpoint_path: "ckpt-4"' in f.read()
  assert max(losses_by_step(model_dir)) == step


def assert_same_losses(actual, expected, rel, what):
  assert sorted(actual) == sorted(expected), what
  for step in expected:
    assert actual[step] == pytest.approx(expected[step], rel=rel, abs=rel), (what, step)


@pytest.fixture(scope="module")
def resume_flags(small_config):
  """The resume tests' runs: the small bert (dropout on), 12 steps, checkpoints every 4."""
  return [f"--model_config={small_config}", "--num_train_steps=12", "--save_checkpoints_steps=4"]


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory, masked_records, vocab_file, resume_flags):
  """model_dir of a run of resume_flags never interrupted: what resumed runs must match."""
  model_dir = tmp_path_factory.mktemp("straight")
  run_pretrain(model_dir, vocab_file, masked_records, *resume_flags)
  return model_dir


def assert_one_row_per_step(model_dir, expected_dir, num_steps=12):
  """metrics.jsonl reads as one run: steps 1..n once each, in order, every value equal to
  the uninterrupted run's (the re-run steps included)."""
  rows, expected = metrics_rows(model_dir), metrics_rows(expected_dir)
  assert [row["step"] for row in rows] == list(range(1, num_steps + 1))
  assert [row["step"] for row in expected] == list(range(1, num_steps + 1))
  for row, want in zip(rows, expected):
    assert sorted(row) == sorted(want)
    for key in want:
      assert row[key] == pytest.approx(want[key], rel=1e-5, abs=1e-5), (row["step"], key)


def test_killed_run_resumes_exactly(
    tmp_path, masked_records, vocab_file, straight_run, resume_flags
):
  """Default strategy (the iterator is in the checkpoint). Kill -9 after step 6, the
  last checkpoint at 4; the restarted run's steps 5..12 match a run never interrupted.
  Dropout and shuffling are on: RNG and input positions must come back, not just weights.
  metrics.jsonl drops the killed run's rows 5 and 6 before they are logged again."""
  (outcome,) = wait_all(
      [
          start_pretrain(
              tmp_path / "resumed", vocab_file, masked_records, *resume_flags, kill_after_step=6
          )
      ],
      timeout=300,
  )
  assert_killed_after(6, tmp_path / "resumed", *outcome)
  result = run_pretrain(tmp_path / "resumed", vocab_file, masked_records, *resume_flags)
  assert "resumed from" in result.stderr and "ckpt-4" in result.stderr
  assert "dropped 2 rows after step 4" in result.stderr
  assert_same_losses(
      losses_by_step(tmp_path / "resumed"), losses_by_step(straight_run), 1e-5, "resumed"
  )
  assert_one_row_per_step(tmp_path / "resumed", straight_run)


def run_until_sigint(model_dir, vocab, records, step, *flags, timeout=300):
  """Runs pretrain until it has logged `step`, sends it SIGINT there (it waits for it:
  no timing involved) and waits for its end. Returns (exit status, stdout, stderr)."""
  stderr_path = os.path.join(str(model_dir) + ".stderr")
  with open(stderr_path, "w", encoding="utf-8") as stderr:
    process = start_pretrain(
        model_dir, vocab, records, *flags, stderr=stderr, wait_for_sigint_after_step=step
    )
  watchdog = threading.Timer(timeout, process.kill)  # a hung run ends the test, not CI
  watchdog.start()
  try:
    stdout = []
    for line in process.stdout:  # the marker; EOF if the run died before it
      stdout.append(line)
      if line.startswith(f"waiting for SIGINT at step {step}"):
        process.send_signal(signal.SIGINT)
        break
    stdout.append(process.stdout.read())
    process.wait()
  finally:
    watchdog.cancel()
    if process.poll() is None:
      process.kill()
      process.wait()
    process.stdout.close()
  with open(stderr_path, encoding="utf-8") as f:
    return process.returncode, "".join(stdout), f.read()


def test_ctrl_c_saves_the_step_and_resumes_exactly(
    tmp_path, masked_records, vocab_file, straight_run, resume_flags
):
  """SIGINT after step 6 (checkpoints every 4): the run saves step 6, ends with one line
  and status 130, no traceback; the same command then runs steps 7..12 as a run never
  interrupted did, and metrics.jsonl holds each step once."""
  model_dir = tmp_path / "run"
  returncode, stdout, stderr = run_until_sigint(
      model_dir, vocab_file, masked_records, 6, *resume_flags
  )
  assert "waiting for SIGINT at step 6" in stdout, stderr[-3000:]
  assert returncode == 130, stderr[-3000:]
  assert "Traceback" not in stderr, stderr[-3000:]
  message = (
      f"interrupted at step 6: checkpoint saved in {model_dir}; run the same command to resume"
  )
  lines = stderr.strip().splitlines()
  assert [line for line in lines if "interrupted at step" in line] == [message]
  assert lines[-1] == message
  with open(model_dir / "checkpoint") as f:
    assert 'model_checkpoint_path: "ckpt-6"' in f.read()
  assert os.path.exists(model_dir / "ckpt-6.index")
  assert [row["step"] for row in metrics_rows(model_dir)] == list(range(1, 7))

  # The first progress line (its loop call traced the step) shows no rate; the next do.
  progress = {
      line.split("step ", 1)[1].split()[0]: line
      for line in lines
      if " step " in line and "/12 " in line
  }
  assert "steps/s" not in progress["1/12"] and "first call" in progress["1/12"]
  assert "steps/s" in progress["2/12"] and "ETA" in progress["2/12"]

  result = run_pretrain(model_dir, vocab_file, masked_records, *resume_flags)
  assert "resumed from" in result.stderr and "ckpt-6" in result.stderr
  assert_same_losses(losses_by_step(model_dir), losses_by_step(straight_run), 1e-5, "resumed")
  assert_one_row_per_step(model_dir, straight_run)


# -- bookkeeping, in-process --------------------------------------------------------------


def test_throughput_leaves_out_the_first_call():
  """The first loop call (tracing: 100 s here) counts in no rate; evaluation time neither."""
  from recurrent_bert.training import loop

  meter = loop.Throughput()
  meter.call_done(0.0, 100.0, 10, examples=80, tokens=5120)  # traces, compiles
  assert meter.take() is None and meter.first_call_seconds == 100.0
  meter.call_done(100.0, 101.0, 10, examples=80, tokens=5120)
  meter.call_done(101.5, 102.0, 10, examples=80, tokens=5120)  # 0.5 s between calls
  assert meter.take() == {
      "steps_per_second": 10.0,
      "examples_per_second": 80.0,
      "tokens_per_second": 5120.0,
  }
  assert meter.take() is None  # each log reports its own interval
  meter.skip_until(150.0)  # 48 s of evaluation
  meter.call_done(150.0, 152.0, 10, examples=80, tokens=5120)
  assert meter.take()["steps_per_second"] == 5.0


@pytest.mark.parametrize("scheme", ["local", "ram"])
def test_truncate_metrics_log(tmp_path, scheme):
  """A resume at step 3 keeps rows 1..3 once each (the last copy of a step, as readers
  take it) and drops later rows and a line cut by a kill; a clean log is left alone."""
  import tensorflow as tf

  model_dir = str(tmp_path) if scheme == "local" else f"ram://{tmp_path.name}/truncate_metrics_log"
  tf.io.gfile.makedirs(model_dir)
  path = os.path.join(model_dir, "metrics.jsonl")
  rows = [
      {"step": 1, "loss": 9.0},
      {"step": 2, "loss": 8.0},
      {"step": 2, "loss": 7.0},
      {"step": 3, "loss": 6.0},
      {"step": 4, "loss": 5.0},
  ]
  with tf.io.gfile.GFile(path, "w") as f:
    f.write("".join(json.dumps(row) + "\n" for row in rows) + '{"step": 5, "lo')
  assert io_utils.truncate_metrics_log(model_dir, 3) == 3
  with tf.io.gfile.GFile(path) as f:
    kept = [json.loads(line) for line in f.read().splitlines()]
  assert kept == [{"step": 1, "loss": 9.0}, {"step": 2, "loss": 7.0}, {"step": 3, "loss": 6.0}]
  assert io_utils.truncate_metrics_log(model_dir, 3) == 0
  assert io_utils.truncate_metrics_log(model_dir, 0) == 3  # a fresh start: nothing kept
  assert tf.io.gfile.listdir(model_dir) == ["metrics.jsonl"]  # no temporary left
  assert io_utils.truncate_metrics_log(os.path.join(model_dir, "none"), 3) == 0


def stopping_loop(model_dir, num_workers, saved_step):
  """The state `TrainingLoop._stop` reads, with a `_save` that records being called."""
  saves = []
  state = types.SimpleNamespace(
      model_dir=str(model_dir), _num_workers=num_workers, _saved_step=saved_step
  )
  state._save = lambda: saves.append(1) or setattr(state, "_saved_step", 37)
  return state, saves


def test_ctrl_c_saves_only_a_single_worker_run(tmp_path):
  """A save is collective: a multi-worker run stops without one and names the last
  periodic checkpoint; a single worker saves unless the step is saved already."""
  from recurrent_bert.training import loop

  stop = loop.TrainingLoop._stop
  state, saves = stopping_loop(tmp_path, num_workers=2, saved_step=None)
  assert str(stop(state, 37)) == (
      "interrupted at step 37: not saved, a save needs all 2 workers; no checkpoint yet "
      f"in {tmp_path}; run the same command to start again"
  )
  state, saves = stopping_loop(tmp_path, num_workers=2, saved_step=30)
  interrupted = stop(state, 37)
  assert not saves and (interrupted.step, interrupted.checkpoint_step) == (37, 30)
  assert str(interrupted) == (
      "interrupted at step 37: not saved, a save needs all 2 workers; the last periodic "
      f"checkpoint (step 30) is kept in {tmp_path}; run the same command to resume from it"
  )

  state, saves = stopping_loop(tmp_path, num_workers=1, saved_step=30)
  assert str(stop(state, 30)) == (
      f"interrupted at step 30: checkpoint saved in {tmp_path}; run the same command to resume"
  )
  assert not saves  # saved already
  assert stop(state, 37).checkpoint_step == 37 and saves == [1]
  state, saves = stopping_loop(tmp_path, num_workers=1, saved_step=None)
  stop(state, 0)
  assert not saves  # nothing trained yet


@pytest.mark.parametrize(
    "rate,spec,text",
    [(10.54, ".1f", "10.5"), (1.0, ".1f", "1.0"), (0.0364, ".1f", "0.036"), (0.5, ".0f", "0.5")],
)
def test_a_slow_rate_keeps_two_significant_digits(rate, spec, text):
  """A run at 28 s a step read "0.0 steps/s"; below 1 the progress line keeps two digits."""
  from recurrent_bert.training.driver import _rate

  assert _rate(rate, spec) == text
