"""recurrent_bert.jobs: the subprocess pool, the log tail, the ETA and the duration format."""

import io
import re
import sys

import pytest

from recurrent_bert import jobs
from recurrent_bert import progress


def _python(code):
  return [sys.executable, "-c", code]


def test_format_duration():
  assert progress.format_duration(7) == "7s"
  assert progress.format_duration(73) == "1m13s"
  assert progress.format_duration(4000) == "1h06m40s"
  assert progress.format_duration(-3) == "0s"
  assert progress.format_duration(None) == progress.format_duration(float("nan")) == "?"


def test_log_tail_skips_blank_lines_and_tensorflow_chatter(tmp_path):
  log = tmp_path / "log.txt"
  log.write_text("one\n\ntwo\nI tensorflow/cpu_feature_guard.cc: AVX2 FMA\nthree\n\n")
  assert jobs.log_tail(str(log), 2) == "    two\n    three"
  assert jobs.log_tail(str(log), 5, indent="| ") == "| one\n| two\n| three"
  assert jobs.log_tail(str(log), 0) == ""
  assert jobs.log_tail(str(tmp_path / "missing.txt")) == "    (no log)"


def test_eta_scales_the_estimates_by_the_finished_jobs():
  eta = jobs.Eta()
  assert eta.seconds_left([1.0, 1.0]) is None  # nothing calibrates it yet
  eta.finished(1.0, 10.0)
  eta.finished(1.0, 20.0)
  assert eta.seconds_left([1.0] * 4, parallel=2) == pytest.approx(30.0)
  assert eta.seconds_left([1.0], parallel=2) == pytest.approx(15.0)
  assert eta.seconds_left([]) == 0.0
  with_prior = jobs.Eta(prior_seconds=100.0)
  assert with_prior.seconds_left([30.0, 20.0]) == pytest.approx(50.0)  # scale 1
  with_prior.finished(50.0, 150.0)
  assert with_prior.seconds_left([10.0]) == pytest.approx(10.0 * 250.0 / 150.0)


def test_run_jobs_logs_echoes_and_reports_every_exit(tmp_path):
  out = io.StringIO()
  exits = []
  pool = [
      jobs.Job(
          "a",
          _python("print('step 1/2'); print('noise'); print('step 2/2')"),
          str(tmp_path / "logs" / "a.log"),
          echo=re.compile(r"^step"),
          label="[a] ",
      ),
      jobs.Job(
          "b",
          _python("import sys; print('bad input'); sys.exit(2)"),
          str(tmp_path / "logs" / "b.log"),
      ),
  ]
  jobs.run_jobs(pool, 1, lambda job, code, wall, cpu: exits.append((job.name, code, cpu)), out=out)
  assert [(name, code) for name, code, _ in exits] == [("a", 0), ("b", 2)]
  assert all(cpu is not None and cpu >= 0 for _, _, cpu in exits)  # one at a time
  assert out.getvalue().splitlines() == ["    [a] step 1/2", "    [a] step 2/2"]
  log = (tmp_path / "logs" / "a.log").read_text()
  assert "noise" in log and "[exit code 0 after" in log and "=== " in log
  assert "bad input" in (tmp_path / "logs" / "b.log").read_text()


def test_run_jobs_takes_the_next_job_only_when_a_slot_is_free(tmp_path):
  exits = []

  def pool():
    for name in ("first", "second"):
      # The second job is decided after the first one's exit has been reported.
      if exits:
        name = "after_" + exits[-1]
      yield jobs.Job(name, _python("pass"), str(tmp_path / f"{name}.log"))

  jobs.run_jobs(pool(), 1, lambda job, code, wall, cpu: exits.append(job.name))
  assert exits == ["first", "after_first"]


def test_run_jobs_side_by_side_and_an_exception_stops_the_rest(tmp_path):
  exits = []
  pool = [jobs.Job(f"j{i}", _python("pass"), str(tmp_path / f"j{i}.log")) for i in range(3)]
  jobs.run_jobs(pool, 2, lambda job, code, wall, cpu: exits.append((job.name, cpu)))
  assert sorted(name for name, _ in exits) == ["j0", "j1", "j2"]
  assert all(cpu is not None for _, cpu in exits)  # each job's own usage

  sleeper = jobs.Job(
      "sleeper", _python("import time; time.sleep(60)"), str(tmp_path / "sleeper.log")
  )
  quick = jobs.Job("quick", _python("pass"), str(tmp_path / "quick.log"))

  def fail(job, code, wall, cpu):
    raise RuntimeError(f"{job.name} exited")

  with pytest.raises(RuntimeError, match="quick exited"):
    jobs.run_jobs([sleeper, quick], 2, fail)
  # The sleeper was stopped (SIGTERM) rather than waited for.
  assert "[exit code" not in (tmp_path / "sleeper.log").read_text()


def _burner(seconds):
  """A job that spends `seconds` of CPU, then prints the thread share it was given."""
  return _python(
      "import os, time\n"
      "start = time.process_time()\n"
      f"while time.process_time() - start < {seconds}: pass\n"
      "print('threads', os.environ.get('TF_NUM_INTRAOP_THREADS'))"
  )


def test_jobs_side_by_side_each_report_their_own_cpu_and_get_a_share_of_the_cores(
    tmp_path, monkeypatch
):
  monkeypatch.delenv("TF_NUM_INTRAOP_THREADS", raising=False)
  exits = {}

  def on_exit(job, code, wall, cpu):
    exits[job.name] = (code, cpu)

  burn = {"short": 0.3, "long": 0.9}
  pool = [jobs.Job(n, _burner(s), str(tmp_path / f"{n}.log")) for n, s in burn.items()]
  jobs.run_jobs(pool, parallel=2, on_exit=on_exit, out=io.StringIO())
  # The CPU each process spent on itself (the loop's own clock), not the pair's total.
  for name, seconds in burn.items():
    code, cpu = exits[name]
    assert code == 0
    assert seconds <= cpu < seconds + 0.5, (name, cpu)
  share = max(1, jobs.usable_cores() // 2)
  assert jobs.thread_share(2) == share
  assert f"threads {share}" in (tmp_path / "short.log").read_text()
  # Alone, a job has the whole machine; a share set by the user wins.
  jobs.run_jobs(
      [jobs.Job("alone", _burner(0), str(tmp_path / "alone.log"))], 1, on_exit, io.StringIO()
  )
  assert "threads None" in (tmp_path / "alone.log").read_text()
  monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "7")
  jobs.run_jobs(
      [jobs.Job(n, _burner(0), str(tmp_path / f"u{n}.log")) for n in "ab"],
      2,
      on_exit,
      io.StringIO(),
  )
  assert "threads 7" in (tmp_path / "ua.log").read_text()
