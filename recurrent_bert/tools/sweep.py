r"""Fine-tuning sweep: models × tasks × learning rates × seeds, and the papers' tables.

Every run is a subprocess of `python -m recurrent_bert.finetune_glue` (GLUE, SuperGLUE
BoolQ/MultiRC, custom TSV tasks) or `recurrent_bert.finetune_squad` (SQuAD), in
--mode=train_and_eval, with its own model dir

  OUTPUT_DIR/runs/<model>/<task>/lr<lr>_seed<seed>/   (log.txt: the run's stdout+stderr;
                                                       sweep_command.json: its flags)

A run whose eval_results.json holds a final evaluation is skipped, so re-running the same
command resumes an interrupted sweep (an unfinished run resumes from its last checkpoint);
a run dir made with other flags is reported, never silently reused. A failed run is
reported with the end of its log and the sweep goes on; the exit status is then 1. A run
that exits with status 2 (bad input: flags or data, no work done) would fail the same way at
every lr and seed, so the remaining runs of its model × task are not started.

Outputs in OUTPUT_DIR (each written atomically; they describe this invocation's grid):
  results.csv   one row per finished run: model, task, learning_rate, seed, main_metric,
                value, every metric of the first eval split, seconds_per_train_step,
                num_train_steps, eval_split, run_dir.
  summary.md    per model × task × learning rate: mean ± sample std over seeds, with n
  summary.csv   (the SwishRNN paper's protocol); per model × task: best of restarts, the
                best dev score over every lr × seed and where it came from (the BERT
                paper's); per model: median time per fine-tuning step over its runs.
  lr_sweep.png  per task, the main metric (mean, std error bars) against the learning rate
                (log axis), one line per model (the SwishRNN paper's Figure 3).

--models: NAME=SPEC, where SPEC is a pretrained encoder (an existing directory or checkpoint
prefix: --init_checkpoint), a ModelConfig JSON file or a preset name such as bert_tiny
(--model_config, random initialisation). --tasks: TASK=DATA_DIR for finetune_glue (a GLUE
or SuperGLUE task name, or custom), squad=TRAIN_FILE:PREDICT_FILE (squad_v2=... for v2.0)
for finetune_squad. Flags for the runs: --entry_flags (every run), --glue_flags /
--squad_flags (runs of that entry point), --entry_flagfile (a --flagfile for every run, e.g.
a paper's protocol; the sweep's own flags win over it). The flags the sweep sets itself
(task, data, model, model_dir, learning_rate, seed, mode) cannot be passed through.

The code: rbert-sweep-grid (the grid and each run's command), rbert-sweep-tables
(results to tables and files), this file (flags, running the grid).

Example (tiny models from scratch on a generated task):
  python -m recurrent_bert.tools.sweep --models=bert=bert_tiny,swishrnn=swishrnn_tiny \
      --tasks=rte=/data/rte --learning_rates=1e-3,3e-4,1e-4 --seeds=0,1,2 \
      --entry_flags="--vocab_file=/data/vocab.txt --max_seq_length=32 \
      --train_batch_size=16 --max_train_steps=100" --parallel=2 --output_dir=/tmp/sweep
"""

import json
import os
import shlex
import signal
import sys
import time
from typing import Dict, Iterator, List, Optional, Sequence

from absl import flags

