"""Commands run as jobs: a pool of subprocesses, each with its log file, and their progress.

Shared by the commands that drive other commands: the demo (`python -m recurrent_bert.demo`)
and the fine-tuning sweep (`rbert-sweep`). A job is one command; `run_jobs` runs up to
`parallel` of them at once, writes each one's output to its log file as it comes, echoes
the lines a job asks for, and calls back as each one exits. Around it: the end of a log for
error messages, the CPU time of finished children, an ETA from estimates calibrated as
jobs finish, and the one duration format of the project's progress lines.

A base module: it imports the standard library only, so any layer may use it.
"""

import dataclasses
import datetime
import math
import os
import queue
import re
import resource
import shlex
import subprocess
import sys
import threading
import time
from typing import Callable, Iterable, List, Optional, Pattern, Sequence, TextIO

from recurrent_bert.progress import format_duration

# absl's log-line prefix ("I1122 20:17:12.123456  1234 loop.py:412] "), cut from echoed lines.
_ABSL_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] ")
# TensorFlow start-up chatter: neither echoed nor in a log tail (it stays in the log).
_NOISE = re.compile(
    r"oneDNN|cuda|cuInit|absl::InitializeLog|AVX|TF_ENABLE_ONEDNN_OPTS|"
    r"cpu_feature_guard|rebuild TensorFlow",
    re.IGNORECASE,
)
# An echoing job that has said nothing for this long gets a "still running" line.
HEARTBEAT_SECONDS = 30.0
# tqdm redraws its bar many times a second; at most one echoed bar per this many seconds.
BAR_SECONDS = 10.0
# A stopped job gets this long to finish after SIGTERM (a training run saves a checkpoint).
STOP_GRACE_SECONDS = 30.0

# TensorFlow's pools size themselves to every core of the machine; jobs run side by side
# get an equal share each instead (TensorFlow reads these at start-up), so together they
# use the cores once. benchmarks/side_by_side.py times it against one job at a time.
THREAD_VARIABLES = ("TF_NUM_INTRAOP_THREADS",)

# on_exit(job, exit code, wall seconds, CPU seconds or None).
ExitCallback = Callable[["Job", int, float, Optional[float]], None]


def python_module(module: str, *args: str) -> List[str]:
  """The command line of `python -m module args...` with this interpreter.

  Args:
    module: a module name, e.g. "recurrent_bert.pretrain".
    *args: its arguments.

  Returns:
    The command as a list.
  """
  return [sys.executable, "-m", module, *args]


def children_cpu() -> float:
  """User + system CPU seconds of this process's finished (waited-for) children."""
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def log_tail(path: str, lines: int = 15, indent: str = "    ") -> str:
  """The end of a log file for an error message.

  Args:
    path: the log file.
    lines: how many of its last non-blank lines (TensorFlow's start-up chatter left out).
    indent: put before every line.

  Returns:
    The lines, each indented, joined by newlines; "(no log)" when the file cannot be read,
    "" when lines <= 0.
  """
  if lines <= 0:
    return ""
  try:
    with open(path, encoding="utf-8", errors="replace") as f:
      content = [line.rstrip() for line in f if line.strip() and not _NOISE.search(line)]
  except OSError:
    return indent + "(no log)"
  return "\n".join(indent + line for line in content[-lines:])


