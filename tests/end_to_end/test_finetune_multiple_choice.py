"""finetune_multiple_choice end to end on a generated SWAG-format task a tiny model learns.

The task (tasks/sample_tasks.py `write_swag_folder`): sent1 holds a marker word, the right
ending the same marker and the other three endings the other one, so a choice can only be
scored by reading context and ending together. Runs are real subprocesses of the entry
point (bert_tiny and swishrnn_tiny, side by side); their results are checked against
independent paths: accuracy recomputed from the prediction file and the labels of
val.csv read with the csv module, prediction under MirroredStrategy over 2 logical CPUs,
and the exported SavedModel served in a process that imports only TF and TF Text against
the in-process Keras model on features packed by the numpy pipeline.
"""

import csv
import json
import os
import sys

import numpy as np
import pytest

from recurrent_bert.tasks import sample_tasks
from tests.support import export_checks
from tests.support import forkserver
from tests.support.finetune_runs import REPO
from tests.support.finetune_runs import read_json
from tests.support.finetune_runs import run_entry

pytestmark = pytest.mark.slow(seconds=90)

MODULE = "recurrent_bert.finetune_multiple_choice"
SEQ_LEN = 16
FAMILIES = ("bert_tiny", "swishrnn_tiny")
RUN_FLAGS = [
    f"--max_seq_length={SEQ_LEN}",
    "--train_batch_size=16",
    "--learning_rate=2e-3",
    "--max_train_steps=100",
    "--warmup_steps=10",
    "--log_steps=25",
    "--eval_batch_size=32",
]


def _env():
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
  env.pop("TF_CONFIG", None)
  return env


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("mc")
  vocab = sample_tasks.write_vocab(root / "vocab.txt")
  swag_dir = sample_tasks.write_swag_folder(root / "swag", num_train=320, num_dev=60, num_test=7)
  return {"root": root, "vocab": vocab, "swag": swag_dir}


@pytest.fixture(scope="module")
def runs(data):
  """{family: model_dir} of one train_and_eval run per family, run side by side."""
  model_dirs, processes = {}, {}
  for family in FAMILIES:
    model_dirs[family] = str(data["root"] / family)
    processes[family] = forkserver.start(
        [
            sys.executable,
            "-m",
            MODULE,
            f"--data_dir={data['swag']}",
            f"--vocab_file={data['vocab']}",
            f"--model_dir={model_dirs[family]}",
            f"--model_config={family}",
            *RUN_FLAGS,
        ],
        cwd=REPO,
        env=_env(),
    )
  for family, process in processes.items():
    stdout, stderr = process.communicate(timeout=400)
    assert process.returncode == 0, (family, stderr[-4000:])
    assert "dev: accuracy=" in stdout
  return model_dirs


def _dev_labels(swag_dir):
  with open(os.path.join(swag_dir, "val.csv"), encoding="utf-8", newline="") as f:
    rows = list(csv.DictReader(f))
  return {row[""]: int(row["label"]) for row in rows}


def _predictions(model_dir, split):
  path = os.path.join(model_dir, "predictions", f"{split}_predictions.jsonl")
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


@pytest.mark.parametrize("family", FAMILIES)
def test_learns_the_generated_task_and_reports_what_its_predictions_say(runs, data, family):
  model_dir = runs[family]
  results = read_json(os.path.join(model_dir, "eval_results.json"))
  assert results["task"] == "swag" and results["main_metric"] == "accuracy"
  # Chance is 0.25: the right ending's marker matches the context's.
  assert results["dev"]["accuracy"] >= 0.95, results
  assert results["dev"]["num_examples"] == 60
  print(
      f"{family}: dev accuracy {results['dev']['accuracy']:.3f}, "
      f"{results['seconds_per_train_step']:.3f} s/step"
  )
  labels = _dev_labels(data["swag"])
  rows = _predictions(model_dir, "dev")
  assert [r["id"] for r in rows] == list(labels)
  recomputed = np.mean([r["prediction"] == labels[r["id"]] for r in rows])
  assert results["dev"]["accuracy"] == pytest.approx(recomputed, abs=1e-12)
  for r in rows:
    assert len(r["probabilities"]) == 4 and sum(r["probabilities"]) == pytest.approx(1, abs=1e-5)
    assert r["prediction"] == int(np.argmax(r["probabilities"]))
  test_rows = _predictions(model_dir, "test")
  assert [r["id"] for r in test_rows] == [str(i) for i in range(7)]
  info = read_json(os.path.join(model_dir, "task_info.json"))
  assert info["kind"] == "multiple_choice" and info["max_seq_length"] == SEQ_LEN