from recurrent_bert import cli
from recurrent_bert import io_utils
from recurrent_bert import jobs
from recurrent_bert import progress
from recurrent_bert.flags import execution
from recurrent_bert.tools import sweep_grid
from recurrent_bert.tools import sweep_tables

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The sweep's flags, defined when it runs as a program (not on import): tests import
  this module beside other tools whose flags share names (--output_dir)."""
  flags.DEFINE_list(
      "models",
      None,
      "NAME=SPEC, comma-separated; SPEC: a pretrained encoder "
      "dir / checkpoint prefix, a ModelConfig JSON, or a preset (bert_tiny).",
  )
  flags.DEFINE_list(
      "tasks",
      None,
      "TASK=DATA_DIR (finetune_glue: GLUE/SuperGLUE name or "
      "custom) or squad=TRAIN_FILE:PREDICT_FILE / squad_v2=... (finetune_squad).",
  )
  flags.DEFINE_list("learning_rates", None, "Peak learning rates, e.g. 1e-4,3e-4,1e-3.")
  flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (restarts) per learning rate.")
  flags.DEFINE_string("output_dir", None, "Where runs/ and the tables go.")
  flags.DEFINE_multi_string(
      "entry_flags",
      [],
      "Flags for every run, e.g. "
      "--entry_flags='--max_seq_length=128 --train_batch_size=32' "
      "(repeatable; split like a shell line).",
  )
  flags.DEFINE_multi_string("glue_flags", [], "Flags only for the finetune_glue runs.")
  flags.DEFINE_multi_string("squad_flags", [], "Flags only for the finetune_squad runs.")
  flags.DEFINE_string("entry_flagfile", None, "Passed as --flagfile to every run.")
  flags.DEFINE_integer("parallel", 1, "Runs at once (each is a TensorFlow process).")
  flags.DEFINE_boolean("dry_run", False, "Print the runs' commands and exit.")
  flags.DEFINE_integer("log_tail_lines", 15, "Lines of a failed run's log that are printed.")
  flags.mark_flags_as_required(["models", "tasks", "learning_rates", "output_dir"])


COMMAND_FILE = "sweep_command.json"
LOG_FILE = "log.txt"
# The entry points' exit status for bad input (flags, data; no work done).
BAD_INPUT_STATUS = 2


# -- running ---------------------------------------------------------------------------


class _Interrupted(Exception):
  pass


def _recorded_command(run: sweep_grid.Run) -> Optional[List[str]]:
  try:
    with open(os.path.join(run.run_dir, COMMAND_FILE), encoding="utf-8") as f:
      return json.load(f)["args"]
  except (FileNotFoundError, json.JSONDecodeError, KeyError):
    return None


def _comparable(args: Sequence[str]) -> List[str]:
  """A run's flags without --model_dir (a sweep dir may move), order-free."""
  return sorted(a for a in args if not a.startswith("--model_dir="))


def _command_mismatch(run: sweep_grid.Run) -> Optional[str]:
  """Why the run dir cannot be reused with this run's flags (None if it can)."""
  recorded = _recorded_command(run)
  current = [run.module, *run.args]
  if recorded is None or _comparable(recorded) == _comparable(current):
    return None
  old, new = set(_comparable(recorded)), set(_comparable(current))
  return (
      f"{run.run_dir} was made with other flags (then: {sorted(old - new)}, now: "
      f"{sorted(new - old)}); remove it or use another --output_dir"
  )


