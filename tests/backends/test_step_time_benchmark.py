"""benchmarks/step_time.py under this session's backend, where TensorFlow cannot be imported.

The benchmark runs in a fresh process whose `import tensorflow` fails (a `sys.modules`
block, as on the GPU machines, which have no TensorFlow); its model FLOPs are checked
against numbers worked out by hand from the formula in its docstring.
"""

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

from tests.backends.support import BACKEND
from tests.backends.support import REPO
from tests.backends.support import backend_env

SCRIPT = os.path.join(REPO, "benchmarks", "step_time.py")
# Runs the script given as the first argument with `import tensorflow` failing.
NO_TENSORFLOW = (
    "import runpy, sys\n"
    "sys.modules['tensorflow'] = None\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def _load(name: str):
  """benchmarks/<name>.py as a module (step_time imports no Keras: its main() chooses
  the backend)."""
  path = os.path.join(REPO, "benchmarks", f"{name}.py")
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _run(*args, env_backend=BACKEND, **environment):
  return subprocess.run(
      [sys.executable, "-c", NO_TENSORFLOW, SCRIPT, *args],
      env=dict(backend_env(env_backend), **environment),
      cwd=REPO,
      capture_output=True,
      text=True,
      timeout=300,
  )


def test_one_training_step_per_preset_without_tensorflow(tmp_path):
  """bert_tiny, batch 2 x 16, 2 timed fit calls of 2 steps: exit 0, a table of positive
  finite numbers, and the TFLOPs per step of the formula worked by hand; then one step
  under the backend's profiler (--profile_top): its 3 longest ops, printed and kept."""
  path = tmp_path / "rows.json"
  result = _run(
      f"--backend={BACKEND}",
      "--presets=bert_tiny",
      "--batch_size=2",
      "--seq_length=16",
      "--steps=2",
      "--warmup=1",
      "--steps_per_call=2",
      "--peak_tflops=0.001",
      "--profile_top=3",
      "--profile_steps=1",
      f"--json={path}",
  )
  assert result.returncode == 0, result.stderr[-3000:]
  rows = [line for line in result.stdout.splitlines() if line.startswith("| bert_tiny |")]
  assert len(rows) == 1, result.stdout
  # preset | ms/step | tokens/s | ×BERT | ×BERT-rab | TFLOP/step | TFLOP/s | MFU | loss
  cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
  assert cells[3] == "1.00" and cells[4] == "-", cells  # itself; no bert_rab_tiny measured
  numbers = [float(cells[i].rstrip("%")) for i in (1, 2, 5, 6, 7, 8)]
  assert all(math.isfinite(x) and x > 0 for x in numbers), cells
  data = json.loads(path.read_text())
  assert data["backend"] == BACKEND and data["dtype"] == "float32"
  (row,) = data["rows"]
  # B = 2, T = 16, P = ceil(0.15 T) = 3; H = 128, I = 512, L = 2, V = 30522. Per sequence:
  # blocks 2 · (16 · (4H² + 2HI) + 2 · 16² · H) = 2 · (16 · 196608 + 65536) = 6422528,
  # MLM 3 · (H² + HV) = 11769600, NSP H² + 2H = 16640: 18208768; × 6 × B.
  assert row["flops_per_step"] == 218_505_216
  assert row["step_ms"] > 0 and math.isfinite(row["loss"])
  # MFU: model FLOPs per second over the peak (--peak_tflops=0.001, i.e. 1e9 FLOP/s).
  assert row["mfu"] == pytest.approx(row["flops_per_step"] / (row["step_ms"] / 1e3) / 1e9)
  # The first call compiles; the profile (on a CPU: XLA's ops, PyTorch's operators).
  assert row["first_call_s"] > 0
  profile = row["profile"]
  assert profile["steps"] == 1 and len(profile["ops"]) == 3, profile
  assert 0 < sum(op[1] for op in profile["ops"]) <= profile["total_ms"]
  # XLA:CPU may run two ops at once (their durations then add up past the wall time); the
  # time in which any ran is within the traced call.
  assert 0 < profile["busy_ms"] <= profile["traced_ms"]
  assert f"profile of 1 steps, {profile['source']}: busy" in result.stdout
  assert profile["ops"][0][0][:60] in result.stdout


def test_every_preset_is_built_under_the_dtype_flag(tmp_path):
  """Two presets in one process under --dtype=mixed_bfloat16: the second too is built
  under it (Keras' clear_session between presets resets the global policy to float32)."""
  path = tmp_path / "rows.json"
  result = _run(
      f"--backend={BACKEND}",
      "--presets=bert_tiny,bert_rab_tiny",
      "--dtype=mixed_bfloat16",
      "--batch_size=2",
      "--seq_length=16",
      "--steps=1",
      "--warmup=1",
      f"--json={path}",
  )
  assert result.returncode == 0, result.stderr[-3000:]
  rows = json.loads(path.read_text())["rows"]
  assert [row["dtype_policy"] for row in rows] == ["mixed_bfloat16"] * 2, rows


@pytest.mark.skipif(BACKEND != "jax", reason="JAX's persistent compilation cache")
def test_a_compile_only_run_fills_the_cache_a_timed_run_reads(tmp_path):
  """--compile_only compiles bert_tiny's programs into JAX's persistent cache; a timed run
  in another process then compiles none of its warm-up's programs: it reads them back."""
  cache = dict(
      JAX_COMPILATION_CACHE_DIR=str(tmp_path / "cache"),
      JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
  )
  common = ["--presets=bert_tiny", "--batch_size=2", "--seq_length=16", "--steps=1"]
  programs = {}
  for name, extra in (("compile", ["--compile_only"]), ("timed", [])):
    path = tmp_path / f"{name}.json"
    result = _run("--backend=jax", *common, *extra, f"--json={path}", **cache)
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = json.loads(path.read_text())["rows"]
    programs[name] = row["programs"]
    if name == "compile":  # no table: no step was timed
      assert "bert_tiny: compiled, first call" in result.stdout
      assert "| bert_tiny |" not in result.stdout and "step_ms" not in row
  assert programs["compile"]["compiled"] > 0 and programs["compile"]["from_cache"] == 0
  assert programs["timed"] == {"compiled": 0, "from_cache": programs["compile"]["compiled"]}


@pytest.mark.skipif(BACKEND not in ("jax", "torch"), reason="the package's JAX and torch loops")
def test_the_package_loop_trains_from_the_untrained_loss(tmp_path):
  """--trainer=package times the loop rbert-pretrain runs under this backend. Its first
  step's loss is an untrained model's: with weights of scale 0.02 the logits are near 0,
  so the MLM loss is near ln V (V = 30522) and NSP's near ln 2 (the benchmark's schedule
  warms up over 100 steps: three steps leave it there)."""
  path = tmp_path / "rows.json"
  # 80 masked positions: the mean loss of a fresh model varies by about 0.02 between
  # processes (weights, masks and dropout differ), 0.07 at 20 positions.
  common = [f"--backend={BACKEND}", "--presets=bert_tiny", "--batch_size=16", "--seq_length=32"]
  result = _run(*common, "--trainer=package", "--warmup=0", "--steps=3", f"--json={path}")
  assert result.returncode == 0, result.stderr[-3000:]
  data = json.loads(path.read_text())
  name = {"jax": "JAX", "torch": "PyTorch"}[BACKEND]
  assert data["trainer"] == "package" and f"the package's {name} loop" in result.stdout
  (row,) = data["rows"]
  assert row["step_ms"] > 0 and row["dtype_policy"] == "float32"
  first = _run(*common, "--trainer=package", "--warmup=0", "--steps=1", f"--json={path}")
  assert first.returncode == 0, first.stderr[-3000:]
  untrained = math.log(30522) + math.log(2)
  assert json.loads(path.read_text())["rows"][0]["loss"] == pytest.approx(untrained, abs=0.15)
  assert row["loss"] == pytest.approx(untrained, abs=0.2)  # the third step's

  refused = _run(
      "--backend=tensorflow", "--presets=bert_tiny", "--trainer=package", env_backend="tensorflow"
  )
  assert refused.returncode == 2 and refused.stdout == ""
  assert refused.stderr == (
      "step_time.py: --trainer=package: the package's own loops are timed under JAX and "
      "PyTorch; TensorFlow's is tf.distribute's (benchmarks/pretrain_throughput.py)\n"
  )


def test_a_recurrence_is_timed_once_per_implementation_asked_for(tmp_path):
  """--swish_rnn_implementations portable auto: swishrnn_tiny twice, "auto" under the
  preset's own name (where the ratios and the GPU report's goals look for it), the other
  after every preset's own row; an implementation the config does not know is refused in
  one line before anything runs."""
  path = tmp_path / "rows.json"
  result = _run(
      f"--backend={BACKEND}",
      "--presets=swishrnn_tiny,bert_tiny",
      "--swish_rnn_implementations",
      "portable",
      "auto",
      "--batch_size=2",
      "--seq_length=16",
      "--steps=1",
      "--warmup=0",
      f"--json={path}",
  )
  assert result.returncode == 0, result.stderr[-3000:]
  rows = json.loads(path.read_text())["rows"]
  assert [row["preset"] for row in rows] == [
      "swishrnn_tiny",
      "bert_tiny",
      "swishrnn_tiny [portable]",
  ]
  assert all(row["step_ms"] > 0 and row["x_bert"] > 0 for row in rows), rows

  refused = _run("--presets=swishrnn_tiny", "--swish_rnn_implementations", "fast")
  assert refused.returncode == 2 and refused.stdout == ""
  assert refused.stderr.startswith(
      "step_time.py: --swish_rnn_implementations: 'fast': choose from auto, fused,"
  )
  assert refused.stderr.count("\n") == 1


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_unknown_backend_is_one_line_and_exit_2(how):
  args, env_backend = (["--backend=theano"], BACKEND) if how == "flag" else ([], "theano")
  result = _run("--presets=bert_tiny", *args, env_backend=env_backend)
  assert result.returncode == 2
  source = "--backend" if how == "flag" else "KERAS_BACKEND"
  assert result.stderr == f"step_time.py: {source}='theano': choose one of tensorflow, jax, torch\n"
  assert result.stdout == ""


# Worked by hand from the docstring's formula at B = 4, T = 32, P = 5 (tiny: H = 128,
# I = 4H = 512, L = 2, V = 30522): heads per sequence P·(H² + HV) + H² + 2H = 19632640,
# attention 2·T²·H = 262144 per block; multiply-adds per token of one block below.
TINY = {
    # 4H² + 2HI = 65536 + 131072
    "bert_tiny": 6 * 4 * (2 * (32 * 196_608 + 262_144) + 19_632_640),
    # + 8Hu + 8u² + 2uH with u = H = 128: 131072 + 131072 + 32768
    "trans_blstm_2_tiny": 6 * 4 * (2 * (32 * 491_520 + 262_144) + 19_632_640),
    # SMALL: u = 64, no projection: 65536 + 131072 + 65536 + 32768
    "trans_blstm_small_2_tiny": 6 * 4 * (2 * (32 * 294_912 + 262_144) + 19_632_640),
    # no attention, no FFN: 8Hu + 8u² + 2uH = 131072 + 131072 + 32768
    "blstm_tiny": 6 * 4 * (2 * (32 * 294_912) + 19_632_640),
    # 4H² + 3H·d' with d' = 336 (8H/3 to a multiple of 16): 65536 + 129024
    "swishrnn_tiny": 6 * 4 * (2 * (32 * 194_560 + 262_144) + 19_632_640),
}


@pytest.mark.parametrize("preset", sorted(TINY))
def test_model_flops_equal_the_hand_computed_count(preset):
  from recurrent_bert.config import PRESETS

  assert _load("model_flops").model_flops(PRESETS[preset], 4, 32, 5) == TINY[preset]


def test_bert_base_flops_match_six_n_d_plus_attention():
  """bert_base, batch 64 x 128, P = 20: 6 · (matmul weights N = 12 · 7.08M) · 8192 tokens
  + 12·L·T²·H per sequence + the heads, 4.4755 TFLOPs per step."""
  from recurrent_bert.config import PRESETS

  n = 12 * (4 * 768**2 + 2 * 768 * 3072)
  expected = (
      6 * n * 64 * 128
      + 64 * 12 * 12 * 128**2 * 768
      + 6 * 64 * (20 * (768**2 + 768 * 30522) + 768**2 + 2 * 768)
  )
  assert expected == 4_475_455_340_544
  assert _load("model_flops").model_flops(PRESETS["bert_base"], 64, 128, 20) == expected
