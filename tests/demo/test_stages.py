"""recurrent_bert.demo.stages: markers, reuse, --redo and failures, on stages of a moment."""

import json
import os
import re
import sys

import pytest

from recurrent_bert.demo import stages


def _counting_stage(name, counts, key=None, **kwargs):
  def run():
    counts[name] = counts.get(name, 0) + 1
    return {"summary": f"{name} ran"}

  return stages.Stage(name, f"stage {name}", 1.0, key=key or {}, run=run, **kwargs)


def _python(code):
  return lambda: [sys.executable, "-c", code]


def test_finished_stages_are_reused_until_their_key_changes(tmp_path, capsys):
  counts = {}
  plan = [_counting_stage("a", counts), _counting_stage("b", counts, key={"runs": [1]})]
  stages.StageRunner(str(tmp_path)).run(plan)
  assert counts == {"a": 1, "b": 1}
  record = json.loads((tmp_path / "stages" / "a.json").read_text())
  assert record["result"] == {"summary": "a ran"} and record["seconds"] >= 0
  again = stages.StageRunner(str(tmp_path))
  again.run([_counting_stage("a", counts), _counting_stage("b", counts, key={"runs": [1, 2]})])
  assert counts == {"a": 1, "b": 2}
  assert again.results["a"] == {"summary": "a ran"}
  assert [t["status"] for t in again.timings] == ["reused", "ran"]
  out = capsys.readouterr().out
  assert "[1/2] stage a: reused" in out and re.search(r"\[2/2\] stage b  \(elapsed .*ETA ~", out)


def test_redo_drops_the_marker_and_the_output_dir(tmp_path):
  counts = {}
  output_dir = tmp_path / "model"

  def plan():
    return [_counting_stage("a", counts), _counting_stage("b", counts, output_dir=str(output_dir))]

  stages.StageRunner(str(tmp_path)).run(plan())
  output_dir.mkdir()
  (output_dir / "ckpt").write_text("old")
  runner = stages.StageRunner(str(tmp_path))
  runner.forget(["b"], plan())
  assert not output_dir.exists()
  runner.run(plan())
  assert counts == {"a": 1, "b": 2}
  with pytest.raises(stages.StageError, match=r"--redo: no stage \['c'\]; the stages are: a, b"):
    runner.forget(["c"], plan())


def test_a_failing_stage_names_itself_and_its_log(tmp_path):
  def broken():
    raise ValueError("no documents")

  runner = stages.StageRunner(str(tmp_path))
  with pytest.raises(stages.StageError, match="stage 'x' failed: ValueError: no documents"):
    runner.run([stages.Stage("x", "x", 1.0, run=broken)])
  assert "Traceback" in (tmp_path / "logs" / "x.log").read_text()
  assert not (tmp_path / "stages" / "x.json").exists()

  failing = stages.Stage(
      "y:1",
      "y",
      1.0,
      command=_python("import sys; print('step 1/2'); print('it broke'); sys.exit(3)"),
  )
  with pytest.raises(stages.StageError) as error:
    runner.run([failing])
  message = str(error.value)
  assert "stage 'y:1' failed (exit code 3)" in message and "      | it broke" in message
  assert str(tmp_path / "logs" / "y_1.log") in message


def test_command_stages_of_a_group_run_side_by_side(tmp_path, capsys):
  def stage(i):
    return stages.Stage(
        f"run:{i}",
        f"run {i}",
        1.0,
        command=_python(f"print('step {i}/3')"),
        echo=re.compile(r"^step"),
        after=lambda: {"summary": "ok"},
        parallel_group="runs",
    )

  runner = stages.StageRunner(str(tmp_path), parallel=2, cwd=str(tmp_path))
  runner.run([stage(1), stage(2), stage(3)])
  out = capsys.readouterr().out
  assert "[1/3] 3 runs, 2 at a time: runs" in out
  for i in (1, 2, 3):
    assert f"    [run:{i}] step {i}/3" in out and f"[run:{i}] done in" in out
  assert sorted(runner.results) == ["run:1", "run:2", "run:3"]
  # Side by side, each run still has its own CPU time, and its share of the group's
  # wall time calibrates the ETA.
  assert all(t["cpu_seconds"] is not None for t in runner.timings)
  assert os.path.isfile(runner.marker("run:3"))
