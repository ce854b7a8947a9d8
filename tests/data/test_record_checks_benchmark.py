"""benchmarks/record_checks.py end to end at a toy size: the record checks' cost beside a
bert_tiny training step (docs/pretraining.md quotes its numbers)."""

import json
import math
import os
import sys

import pytest

from tests.support import forkserver
from tests.training.conftest import REPO
from tests.training.conftest import subprocess_env

pytestmark = pytest.mark.slow(seconds=15)


def test_every_reader_and_the_step_are_timed(tmp_path):
  """2 shards of 32 synthetic records, batch 8 x 32, one round: exit 0, and in the JSON a
  positive finite time a batch for each reader and a step, each reader's records a second
  equal to batch / time a batch, and the checks' cost as (checked - unchecked) / step."""
  path = tmp_path / "checks.json"
  result = forkserver.run(
      [sys.executable, os.path.join(REPO, "benchmarks", "record_checks.py")]
      + ["--shards=2", "--records_per_shard=32"]
      + ["--repeats=1", "--batches=2", "--drain=1", "--steps=1", "--warmup_steps=1"]
      + ["--batch_size=8", "--seq_length=32", "--max_predictions=5", f"--json={path}"],
      REPO,
      subprocess_env(),
      timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads(path.read_text())
  seconds = report["seconds"]
  assert set(seconds) == {"unchecked", "scan", "checked", "skip", "numpy", "step"}
  for name, times in seconds.items():
    assert len(times) == 1 and math.isfinite(times[0]) and times[0] > 0, name
  for name, ms in report["ms_per_batch"].items():
    assert ms == pytest.approx(1e3 * seconds[name][0])
    assert report["records_per_s"][name] == pytest.approx(8 / seconds[name][0])
  checks = (seconds["checked"][0] - seconds["unchecked"][0]) / seconds["step"][0]
  assert report["checks_fraction_of_step"] == pytest.approx(checks)
  assert "checks (scan + value checks)" in result.stdout
