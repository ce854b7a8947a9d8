"""`python -m recurrent_bert.demo --backend=jax`: the CI-sized demo with its pretraining and
fine-tuning under JAX, its export and query under TensorFlow; then the --pretraining_only
report (the MLM claims) from the same runs. Run as `KERAS_BACKEND=jax pytest tests/backends`.
The first test also runs in the PyTorch session, with --backend=torch."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from recurrent_bert.demo import pretraining_report
from tests.backends.support import BACKEND
from tests.backends.support import REPO
from tests.backends.support import backend_env
from tests.demo.test_pipeline import CI_FLAGS

only_jax = pytest.mark.skipif(BACKEND != "jax", reason="the JAX loop (KERAS_BACKEND=jax)")
pytestmark = pytest.mark.skipif(
    BACKEND not in ("jax", "torch"), reason="the JAX and PyTorch loops (KERAS_BACKEND=jax, torch)"
)

# One seed, one learning rate, two models of one claim (SwishRNN against BERT-rab): every
# stage and both backends' code paths, at the fewest runs.
OVERRIDES = {
    "--models": "bert_rab,swishrnn",
    "--pretrain_seeds": "1",
    "--finetune_learning_rates": "3e-3",
}


def _demo(tmp_path, overrides, work_dir=None, without_tensorflow=False):
  """The CI-sized demo under --backend=<this session's backend>, with `overrides` ({flag:
  value, or "" for a bare flag}) in place of CI_FLAGS' own, in `work_dir` (default
  tmp_path/demo); with `without_tensorflow`, in processes where `import tensorflow` fails,
  as on a GPU machine. Returns (the work dir, the CompletedProcess)."""
  work_dir = work_dir or tmp_path / "demo"
  kept = [f for f in CI_FLAGS if f.split("=")[0] not in overrides and "tokenizers" not in f]
  env = dict(backend_env("tensorflow"), RECURRENT_BERT_CACHE=str(tmp_path / "cache"))
  if without_tensorflow:
    env = _blocked_tensorflow_env(tmp_path)  # the demo's own process takes --backend's
  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "recurrent_bert.demo",
          f"--work_dir={work_dir}",
          f"--backend={BACKEND}",
      ]
      + kept
      + [f"{name}={value}" if value else name for name, value in overrides.items()],
      cwd=REPO,
      env=env,
      capture_output=True,
      text=True,
      timeout=900,
  )
  return work_dir, result


def _run_demo(tmp_path, overrides, **options):
  """`_demo`, which must succeed; returns its work dir."""
  work_dir, result = _demo(tmp_path, overrides, **options)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  return work_dir


def test_the_demo_under_the_backend_runs_every_stage(tmp_path):
  work_dir = _run_demo(tmp_path, OVERRIDES)
  # Trained under JAX or PyTorch: its checkpoints are ckpt-N.state/ folders, pretraining
  # and fine-tuning.
  for preset in ("bert_rab_tiny", "swishrnn_tiny"):
    assert any(n.endswith(".state") for n in os.listdir(work_dir / "pretrain" / preset / "seed1"))
  finetune_dirs = [root for root, dirs, _ in os.walk(work_dir / "finetune") if "best" in dirs]
  assert len(finetune_dirs) == 2
  assert all(any(n.endswith(".state") for n in os.listdir(d)) for d in finetune_dirs)
  # Exported and queried under TensorFlow.
  assert (work_dir / "export" / "saved_model" / "saved_model.pb").exists()
  answers = json.loads((work_dir / "export" / "answers.json").read_text())
  assert answers
  report_md = (work_dir / "report" / "report.md").read_text()
  assert "SwishRNN-BERT reaches a lower MLM loss than BERT-rab" in report_md

  # --pretraining_only's report of the same pretraining runs.
  inputs = json.loads((work_dir / "report" / "inputs.json").read_text())
  inputs["out_dir"] = str(tmp_path / "claims")
  assert inputs["settings"]["backend"] == BACKEND
  paths = pretraining_report.write_pretraining_report(inputs)
  claims_md = open(paths["claims_md"], encoding="utf-8").read()
  assert f"backend {BACKEND}" in claims_md and "| SwishRNN-BERT | swishrnn_tiny |" in claims_md
  assert paths["claims"] == [
      "inconclusive at this budget: SwishRNN-BERT reaches a lower MLM loss than BERT-rab "
      "(its paper's baseline) at equal steps (held-out records, last step)"
  ]
  assert os.path.getsize(paths["mlm_loss_png"]) > 10_000


@only_jax
def test_a_models_later_seeds_read_its_programs_from_the_compilation_cache(tmp_path):
  """Three seeds of one model, one after the other: the first compiles the XLA programs,
  the other two compile none and read every one from the demo's shared cache."""
  seeds = {"--models": "bert", "--pretrain_seeds": "1,2,3", "--jobs": "1"}
  work_dir = _run_demo(tmp_path, {**seeds, "--pretraining_only": ""})
  counts = {}
  for seed in (1, 2, 3):
    log = (work_dir / "logs" / f"pretrain_bert_tiny_seed{seed}.log").read_text()
    found = re.findall(r"XLA: (\d+) programs compiled, (\d+) read from", log)
    assert len(found) == 1, log[-2000:]
    counts[seed] = tuple(int(n) for n in found[0])
  compiled, from_cache = counts[1]
  assert compiled > 0 and from_cache == 0
  assert counts[2] == counts[3] == (0, compiled)
  assert os.listdir(work_dir / "jax_compilation_cache")