class Eta:
  """Time left: the estimates of the jobs left, scaled by how the finished ones compared.

  The scale is (actual seconds + prior) / (estimated seconds + prior) over the jobs that
  finished: a prior keeps a few short jobs from swinging it (and makes it 1 before any has
  finished); without a prior there is no estimate until a job has finished.
  """

  def __init__(self, prior_seconds: float = 0.0):
    """Starts with no finished job.

    Args:
      prior_seconds: the weight of the initial scale of 1, in seconds of work.
    """
    self._prior = prior_seconds
    self._estimated = 0.0
    self._actual = 0.0

  def finished(self, estimate: float, seconds: float) -> None:
    """Records a job that ran now: what it was expected to take and what it took."""
    self._estimated += estimate
    self._actual += seconds

  def seconds_left(self, estimates: Sequence[float], parallel: int = 1) -> Optional[float]:
    """Estimated wall time of the jobs left.

    Args:
      estimates: the estimate of every job left (any unit the finished jobs used).
      parallel: how many of them run at a time.

    Returns:
      Seconds; None while nothing calibrates the estimates (no prior, no finished job).
    """
    if not estimates:
      return 0.0
    if self._estimated + self._prior <= 0:
      return None
    scale = (self._actual + self._prior) / (self._estimated + self._prior)
    return scale * math.fsum(estimates) / min(max(1, parallel), len(estimates))


@dataclasses.dataclass
class Job:
  """One command of a pool.

  Attributes:
    name: names the job in the callbacks (unique within a pool).
    command: the command line.
    log_path: the file that receives its output (appended to; directories made).
    echo: lines of its output to print as they come (absl's prefix cut); None for none.
      An echoing job also gets a "still running" line after HEARTBEAT_SECONDS of silence.
    label: printed before each echoed line (which job said it, when several run).
    cwd: its working directory; None for this process's.
  """

  name: str
  command: List[str]
  log_path: str
  echo: Optional[Pattern[str]] = None
  label: str = ""
  cwd: Optional[str] = None


class _Process:
  """A running job: its output read as it comes (a thread), logged and echoed by `poll`.

  tqdm's carriage returns split lines too, so a progress bar's updates are lines.
  """

  def __init__(self, job: Job, out: TextIO, threads: Optional[int] = None):
    self.job = job
    self._out = out
    self._lines: queue.Queue[Optional[str]] = queue.Queue()
    os.makedirs(os.path.dirname(os.path.abspath(job.log_path)), exist_ok=True)
    self._log = open(job.log_path, "a", encoding="utf-8")
    cwd = job.cwd or os.getcwd()
    self._log.write(
        f"\n=== {datetime.datetime.now().isoformat(timespec='seconds')} "
        f"cd {shlex.quote(cwd)} && {shlex.join(job.command)}\n"
    )
    self._log.flush()
    # Unbuffered: the echoed progress must come when it is printed, not at exit.
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if threads is not None:
      # A share the user set in the environment wins.
      env.update({name: str(threads) for name in THREAD_VARIABLES if name not in os.environ})
    self.start_time = time.time()
    try:
      self.process = subprocess.Popen(
          job.command,
          cwd=cwd,
          env=env,
          stdout=subprocess.PIPE,
          stderr=subprocess.STDOUT,
          stdin=subprocess.DEVNULL,
      )
    except OSError:
      self._log.close()
      raise
    # User + system CPU seconds of the process and the children it waited for, once it
    # has exited (jobs side by side each get their own, unlike children_cpu()).
    self.cpu_seconds: Optional[float] = None
    self._last_echo = self.start_time
    self._last_bar = 0.0
    threading.Thread(target=self._read, daemon=True).start()

  def _read(self) -> None:
    buffer = b""
    stream = self.process.stdout
    while True:
      chunk = stream.read1(65536)
      if not chunk:
        break
      buffer += chunk
      parts = re.split(rb"[\r\n]", buffer)
      buffer = parts.pop()
      for part in parts:
        self._lines.put(part.decode("utf-8", "replace"))
    if buffer:
      self._lines.put(buffer.decode("utf-8", "replace"))
    self._lines.put(None)

  def _say(self, text: str) -> None:
    print(f"    {self.job.label}{text}", file=self._out, flush=True)

  def _handle(self, line: str) -> None:
    self._log.write(line + "\n")
    if self.job.echo is None:
      return
    text = _ABSL_PREFIX.sub("", line).rstrip()
    if not text.strip() or _NOISE.search(text) or not self.job.echo.search(text.strip()):
      return
    now = time.time()
    if "%|" in text:  # a tqdm bar
      if now - self._last_bar < BAR_SECONDS and "100%" not in text:
        return
      self._last_bar = now
    self._last_echo = now
    self._say(text)

  def poll(self, timeout: float) -> Optional[int]:
    """Handles the output for up to `timeout` seconds.

    Args:
      timeout: seconds to wait at most.

    Returns:
      The exit code once the job has exited (its log closed), else None.
    """
    deadline = time.time() + timeout
    while True:
      try:
        line = self._lines.get(timeout=max(0.0, min(1.0, deadline - time.time())))
      except queue.Empty:
        line = ""
      if line is None:
        code = self._wait()
        self._log.write(f"[exit code {code} after {time.time() - self.start_time:.1f} s]\n")
        self._log.close()
        return code
      if line:
        self._handle(line)
      now = time.time()
      if self.job.echo is not None and now - self._last_echo >= HEARTBEAT_SECONDS:
        self._last_echo = now
        self._say(
            f"... still running ({format_duration(now - self.start_time)}, log: "
            f"{self.job.log_path})"
        )
      if now >= deadline:
        return None

  def _wait(self) -> int:
    """Reaps the process with its own resource usage (`cpu_seconds`), then its code."""
    try:
      _, status, usage = os.wait4(self.process.pid, 0)
    except ChildProcessError:  # already reaped elsewhere: no usage of its own
      return self.process.wait()
    self.cpu_seconds = usage.ru_utime + usage.ru_stime
    self.process.returncode = os.waitstatus_to_exitcode(status)
    return self.process.returncode

  def terminate(self) -> None:
    if self.process.poll() is None:
      self.process.terminate()

  def wait_or_kill(self) -> None:
    try:
      self.process.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
      self.process.kill()
      self.process.wait()
    self._log.close()


