"""finetune_glue and finetune_squad under KERAS_BACKEND=jax and torch, held to the bars the
same commands meet under TensorFlow on the generated tasks of tests/end_to_end/test_finetune.py
and tests/end_to_end/test_finetune_squad.py (a tiny model learns them; chance is far below
the bars). The run's model dir is then exported by the TensorFlow export command and served.
Run as `KERAS_BACKEND=jax pytest tests/backends` (and torch): each session tests its own
backend's loop."""

import csv
import json
import os
import subprocess
import sys

import pytest

from recurrent_bert.tasks import sample_tasks as generated_tasks
from tests.backends.support import BACKEND
from tests.backends.support import REPO
from tests.backends.support import backend_env
from tests.end_to_end.test_finetune_squad import SQUAD_FLAGS
from tests.support.finetune_runs import GLUE_FLAGS
from tests.support.finetune_runs import read_json

pytestmark = pytest.mark.skipif(
    BACKEND not in ("jax", "torch"), reason="the JAX and PyTorch loops (KERAS_BACKEND=jax, torch)"
)


def _run(module, backend, *flags, timeout=400):
  return subprocess.run(
      [sys.executable, "-m", module, *flags],
      cwd=REPO,
      env=backend_env(backend),
      capture_output=True,
      text=True,
      timeout=timeout,
  )


@pytest.fixture(scope="module")
def rte(tmp_path_factory):
  """{"vocab", "rte", "run": model_dir} of finetune_glue under this backend, with
  tests/end_to_end/test_finetune.py's flags on its generated task."""
  root = tmp_path_factory.mktemp("rte")
  files = {
      "vocab": generated_tasks.write_vocab(root / "vocab.txt"),
      "rte": generated_tasks.write_rte_folder(root / "RTE", num_train=320, num_dev=70, num_test=11),
      "run": str(root / BACKEND),
  }
  result = _run(
      "recurrent_bert.finetune_glue",
      BACKEND,
      "--task=RTE",
      f"--data_dir={files['rte']}",
      f"--vocab_file={files['vocab']}",
      f"--model_dir={files['run']}",
      *GLUE_FLAGS,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  return files


def test_glue_learns_as_under_tensorflow(rte):
  """tests/end_to_end/test_finetune.py's bar for the TensorFlow run of the same flags and task
  (accuracy >= 0.9 on 70 dev examples; chance ~0.5), and the same files."""
  results = read_json(os.path.join(rte["run"], "eval_results.json"))
  assert results["task"] == "rte" and results["main_metric"] == "accuracy"
  assert results["dev"]["accuracy"] >= 0.9, results
  assert results["dev"]["num_examples"] == 70 and results["num_train_steps"] == 60
  assert results["main_metric_value"] == results["dev"]["accuracy"]
  assert results["seconds_per_train_step"] > 0
  best = read_json(os.path.join(rte["run"], "best", "best_metrics.json"))
  assert best["global_step"] == results["global_step"] in (30, 60)
  assert "model.weights.h5" in os.listdir(os.path.join(rte["run"], "best"))
  assert "ckpt-60.state" in os.listdir(rte["run"])
  for sub in ("train", "eval"):  # TensorBoard, TensorFlow being installed here
    assert any(n.startswith("events") for n in os.listdir(os.path.join(rte["run"], sub)))


def test_export_of_the_model_dir_serves_its_predictions(rte, tmp_path):
  """TensorFlow's export reads the run's best/ weights; the SavedModel, in a fresh
  TensorFlow process, labels the test rows as the run's leaderboard file does."""
  export_dir = str(tmp_path / "export")
  result = _run(
      "recurrent_bert.export",
      "tensorflow",
      f"--model_dir={rte['run']}",
      f"--export_dir={export_dir}",
  )
  assert result.returncode == 0, result.stderr[-3000:]
  with open(os.path.join(rte["rte"], "test.tsv"), encoding="utf-8") as f:
    rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
  script = (
      "import json, sys\n"
      "import tensorflow as tf, tensorflow_text  # noqa\n"
      "rows = json.loads(sys.argv[2])\n"
      "model = tf.saved_model.load(sys.argv[1])\n"
      "out = model.signatures['classify_pair'](text=tf.constant([r[0] for r in rows]),\n"
      "    text_pair=tf.constant([r[1] for r in rows]))\n"
      "print(json.dumps([s.decode() for s in out['label'].numpy()]))\n"
  )
  served = subprocess.run(
      [
          sys.executable,
          "-c",
          script,
          export_dir,
          json.dumps([[r["sentence1"], r["sentence2"]] for r in rows]),
      ],
      cwd=REPO,
      env=backend_env("tensorflow"),
      capture_output=True,
      text=True,
      timeout=300,
  )
  assert served.returncode == 0, served.stderr[-3000:]
  with open(os.path.join(rte["run"], "predictions", "RTE.tsv"), encoding="utf-8") as f:
    predicted = [row[1] for row in list(csv.reader(f, delimiter="\t"))[1:]]
  assert json.loads(served.stdout.strip().splitlines()[-1]) == predicted


def test_squad_points_at_the_marked_token(tmp_path):
  vocab = generated_tasks.write_vocab(tmp_path / "vocab.txt")
  squad = generated_tasks.write_squad_files(tmp_path / "squad", num_train=240, num_dev=50)
  model_dir = str(tmp_path / "squad_model")
  result = _run(
      "recurrent_bert.finetune_squad",
      BACKEND,
      f"--train_file={squad['train']}",
      f"--predict_file={squad['dev']}",
      f"--vocab_file={vocab}",
      f"--model_dir={model_dir}",
      *SQUAD_FLAGS,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  results = read_json(os.path.join(model_dir, "eval_results.json"))
  assert results["main_metric"] == "f1" and results["dev"]["total"] == 50
  assert results["dev"]["exact_match"] >= 80.0, results  # chance: ~1/20 words
  predictions = read_json(os.path.join(model_dir, "predictions", "predictions.json"))
  assert len(predictions) == 50
