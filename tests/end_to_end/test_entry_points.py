"""The summary and smoke commands, run as a user runs them (fresh processes)."""

import json
import os
import sys

import pytest

from tests.support import forkserver

pytestmark = pytest.mark.slow(seconds=30)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  return forkserver.run([sys.executable, "-m", *args], REPO, env, timeout=600)


def test_summary_prints_paper_sized_counts():
  result = _run("recurrent_bert.summary", "--preset", "trans_blstm_2_base", "--layers")
  assert result.returncode == 0, result.stderr
  row = json.loads(result.stdout)
  assert row["preset"] == "trans_blstm_2_base"
  assert abs(row["params"] - 237e6) / 237e6 < 0.02  # TRANS-BLSTM paper, Table 1
  assert sum(row["layers"].values()) == row["params"]


def test_summary_all_lists_every_preset_once():
  result = _run("recurrent_bert.summary", "--all")
  assert result.returncode == 0, result.stderr
  rows = [json.loads(line) for line in result.stdout.splitlines()]
  assert len(rows) == 32 and len({r["preset"] for r in rows}) == 32


def test_summary_bad_preset_names_the_flag():
  result = _run("recurrent_bert.summary", "--preset", "bert_huge")
  assert result.returncode != 0
  assert "--preset" in result.stderr and "bert_huge" in result.stderr


def test_smoke_builds_and_runs_every_tiny_preset():
  result = _run("recurrent_bert.smoke", "--sizes=tiny", "--seq_length=12")
  assert result.returncode == 0, result.stderr[-3000:]
  for family in (
      "bert",
      "bert_rab",
      "trans_blstm_1",
      "trans_blstm_2",
      "trans_blstm_small_1",
      "trans_blstm_small_2",
      "swishrnn",
      "blstm",
  ):
    assert f"{family}_tiny " in result.stdout
  assert "all 8 presets" in result.stdout
