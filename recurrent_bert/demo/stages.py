"""The demo's stage engine: restartable stages, their markers, --redo, progress and ETA.

A stage is run in this process (`run`) or as a command (`command`, then `after` reads its
outputs). A finished stage leaves `<work_dir>/stages/<name>.json` (written last,
atomically: its result, its timing and its `key`); the next run reuses it while the key is
the same. Stages of one `parallel_group` that follow each other run side by side,
`parallel` at a time. The first failure stops the run with a `StageError` naming the stage
and its log.
"""

import dataclasses
import json
import os
import shutil
import time
import traceback
from typing import Callable, Dict, List, Optional, Pattern, Sequence

from recurrent_bert import io_utils
from recurrent_bert import jobs
from recurrent_bert import progress
from recurrent_bert.errors import InputError

# Weight, in seconds of work, of the initial ETA scale of 1 (a few short stages cannot
# swing it).
ETA_PRIOR_SECONDS = 120.0


class StageError(Exception):
  """A stage failed: the message names the stage and its log file."""


def say(message: str = "") -> None:
  print(message, flush=True)


@dataclasses.dataclass
class Stage:
  """One restartable unit of work.

  Attributes:
    name: unique; also names its marker and log file.
    title: its progress line.
    estimate: expected seconds (for the ETA), before calibration; for a stage of a
      parallel group, its share of the group's wall time.
    key: what it depends on beyond the work dir's settings: a change runs it again.
    run: an in-process stage: returns its result.
    command: a subprocess stage: returns its command line.
    echo: the lines of the command's output to print.
    after: a subprocess stage's result, read from its outputs.
    parallel_group: consecutive stages of one group run side by side.
    output_dir: a directory the stage makes, deleted when --redo names the stage.
    data: it reads text or makes records (the demo's --data_only runs these alone,
      --prepared_data none of them).
  """

  name: str
  title: str
  estimate: float
  key: Dict = dataclasses.field(default_factory=dict)
  run: Optional[Callable[[], Dict]] = None
  command: Optional[Callable[[], List[str]]] = None
  echo: Optional[Pattern[str]] = None
  after: Optional[Callable[[], Dict]] = None
  parallel_group: Optional[str] = None
  output_dir: Optional[str] = None
  data: bool = False