def test_mirrored_prediction_equals_the_default_strategys(runs, data):
  """Predict under MirroredStrategy (2 replicas, padded batches) = the training run's files."""
  model_dir = runs["bert_tiny"]
  default = _predictions(model_dir, "dev")
  run_entry(
      MODULE,
      "--mode=predict",
      f"--data_dir={data['swag']}",
      f"--model_dir={model_dir}",
      "--distribution_strategy=mirrored",
      "--num_cpu_devices=2",
      "--eval_batch_size=6",
  )  # 60 dev rows: 10 batches of 3 per replica; 7 test rows: padded to 12
  mirrored = _predictions(model_dir, "dev")
  assert [r["prediction"] for r in mirrored] == [r["prediction"] for r in default]
  np.testing.assert_allclose(
      [r["probabilities"] for r in mirrored], [r["probabilities"] for r in default], atol=2e-6
  )
  assert len(_predictions(model_dir, "test")) == 7


SERVE = r"""
import json, sys
sys.modules["recurrent_bert"] = None
import tensorflow as tf, tensorflow_text  # noqa
model = tf.saved_model.load(sys.argv[1])
request = json.loads(sys.argv[2])
out = {}
for name in ("choose", "serving_default"):
  result = model.signatures[name](context=tf.constant(request["context"]),
                                  endings=tf.constant(request["endings"]))
  out[name] = {k: v.numpy().tolist() for k, v in result.items()}
print(json.dumps(out))
"""


def test_export_serves_choices_in_a_tf_only_process(runs, tmp_path):
  from recurrent_bert import saving
  from recurrent_bert.data.tokenization import BertWordpieceTokenizer
  from recurrent_bert.tasks.multiple_choice import adapter as multiple_choice
  from recurrent_bert.tasks.multiple_choice.swag import ChoiceExample

  model_dir = runs["bert_tiny"]
  export_dir = str(tmp_path / "export")
  result = run_entry(
      "recurrent_bert.export", f"--model_dir={model_dir}", f"--export_dir={export_dir}"
  )
  assert "choose(" in result.stdout
  # Laid out as the generated sent1 and sent2 + ending; example 1's first ending is longer
  # than max_seq_length allows: truncated as in training.
  request = {
      "context": ["the cat yes runs old", "old red no bird house"],
      "endings": [
          ["the dog cat no walks", "old tree bird yes cold", "the road fish no", "red red cat no"],
          ["walks finds cat yes" + " walks" * 10, "walks dog fish no runs", "a b yes", "c d yes"],
      ],
  }
  served = export_checks.run_fresh_python(SERVE, export_dir, json.dumps(request))

  stored = saving.open_model(model_dir)
  model, info = stored.load_task_model()
  directory = stored.config_dir
  tokenizer = BertWordpieceTokenizer(os.path.join(directory, "vocab.txt"))
  examples = [
      ChoiceExample(str(i), context, tuple(endings), None)
      for i, (context, endings) in enumerate(zip(request["context"], request["endings"]))
  ]
  features = multiple_choice.convert_choice_examples(examples, tokenizer, info.max_seq_length)
  logits = model(
      {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}, training=False
  ).numpy()
  probabilities = multiple_choice.softmax(logits)
  for name in ("choose", "serving_default"):
    out = served[name]
    np.testing.assert_allclose(out["probabilities"], probabilities, atol=1e-5)
    assert out["choice"] == probabilities.argmax(-1).tolist() == [1, 1]
    ids = np.array(out["input_ids"])
    assert ids.shape[:2] == (2, 4)
    np.testing.assert_array_equal(ids, features["input_ids"][:, :, : ids.shape[2]])


