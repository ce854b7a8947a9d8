r"""Pretraining runs one at a time on every core, against the same runs side by side.

The demo pretrains many small runs (models x seeds). One run at a time gives each run all
of the machine's cores (TensorFlow's default thread pools); side by side (`--jobs` N,
`recurrent_bert.jobs.run_jobs`) gives each of N runs 1/N of the cores
(TF_NUM_INTRAOP_THREADS). This times the same `--runs` pretraining commands both ways in
one invocation, alternating the two orders over `--rounds` so a machine that drifts hits
both, and prints each way's wall time and the ratio: what a user would otherwise pick is
one run at a time.

Needs a demo work dir (its vocabulary and pretraining records):

  .venv/bin/python -m recurrent_bert.demo --work_dir=demo_output   # once
  .venv/bin/python benchmarks/side_by_side.py --demo_dir=demo_output
  .venv/bin/python benchmarks/side_by_side.py --demo_dir=demo_output \
      --preset=swishrnn_tiny --steps=800 --batch_size=16 --rounds=1
"""

import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app
from absl import flags

from recurrent_bert import jobs

flags.DEFINE_string("demo_dir", "demo_output", "A demo work dir: its vocab/ and pretrain_data/.")
flags.DEFINE_string("preset", "bert_tiny", "The model of every run.")
flags.DEFINE_integer("steps", 400, "Training steps per run.")
flags.DEFINE_integer("batch_size", 16, "Sequences per step.")
flags.DEFINE_integer("seq_length", 64, "The records' sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 10, "The records' masked positions.")
flags.DEFINE_integer("runs", 2, "Runs per way (seeds 1..N).")
flags.DEFINE_integer("jobs", 2, "Runs at a time, side by side.")
flags.DEFINE_integer("rounds", 2, "Times each way is timed (orders alternate).")
FLAGS = flags.FLAGS


def _commands(out_dir: str):
  data = os.path.join(FLAGS.demo_dir, "pretrain_data", "*.tfrecord")
  vocab = os.path.join(FLAGS.demo_dir, "vocab", "vocab.txt")
  for seed in range(1, FLAGS.runs + 1):
    yield jobs.Job(
        f"seed{seed}",
        jobs.python_module(
            "recurrent_bert.pretrain",
            f"--model_config={FLAGS.preset}",
            f"--input_files={data}",
            f"--vocab_file={vocab}",
            "--do_lower_case=true",
            f"--model_dir={os.path.join(out_dir, f'seed{seed}')}",
            f"--max_seq_length={FLAGS.seq_length}",
            f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
            f"--train_batch_size={FLAGS.batch_size}",
            f"--num_train_steps={FLAGS.steps}",
            f"--warmup_steps={FLAGS.steps // 10}",
            f"--steps_per_loop={max(1, FLAGS.steps // 8)}",
            f"--log_steps={max(1, FLAGS.steps // 8)}",
            f"--save_checkpoints_steps={FLAGS.steps}",
            f"--seed={seed}",
        ),
        os.path.join(out_dir, f"seed{seed}.log"),
    )


def _time_runs(parallel: int) -> float:
  """Wall seconds of the runs, `parallel` at a time, each in a fresh model dir."""
  out_dir = tempfile.mkdtemp(prefix="side_by_side_")

  def on_exit(job, code, wall, cpu):
    del wall, cpu
    if code != 0:
      raise SystemExit(f"{job.name} failed (exit code {code}): see {job.log_path}")

  try:
    start = time.perf_counter()
    jobs.run_jobs(_commands(out_dir), parallel, on_exit)
    return time.perf_counter() - start
  finally:
    shutil.rmtree(out_dir, ignore_errors=True)


def main(argv):
  del argv
  for part in ("vocab/vocab.txt", "pretrain_data"):
    if not os.path.exists(os.path.join(FLAGS.demo_dir, part)):
      print(f"--demo_dir={FLAGS.demo_dir}: no {part} (run the demo there first)", file=sys.stderr)
      raise SystemExit(2)
  ways = {"one at a time": 1, f"{FLAGS.jobs} side by side": FLAGS.jobs}
  walls = {name: [] for name in ways}
  for round_index in range(FLAGS.rounds):
    order = list(ways) if round_index % 2 == 0 else list(reversed(ways))
    for name in order:
      walls[name].append(_time_runs(ways[name]))
      print(f"round {round_index + 1}: {name}: {walls[name][-1]:.1f} s", flush=True)
  cores = jobs.usable_cores()
  print(
      f"\n{FLAGS.runs} runs of {FLAGS.preset}, {FLAGS.steps} steps x {FLAGS.batch_size} x "
      f"{FLAGS.seq_length} tokens each, {cores} cores (median over {FLAGS.rounds} rounds):"
  )
  alone = statistics.median(walls["one at a time"])
  for name, values in walls.items():
    wall = statistics.median(values)
    print(f"  {name:16s} {wall:7.1f} s  {alone / wall:.2f}x the runs per hour of one at a time")


if __name__ == "__main__":
  app.run(main)