class Sweep:
  """Runs the grid with up to `parallel` subprocesses, reporting each finished run."""

  def __init__(
      self, runs: Sequence[sweep_grid.Run], parallel: int, tail_lines: int = 15, out=sys.stderr
  ):
    self.runs = list(runs)
    self.parallel = parallel
    self.tail_lines = tail_lines
    self.out = out
    self.results: Dict[sweep_grid.Run, dict] = {}
    self.failed: List[str] = []
    self.skipped = 0
    self.done = 0
    self.start = time.monotonic()
    # Every run is estimated at 1: the ETA is the mean run time so far per run left.
    self._eta = jobs.Eta()

  def _print(self, message: str) -> None:
    print(message, file=self.out, flush=True)

  def _progress(self, message: str, remaining_to_run: int) -> None:
    self.done += 1
    elapsed = time.monotonic() - self.start
    eta = ""
    seconds_left = self._eta.seconds_left([1.0] * remaining_to_run, self.parallel)
    if remaining_to_run and seconds_left is not None:
      eta = f", ETA {progress.format_duration(seconds_left)}"
    width = len(str(len(self.runs)))
    self._print(
        f"[{self.done:{width}d}/{len(self.runs)}] {message} | elapsed "
        f"{progress.format_duration(elapsed)}{eta}"
    )

  def _fail(self, run: sweep_grid.Run, reason: str, remaining: int, log: bool = True) -> None:
    self.failed.append(f"{run.label}: {reason}")
    log_path = os.path.join(run.run_dir, LOG_FILE)
    self._progress(f"FAILED {run.label}: {reason}", remaining)
    if log:
      self._print(f"  end of {log_path}:\n{jobs.log_tail(log_path, self.tail_lines)}")

  def _job(self, run: sweep_grid.Run) -> jobs.Job:
    """The run as a job of the pool, its flags recorded beside its log first."""
    os.makedirs(run.run_dir, exist_ok=True)
    io_utils.atomic_write_json(
        os.path.join(run.run_dir, COMMAND_FILE), {"args": [run.module, *run.args]}
    )
    return jobs.Job(
        run.run_dir, jobs.python_module(run.module, *run.args), os.path.join(run.run_dir, LOG_FILE)
    )

  def _finish(self, run: sweep_grid.Run, status: int, seconds: float, remaining: int) -> None:
    self._eta.finished(1.0, seconds)
    results = sweep_tables.read_eval_results(run.run_dir)
    if status != 0:
      self._fail(run, f"exit status {status} after {seconds:.1f} s", remaining)
    elif results is None:
      self._fail(run, f"finished without a final {sweep_tables.EVAL_RESULTS_FILE}", remaining)
    else:
      row = self._row(run, results, remaining)
      if row:
        self._progress(
            f"{run.label}: {row['main_metric']}={row['value']:.4f} in {seconds:.1f} s",
            remaining,
        )

  def _row(self, run: sweep_grid.Run, results: dict, remaining: int) -> Optional[dict]:
    try:
      row = sweep_tables.result_row(run, results)
    except (ValueError, KeyError, TypeError) as e:
      self._fail(run, f"unreadable {sweep_tables.EVAL_RESULTS_FILE}: {e!r}", remaining, log=False)
      return None
    self.results[run] = row
    return row

  def run(self) -> None:
    """Skips the finished runs, runs the others; a failure is reported and the rest go on.

    Raises:
      KeyboardInterrupt, _Interrupted: Ctrl-C or SIGTERM (the running runs are stopped).
    """
    pending = []
    for run in self.runs:
      mismatch = _command_mismatch(run)
      results = sweep_tables.read_eval_results(run.run_dir)
      if mismatch:
        self._fail(run, mismatch, 0, log=False)
      elif results is not None:
        row = self._row(run, results, 0)
        if row:
          self.skipped += 1
          self._progress(
              f"skipped {run.label}: already finished ({row['main_metric']}="
              f"{row['value']:.4f})",
              0,
          )
      else:
        pending.append(run)
    if pending:
      self._print(
          f"running {len(pending)} of {len(self.runs)} runs, up to {self.parallel} "
          f"at once (logs: <run dir>/{LOG_FILE})"
      )
    by_dir = {run.run_dir: run for run in pending}
    handled = 0  # runs finished, failed or not run, of `pending`
    bad_input = set()  # (model, task) pairs whose runs failed with bad input

    def to_run() -> Iterator[jobs.Job]:
      nonlocal handled
      for run in pending:
        if (run.model, run.task) in bad_input:
          handled += 1
          self._fail(
              run,
              f"not run: a {run.model}/{run.task} run failed with bad input "
              f"(exit status {BAD_INPUT_STATUS})",
              len(pending) - handled,
              log=False,
          )
          continue
        yield self._job(run)

    def on_exit(job: jobs.Job, status: int, seconds: float, cpu: Optional[float]) -> None:
      del cpu
      nonlocal handled
      handled += 1
      run = by_dir[job.name]
      if status == BAD_INPUT_STATUS:
        bad_input.add((run.model, run.task))
      self._finish(run, status, seconds, len(pending) - handled)

    try:
      jobs.run_jobs(to_run(), self.parallel, on_exit, out=self.out)
    except (KeyboardInterrupt, _Interrupted):
      self._print("interrupted: the same command resumes the sweep")
      raise


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  if FLAGS.parallel < 1:
    cli.fail(f"--parallel={FLAGS.parallel}: must be >= 1")
  if FLAGS.log_tail_lines < 0:
    cli.fail(f"--log_tail_lines={FLAGS.log_tail_lines}: must be >= 0")
  for name in ("models", "tasks", "learning_rates", "seeds"):
    if not FLAGS[name].value:
      cli.fail(f"--{name} is empty: give at least one (see --help)")
  models = cli.run_checked(sweep_grid.parse_models, FLAGS.models)
  tasks = cli.run_checked(sweep_grid.parse_tasks, FLAGS.tasks)
  learning_rates = cli.run_checked(
      sweep_grid.parse_numbers, FLAGS.learning_rates, "learning_rates", float
  )
  seeds = cli.run_checked(sweep_grid.parse_numbers, FLAGS.seeds, "seeds", int)
  entry_flags = cli.run_checked(sweep_grid.parse_pass_through, FLAGS.entry_flags, "entry_flags")
  module_flags = {
      sweep_grid.GLUE_MODULE: cli.run_checked(
          sweep_grid.parse_pass_through, FLAGS.glue_flags, "glue_flags"
      ),
      sweep_grid.SQUAD_MODULE: cli.run_checked(
          sweep_grid.parse_pass_through, FLAGS.squad_flags, "squad_flags"
      ),
  }
  entry_flagfile = None
  if FLAGS.entry_flagfile:
    if not os.path.isfile(FLAGS.entry_flagfile):
      cli.fail(f"--entry_flagfile: {FLAGS.entry_flagfile!r} does not exist")
    entry_flagfile = os.path.abspath(FLAGS.entry_flagfile)
  execution.check_output_path("output_dir")  # empty, a file, or under a file: refused
  output_dir = os.path.abspath(FLAGS.output_dir)
  runs = sweep_grid.build_runs(
      models, tasks, learning_rates, seeds, output_dir, entry_flags, module_flags, entry_flagfile
  )
  if FLAGS.dry_run:
    for run in runs:
      print(shlex.join([sys.executable, "-m", run.module, *run.args]))
    return
  os.makedirs(output_dir, exist_ok=True)
  if not os.access(output_dir, os.W_OK):
    cli.fail(f"--output_dir: {output_dir!r} is not writable")

  def on_sigterm(signum, frame):
    del signum, frame
    raise _Interrupted()

  signal.signal(signal.SIGTERM, on_sigterm)
  sweep = Sweep(runs, FLAGS.parallel, FLAGS.log_tail_lines)
  try:
    sweep.run()
  except (KeyboardInterrupt, _Interrupted):
    sys.exit(130)
  rows = [sweep.results[run] for run in runs if run in sweep.results]
  notes = [
      f"Grid: {len(models)} models × {len(tasks)} tasks × {len(learning_rates)} "
      f"learning rates × {len(seeds)} seeds; up to {FLAGS.parallel} runs at once "
      f"(step times are measured with that sharing)."
  ]
  paths = sweep_tables.write_outputs(rows, output_dir, sweep.failed, notes)
  print(
      f"{len(runs)} runs: {len(rows) - sweep.skipped} finished now, {sweep.skipped} "
      f"skipped (already finished), {len(sweep.failed)} failed or not run; wrote "
      f"{', '.join(paths)}",
      file=sys.stderr,
  )
  with open(os.path.join(output_dir, "summary.md"), encoding="utf-8") as f:
    print(f.read(), end="")
  if sweep.failed:
    sys.exit(1)


if __name__ == "__main__":
  define_flags()
  cli.run(main)