class StageRunner:
  """Runs stages in order, reusing the finished ones; collects their results and timings."""

  def __init__(self, work_dir: str, parallel: int = 1, cwd: Optional[str] = None):
    """A runner for one work dir.

    Args:
      work_dir: holds stages/ (the markers) and logs/.
      parallel: stages of a parallel group at a time.
      cwd: the working directory of the stages' commands (None: this process's).
    """
    self.work_dir = work_dir
    self.parallel = parallel
    self.cwd = cwd
    self.results: Dict[str, Dict] = {}
    self.timings: List[Dict] = []
    self.start_time = time.time()
    self._eta = jobs.Eta(ETA_PRIOR_SECONDS)

  def marker(self, name: str) -> str:
    return os.path.join(self.work_dir, "stages", name.replace(":", "_") + ".json")

  def log(self, name: str) -> str:
    return os.path.join(self.work_dir, "logs", name.replace(":", "_") + ".log")

  def reusable(self, stage: Stage) -> Optional[Dict]:
    """The stage's marker record if it finished with the same key, else None."""
    path = self.marker(stage.name)
    if not os.path.exists(path):
      return None
    with open(path, encoding="utf-8") as f:
      record = json.load(f)
    if record.get("key", {}) != json.loads(json.dumps(stage.key)):
      return None
    return record

  def forget(self, names: Sequence[str], stages: Sequence[Stage]) -> None:
    """--redo: drops the markers (and output dirs) of the named stages.

    Args:
      names: stage names.
      stages: every stage of the run (the names must be among them).

    Raises:
      StageError: a name is not a stage's.
    """
    by_name = {st.name: st for st in stages}
    unknown = [n for n in names if n not in by_name]
    if unknown:
      raise StageError(
          f"--redo: no stage {unknown}; the stages are: " + ", ".join(st.name for st in stages)
      )
    for name in names:
      if os.path.exists(self.marker(name)):
        os.remove(self.marker(name))
      directory = by_name[name].output_dir
      if directory and os.path.isdir(directory):
        shutil.rmtree(directory)

  def run(self, stages: Sequence[Stage]) -> None:
    """Runs the stages not finished yet, in order; reused ones print one line each.

    Raises:
      StageError: a stage failed (the later ones are not run).
    """
    total = len(stages)
    index = 0
    executed = set()  # run ahead of their turn, in a parallel group
    while index < total:
      stage = stages[index]
      if stage.name in executed:
        index += 1
        continue
      record = self.reusable(stage)
      elapsed = progress.format_duration(time.time() - self.start_time)
      if record is not None:
        self.results[stage.name] = record["result"]
        self.timings.append(
            {
                "stage": stage.name,
                "status": "reused",
                "seconds": record["seconds"],
                "cpu_seconds": record.get("cpu_seconds"),
            }
        )
        say(
            f"[{index + 1}/{total}] {stage.title}: reused (finished earlier in "
            f"{progress.format_duration(record['seconds'])})"
        )
        index += 1
        continue
      group = [stage]
      if stage.parallel_group and self.parallel > 1:
        j = index + 1
        while j < total and stages[j].parallel_group == stage.parallel_group:
          if self.reusable(stages[j]) is None:
            group.append(stages[j])
          j += 1
      eta = progress.format_duration(self._eta.seconds_left([st.estimate for st in stages[index:]]))
      if len(group) == 1:
        say(f"\n[{index + 1}/{total}] {stage.title}  (elapsed {elapsed}, ETA ~{eta})")
      else:
        say(
            f"\n[{index + 1}/{total}] {len(group)} runs, {self.parallel} at a time: "
            f"{stage.parallel_group}  (elapsed {elapsed}, ETA ~{eta})"
        )
      if len(group) == 1 and stage.run is not None:
        self._run_here(stage)
      else:
        self._run_commands(group)
      executed.update(g.name for g in group)
      index += 1

  def _finish(
      self, stage: Stage, result: Dict, wall: float, cpu: Optional[float], side_by_side: int = 1
  ) -> None:
    record = {
        "stage": stage.name,
        "seconds": round(wall, 2),
        "cpu_seconds": None if cpu is None else round(cpu, 2),
        "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "key": stage.key,
        "result": result,
    }
    io_utils.atomic_write_json(self.marker(stage.name), record)
    self.results[stage.name] = result
    self.timings.append({"stage": stage.name, "status": "ran", "seconds": wall, "cpu_seconds": cpu})
    # A stage run beside others took 1/side_by_side of the group's wall time: what its
    # estimate (a share, too) is calibrated against.
    self._eta.finished(stage.estimate, wall / side_by_side)

  def _run_here(self, stage: Stage) -> None:
    start, cpu = time.time(), time.process_time() + jobs.children_cpu()
    try:
      result = stage.run()
    except (StageError, KeyboardInterrupt):
      raise
    except Exception as e:
      # Any failure of a stage's own code stops the demo with one message; the
      # traceback goes to the stage's log.
      log_path = self.log(stage.name)
      os.makedirs(os.path.dirname(log_path), exist_ok=True)
      with open(log_path, "a", encoding="utf-8") as f:
        f.write(traceback.format_exc())
      raise StageError(
          f"stage {stage.name!r} failed: {type(e).__name__}: {e}\n  Traceback in {log_path}"
      ) from e
    wall = time.time() - start
    self._finish(stage, result, wall, time.process_time() + jobs.children_cpu() - cpu)
    self._print_result(stage, wall)

  def _run_commands(self, group: List[Stage]) -> None:
    by_name = {g.name: g for g in group}
    parallel = self.parallel if len(group) > 1 else 1

    def label(name: str) -> str:
      return f"[{name}] " if parallel > 1 else ""

    def on_exit(job: jobs.Job, code: int, wall: float, cpu: Optional[float]) -> None:
      if code != 0:
        tail = jobs.log_tail(job.log_path, indent="      | ")
        raise StageError(
            f"stage {job.name!r} failed (exit code {code}).\n"
            f"  Last lines of its log:\n{tail}\n"
            f"  Full log: {job.log_path}\n"
            f"  Command: cd {job.cwd or os.getcwd()} && {' '.join(job.command)}"
        )
      stage = by_name[job.name]
      try:
        result = stage.after() if stage.after else {}
      except (InputError, OSError, ValueError, KeyError) as e:
        raise StageError(
            f"stage {job.name!r}: its outputs are not what was expected: {e}. "
            f"Log: {job.log_path}"
        ) from e
      self._finish(stage, result, wall, cpu, parallel)
      self._print_result(stage, wall, label(job.name))

    commands = [
        jobs.Job(g.name, g.command(), self.log(g.name), g.echo, label(g.name), self.cwd)
        for g in group
    ]
    jobs.run_jobs(commands, parallel, on_exit)

  def _print_result(self, stage: Stage, wall: float, label: str = "") -> None:
    summary = self.results.get(stage.name, {}).get("summary")
    say(
        f"    {label}done in {progress.format_duration(wall)}" + (f": {summary}" if summary else "")
    )

  def print_timings(self) -> None:
    """Every stage's wall and CPU time, then the total of this run."""
    say("\nstage timings (wall; cpu = user + sys of the stage's processes):")
    for t in self.timings:
      cpu = t.get("cpu_seconds")
      say(
          f"  {t['stage']:40s} {t['status']:7s} {t['seconds']:8.1f} s"
          + (f"  cpu {cpu:8.1f} s" if cpu is not None else "")
      )
    say(f"\ntotal {progress.format_duration(time.time() - self.start_time)} this run.")