def thread_share(parallel: int) -> Optional[int]:
  """Threads each of `parallel` jobs side by side gets (None: one job, the whole machine)."""
  if parallel <= 1:
    return None
  return max(1, usable_cores() // parallel)


def usable_cores() -> int:
  """The cores this process may run on (its CPU affinity where the OS has one)."""
  if hasattr(os, "sched_getaffinity"):
    return len(os.sched_getaffinity(0))
  return os.cpu_count() or 1


def run_jobs(
    jobs: Iterable[Job], parallel: int, on_exit: ExitCallback, out: Optional[TextIO] = None
) -> None:
  """Runs jobs, up to `parallel` at a time, until all have exited.

  The next job is taken from `jobs` only when a slot is free, so a generator can still
  decide, from the exits so far, what to run next. Whatever `on_exit` raises (or Ctrl-C,
  or any other exception) stops the jobs still running: SIGTERM, STOP_GRACE_SECONDS to
  finish, then SIGKILL; the exception goes on to the caller.

  Args:
    jobs: the jobs, in the order they are started.
    parallel: jobs at a time (>= 1); when more than one, each gets an equal share of the
      cores (`thread_share`).
    on_exit: called as each job exits, failed or not, with the job, its exit code, its
      wall seconds and its CPU seconds (user + system of the job's process; None if
      unknown).
    out: where echoed lines go (default: sys.stdout at call time).
  """
  out = out or sys.stdout
  pending = iter(jobs)
  running: List[_Process] = []
  exhausted = False
  try:
    while True:
      while not exhausted and len(running) < parallel:
        job = next(pending, None)
        if job is None:
          exhausted = True
        else:
          running.append(_Process(job, out, thread_share(parallel)))
      if not running:
        return
      for process in list(running):
        code = process.poll(timeout=0.2 if len(running) > 1 else 5.0)
        if code is None:
          continue
        running.remove(process)
        on_exit(process.job, code, time.time() - process.start_time, process.cpu_seconds)
  finally:
    for process in running:
      process.terminate()
    for process in running:
      process.wait_or_kill()