def test_bad_input_exits_2_with_one_line_naming_file_and_line(data, tmp_path):
  folder = tmp_path / "swag"
  folder.mkdir()
  for name in ("train.csv", "val.csv"):
    text = open(os.path.join(data["swag"], name), encoding="utf-8").read()
    lines = text.splitlines()
    if name == "val.csv":
      lines[6] = lines[6][: lines[6].rindex(",")] + ",4"  # label out of range, line 7
    (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
  result = run_entry(
      MODULE,
      f"--data_dir={folder}",
      f"--vocab_file={data['vocab']}",
      f"--model_dir={tmp_path / 'model'}",
      "--model_config=bert_tiny",
      f"--max_seq_length={SEQ_LEN}",
      check=False,
      timeout=120,
  )
  assert result.returncode == 2, result.stderr[-2000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith(f"error: {folder / 'val.csv'}:7: label 4 is out of range"), last
  assert not os.path.exists(tmp_path / "model" / "checkpoint")


# BERT §4.4, written out independently of configs/finetune/swag_bert.flags.
PAPER_SWAG = {"learning_rate": 2e-5, "train_batch_size": 16, "num_train_epochs": 3.0}


def test_swag_flagfile_carries_the_papers_protocol():
  script = r"""
import json, sys
from absl import flags
import recurrent_bert.finetune_multiple_choice  # noqa: F401  defines the flags
flags.FLAGS(["prog", "--flagfile=" + sys.argv[1], "--model_dir=/nonexistent",
             "--data_dir=/nonexistent"])
print(json.dumps({k: flags.FLAGS[k].value for k in sys.argv[2:]}))
"""
  names = [*PAPER_SWAG, "max_seq_length", "task"]
  path = os.path.join(REPO, "configs", "finetune", "swag_bert.flags")
  result = forkserver.run(
      [sys.executable, "-c", script, path, *names], cwd=REPO, env=_env(), timeout=120
  )
  assert result.returncode == 0, result.stderr[-2000:]
  values = json.loads(result.stdout.strip().splitlines()[-1])
  assert values == {**PAPER_SWAG, "max_seq_length": 128, "task": "swag"}


def test_jsonl_task_with_skip_bad_rows(data, tmp_path):
  """--task=jsonl: the three files, a bad line skipped and counted, predictions per file."""
  rows = sample_tasks.choice_examples(24, seed=7)
  files = {}
  for name, part in (("train", rows[:16]), ("dev", rows[16:22]), ("test", rows[22:])):
    lines = [
        json.dumps(
            {"id": f"{name}{i}", "context": a, "choices": [f"{b} {e}" for e in endings]}
            | ({} if name == "test" else {"label": label})
        )
        for i, (a, b, endings, label) in enumerate(part)
    ]
    if name == "dev":
      lines.insert(
          2, json.dumps({"id": "bad", "context": "x", "choices": ["a", "b", "c", "d"], "label": 9})
      )
    files[name] = tmp_path / f"{name}.jsonl"
    files[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
  model_dir = tmp_path / "model"
  run_entry(
      MODULE,
      "--task=jsonl",
      f"--train_file={files['train']}",
      f"--eval_file={files['dev']}",
      f"--predict_file={files['test']}",
      "--skip_bad_rows",
      f"--vocab_file={data['vocab']}",
      f"--model_dir={model_dir}",
      "--model_config=bert_tiny",
      f"--max_seq_length={SEQ_LEN}",
      "--train_batch_size=8",
      "--max_train_steps=2",
  )
  assert read_json(model_dir / "skipped_rows.json") == {
      str(files["train"]): 0,
      str(files["dev"]): 1,
      str(files["test"]): 0,
  }
  assert read_json(model_dir / "eval_results.json")["dev"]["num_examples"] == 6
  assert [r["id"] for r in _predictions(str(model_dir), "dev")] == [f"dev{i}" for i in range(6)]
  assert [r["id"] for r in _predictions(str(model_dir), "test")] == ["test0", "test1"]