def _blocked_tensorflow_env(tmp_path):
  """The environment of a process where `import tensorflow` fails (as on a GPU machine)."""
  blocked = tmp_path / "without_tensorflow" / "tensorflow"
  blocked.mkdir(parents=True, exist_ok=True)
  (blocked / "__init__.py").write_text('raise ImportError("no TensorFlow here")\n')
  env = dict(backend_env("tensorflow"), RECURRENT_BERT_CACHE=str(tmp_path / "cache"))
  env["PYTHONPATH"] = os.pathsep.join([str(blocked.parent), env["PYTHONPATH"]])
  del env["KERAS_BACKEND"]
  return env


@only_jax
def test_data_made_on_one_machine_is_trained_on_another_without_tensorflow(tmp_path):
  """--data_only makes the corpus, the WordPiece vocabulary and the records (where
  TensorFlow is); the work dir is copied elsewhere. There, without TensorFlow, the recipe
  pilot trains both baselines under two recipes and applies the rule; then --prepared_data
  trains on the data with a recipe other than the one the data was made with (no model was
  trained there yet), running no data stage; a rerun with one more seed reuses the
  finished one; another recipe is then refused. --prepared_data without prepared data
  stops in one line, before anything."""
  flags = {"--models": "bert", "--pretrain_seeds": "1", "--jobs": "1", "--pretraining_only": ""}
  prepared = _run_demo(tmp_path, {**flags, "--data_only": ""}, work_dir=tmp_path / "made")
  made = sorted(os.listdir(prepared / "stages"))
  assert made == ["corpus.json", "eval_data.json", "pretrain_data.json", "vocab.json"]
  assert not (prepared / "pretrain").exists()

  carried = tmp_path / "carried"
  shutil.copytree(prepared, carried)
  shutil.rmtree(tmp_path / "cache")  # the built-in corpus is not read again either

  def run_pilot(recipes):
    pilot = subprocess.run(
        [
            sys.executable,
            "-m",
            "recurrent_bert.demo.recipe_pilot",
            f"--work_dir={carried}",
            "--size=tiny",
            "--steps=4",
            "--seeds=1",
            f"--recipes={recipes}",
            "--jobs=2",
        ],
        cwd=REPO,
        env=_blocked_tensorflow_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    chosen = json.loads((carried / "recipe_pilot" / "recipe.json").read_text())
    assert pilot.returncode == (0 if chosen["chosen"] else 1), pilot.stdout + pilot.stderr
    return pilot.stdout, {s["recipe"]: s for s in chosen["scores"]}, chosen["unigram"]

  shared = "peak 0.001, warm-up 25%, β2 0.98, ε 1e-06, clip 1"
  stdout, scores, unigram = run_pilot("2e-3:0.25,1e-3:0.25:0.98")
  assert [s["runs"] for s in scores.values()] == [2, 2] and unigram > 1
  assert f"| {shared} |" in stdout
  assert len(os.listdir(carried / "recipe_pilot" / "logs")) == 4
  # A finished pilot run keeps its losses, not its weights: a work dir to carry stays small.
  run_dirs = list((carried / "recipe_pilot").glob("*steps/*_seed1"))
  assert len(run_dirs) == 4
  for run_dir in run_dirs:
    names = set(os.listdir(run_dir))
    assert "metrics.jsonl" in names and not {"encoder", "ckpt-4.state"} & names, names
  # Another list: the recipe both lists share is read back, whatever its place in the
  # list (the runs are keyed by the recipe and the steps); only the new one trains.
  stdout, rescored, _ = run_pilot("5e-4:0.1,1e-3:0.25:0.98")
  assert re.findall(r"^\[(\d)/(\d)\] .* under (peak [^:]*):", stdout, re.M) == [
      ("1", "2", "peak 0.0005, warm-up 10%, β2 0.999, ε 1e-06, clip 1"),
      ("2", "2", "peak 0.0005, warm-up 10%, β2 0.999, ε 1e-06, clip 1"),
  ], stdout
  assert rescored[shared] == scores[shared]
  assert len(os.listdir(carried / "recipe_pilot" / "logs")) == 6
  shutil.rmtree(carried / "recipe_pilot")
  recipe = {"--learning_rate": "1e-3", "--adam_beta2": "0.98"}
  markers = carried / "stages"
  for seeds, trained in (("1", {"seed1"}), ("1,2", {"seed2"})):
    before = {m.name: m.stat().st_mtime_ns for m in markers.iterdir()}
    work_dir, result = _demo(
        tmp_path,
        {**flags, **recipe, "--pretrain_seeds": seeds, "--prepared_data": ""},
        work_dir=carried,
        without_tensorflow=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for stage in ("corpus", "vocabulary", "pretraining data", "held-out pretraining data"):
      assert re.search(rf"\] {stage}: .*: reused", result.stdout), (stage, result.stdout)
    written = {m.name for m in markers.iterdir() if before.get(m.name) != m.stat().st_mtime_ns}
    pretrained = {
        n.split("_")[-1].removesuffix(".json") for n in written if n.startswith("pretrain_")
    }
    assert pretrained == trained and "corpus.json" not in written, written
  assert (carried / "report" / "claims.md").exists()
  assert json.loads((carried / "demo_settings.json").read_text())["adam_beta2"] == 0.98
  _, result = _demo(tmp_path, {**flags, "--prepared_data": ""}, work_dir=carried)
  assert result.returncode == 1 and "--learning_rate: 0.001 there, 0.002 now" in result.stdout

  _, result = _demo(tmp_path, {**flags, "--prepared_data": ""}, work_dir=tmp_path / "empty")
  assert result.returncode == 2, result.stdout + result.stderr
  lines = [line for line in result.stderr.splitlines() if line.strip()]
  assert len(lines) == 1 and "--prepared_data" in lines[0] and "corpus" in lines[0], lines
  assert not (tmp_path / "empty" / "corpus").exists()
