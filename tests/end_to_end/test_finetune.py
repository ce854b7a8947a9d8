"""finetune_glue end to end on generated tasks a tiny model can learn (finetune_squad's
runs are in test_finetune_squad.py).

The runs are real subprocesses of the entry points (flags, feature caches, the training
loop, best-checkpoint keeping, prediction files, export). Their reported metrics are
checked against independent paths: the in-process Keras model on features packed by the
numpy pipeline, metrics recomputed from the written prediction files, and a run under
MirroredStrategy over 2 logical CPUs.
"""

import csv
import json
import os
import sys

import numpy as np
import pytest

from recurrent_bert.tasks import sample_tasks as generated_tasks
from tests.support import export_checks
from tests.support import forkserver
from tests.support.finetune_runs import GLUE_FLAGS
from tests.support.finetune_runs import REPO
from tests.support.finetune_runs import SEQ_LEN
from tests.support.finetune_runs import read_json
from tests.support.finetune_runs import run_entry

pytestmark = pytest.mark.slow(seconds=220)


@pytest.fixture(scope="module")
def task_files(tmp_path_factory):
  root = tmp_path_factory.mktemp("tasks")
  vocab = generated_tasks.write_vocab(root / "vocab.txt")
  rte = generated_tasks.write_rte_folder(root / "RTE", num_train=320, num_dev=70, num_test=11)
  return {"vocab": vocab, "rte": rte, "root": root}


@pytest.fixture(scope="module")
def rte_run(task_files, tmp_path_factory):
  model_dir = str(tmp_path_factory.mktemp("rte") / "model")
  result = run_entry(
      "recurrent_bert.finetune_glue",
      "--task=RTE",
      f"--data_dir={task_files['rte']}",
      f"--vocab_file={task_files['vocab']}",
      f"--model_dir={model_dir}",
      *GLUE_FLAGS,
  )
  return model_dir, result


def test_glue_learns_a_generated_pair_task(rte_run, task_files):
  model_dir, result = rte_run
  results = read_json(os.path.join(model_dir, "eval_results.json"))
  assert results["task"] == "rte" and results["main_metric"] == "accuracy"
  # Chance is ~0.5: the label is a word hidden in sentence 2.
  assert results["dev"]["accuracy"] >= 0.9, results
  assert results["dev"]["num_examples"] == 70
  assert results["main_metric_value"] == results["dev"]["accuracy"]
  assert results["seconds_per_train_step"] > 0 and results["num_train_steps"] == 60
  best = read_json(os.path.join(model_dir, "best", "best_metrics.json"))
  assert best["global_step"] == results["global_step"] in (30, 60)
  assert "dev: accuracy=" in result.stdout
  # The leaderboard file: header, one row per test example, label names of the task.
  with open(os.path.join(model_dir, "predictions", "RTE.tsv"), encoding="utf-8") as f:
    rows = list(csv.reader(f, delimiter="\t"))
  assert rows[0] == ["index", "prediction"]
  assert [r[0] for r in rows[1:]] == [str(i) for i in range(11)]
  assert {r[1] for r in rows[1:]} <= {"entailment", "not_entailment"}
  # TensorBoard: training and eval event files.
  for sub in ("train", "eval"):
    assert any(n.startswith("events") for n in os.listdir(os.path.join(model_dir, sub)))


def test_eval_mode_matches_the_keras_model_on_numpy_packed_features(rte_run, task_files):
  """--mode=eval (distributed prediction, padded batches) vs the model called directly."""
  from recurrent_bert import saving
  from recurrent_bert.data.tokenization import BertWordpieceTokenizer
  from recurrent_bert.tasks.classification import glue
  from recurrent_bert.tasks.pair_features import convert_pair_examples

  model_dir, _ = rte_run
  os.remove(os.path.join(model_dir, "eval_results.json"))
  run_entry(
      "recurrent_bert.finetune_glue",
      "--task=rte",
      "--mode=eval",
      f"--data_dir={task_files['rte']}",
      f"--model_dir={model_dir}",
      "--eval_batch_size=32",
  )  # 70 rows: 3 batches, the last padded with 26 rows
  results = read_json(os.path.join(model_dir, "eval_results.json"))

  stored = saving.open_model(model_dir)
  model, info = stored.load_task_model()
  directory = stored.config_dir
  assert info.kind == "classifier" and info.label_names == ("entailment", "not_entailment")
  examples = glue.read_glue(task_files["rte"], "rte", "dev").examples
  tokenizer = BertWordpieceTokenizer(os.path.join(directory, "vocab.txt"))
  features = convert_pair_examples(examples, tokenizer, SEQ_LEN, info.label_names)
  logits = model(
      {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}, training=False
  ).numpy()
  accuracy = float(np.mean(logits.argmax(-1) == features["label_ids"]))
  assert results["dev"]["accuracy"] == pytest.approx(accuracy, abs=1e-9)


def test_mirrored_prediction_equals_single_device(rte_run, task_files):
  """Predict under MirroredStrategy (2 replicas, padding, gather) = default strategy."""
  model_dir, _ = rte_run
  predictions = {}
  for strategy in ("default", "mirrored"):
    run_entry(
        "recurrent_bert.finetune_glue",
        "--task=rte",
        "--mode=predict",
        f"--data_dir={task_files['rte']}",
        f"--model_dir={model_dir}",
        f"--checkpoint={os.path.join(model_dir, 'best')}",
        "--predict_splits=test",
        f"--distribution_strategy={strategy}",
        "--num_cpu_devices=2",
        "--eval_batch_size=4",
    )  # 11 rows -> 12, 2 per replica
    with open(os.path.join(model_dir, "predictions", "RTE.tsv"), encoding="utf-8") as f:
      predictions[strategy] = f.read()
  assert predictions["default"] == predictions["mirrored"]
  assert predictions["default"].count("\n") == 12


def test_export_of_a_finetuned_classifier_serves_raw_text(rte_run, tmp_path):
  """classify_pair in a fresh TF-only process = softmax of the Keras model."""
  from recurrent_bert import saving
  from recurrent_bert.data.tokenization import BertWordpieceTokenizer
  from recurrent_bert.tasks.pair_features import PairExample
  from recurrent_bert.tasks.pair_features import convert_pair_examples

  model_dir, _ = rte_run
  export_dir = str(tmp_path / "export")
  result = run_entry(
      "recurrent_bert.export", f"--model_dir={model_dir}", f"--export_dir={export_dir}"
  )
  assert "classify_pair(" in result.stdout and "serving_default(" in result.stdout
  pairs = [("the cat sees a dog", "bird yes tree"), ("old river", "no the quick stone")]
  script = r"""
import json, sys
sys.modules["recurrent_bert"] = None
import tensorflow as tf, tensorflow_text  # noqa
model = tf.saved_model.load(sys.argv[1])
pairs = json.loads(sys.argv[2])
out = model.signatures["classify_pair"](text=tf.constant([a for a, _ in pairs]),
                                        text_pair=tf.constant([b for _, b in pairs]))
print(json.dumps({"probabilities": out["probabilities"].numpy().tolist(),
                  "label": [x.decode() for x in out["label"].numpy()]}))
"""
  served = export_checks.run_fresh_python(script, export_dir, json.dumps(pairs))

  stored = saving.open_model(model_dir)
  model, info = stored.load_task_model()
  directory = stored.config_dir
  tokenizer = BertWordpieceTokenizer(os.path.join(directory, "vocab.txt"))
  features = convert_pair_examples(
      [PairExample(str(i), a, b, None) for i, (a, b) in enumerate(pairs)],
      tokenizer,
      SEQ_LEN,
      info.label_names,
  )
  logits = (
      model({k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}, training=False)
      .numpy()
      .astype(np.float64)
  )
  probabilities = np.exp(logits - logits.max(-1, keepdims=True))
  probabilities /= probabilities.sum(-1, keepdims=True)
  np.testing.assert_allclose(served["probabilities"], probabilities, atol=1e-5)
  assert served["label"] == ["entailment", "not_entailment"]  # the marker words


def test_regression_task_writes_scores(tmp_path, task_files):
  """STS-B: MSE head, Pearson/Spearman metrics, float scores in STS-B.tsv."""
  rng = np.random.default_rng(0)
  folder = tmp_path / "STS-B"
  folder.mkdir()
  header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
  for split, count in (("train", 48), ("dev", 20), ("test", 5)):
    lines = [header + ("" if split == "test" else "\tscore")]
    for i in range(count):
      a, b, _ = generated_tasks.marker_pairs(1, int(rng.integers(1 << 30)))[0]
      row = f"{i}\tg\tf\t2017\t{i}\ts1\ts2\t{a}\t{b}"
      lines.append(row + ("" if split == "test" else f"\t{5.0 * ('yes' in b.split()):.1f}"))
    (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
  model_dir = str(tmp_path / "model")
  run_entry(
      "recurrent_bert.finetune_glue",
      "--task=STS-B",
      f"--data_dir={folder}",
      f"--vocab_file={task_files['vocab']}",
      f"--model_dir={model_dir}",
      "--model_config=bert_tiny",
      f"--max_seq_length={SEQ_LEN}",
      "--train_batch_size=8",
      "--learning_rate=1e-3",
      "--max_train_steps=12",
      # The large-batch options through fine-tuning's flags: 2 micro-batches of 4.
      "--optimizer=lamb",
      "--gradient_accumulation_steps=2",
      "--decay_schedule=cosine",
  )
  results = read_json(os.path.join(model_dir, "eval_results.json"))
  assert results["main_metric"] == "spearman"
  assert set(results["dev"]) == {"pearson", "spearman", "num_examples"}
  assert all(np.isfinite(v) for v in results["dev"].values())
  with open(os.path.join(model_dir, "predictions", "STS-B.tsv"), encoding="utf-8") as f:
    rows = list(csv.reader(f, delimiter="\t"))[1:]
  assert len(rows) == 5 and all(np.isfinite(float(r[1])) for r in rows)


@pytest.mark.parametrize(
    "case", ["bad_row", "no_model", "eval_untrained", "bad_flag", "bad_accumulation"]
)
def test_bad_input_fails_naming_the_culprit(case, task_files, tmp_path):
  data_dir = task_files["rte"]
  flags = [
      "--task=rte",
      f"--data_dir={data_dir}",
      f"--vocab_file={task_files['vocab']}",
      f"--model_dir={tmp_path / 'model'}",
      "--model_config=bert_tiny",
      f"--max_seq_length={SEQ_LEN}",
  ]
  expected = None
  if case == "bad_row":
    broken = tmp_path / "RTE"
    broken.mkdir()
    for split in ("train", "dev"):
      text = open(os.path.join(data_dir, f"{split}.tsv"), encoding="utf-8").read()
      if split == "dev":
        text = text.replace("\tnot_entailment\n", "\tmaybe\n", 1)
      (broken / f"{split}.tsv").write_text(text, encoding="utf-8")
    flags[1] = f"--data_dir={broken}"
    expected = f"{broken / 'dev.tsv'}:"
  elif case == "no_model":
    flags.remove("--model_config=bert_tiny")
    expected = "--init_checkpoint"
  elif case == "eval_untrained":
    flags.append("--mode=eval")
    expected = "--mode=eval needs a trained --model_dir"
  elif case == "bad_flag":
    flags.append("--learning_rate=-1")
    expected = "--learning_rate"
  else:  # the default batch of 32 does not split into 3 micro-batches
    flags.append("--gradient_accumulation_steps=3")
    expected = "--train_batch_size=32 must divide by --gradient_accumulation_steps=3"
  result = run_entry("recurrent_bert.finetune_glue", *flags, check=False, timeout=120)
  assert result.returncode != 0
  assert expected in result.stderr, result.stderr[-2000:]
  assert not os.path.exists(tmp_path / "model" / "checkpoint")


def _superglue_and_mnli_folder(root, task):
  """A few generated examples in the official layout of BoolQ, MultiRC or MNLI."""
  pairs = generated_tasks.marker_pairs(24, seed=5)
  folder = root / task
  folder.mkdir()
  if task == "mnli":
    labels = ["entailment", "neutral", "contradiction"]
    labeled = "\t".join(
        [
            "index",
            "promptID",
            "pairID",
            "genre",
            "sentence1_binary_parse",
            "sentence2_binary_parse",
            "sentence1_parse",
            "sentence2_parse",
            "sentence1",
            "sentence2",
            "label1",
            "gold_label",
        ]
    )
    test = "\t".join(
        [
            "index",
            "promptID",
            "pairID",
            "genre",
            "sentence1_binary_parse",
            "sentence2_binary_parse",
            "sentence1_parse",
            "sentence2_parse",
            "sentence1",
            "sentence2",
        ]
    )
    for split in ("train", "dev_matched", "dev_mismatched", "test_matched", "test_mismatched"):
      is_test = split.startswith("test")
      lines = [test if is_test else labeled]
      for i, (a, b, _) in enumerate(pairs):
        row = f"{i}\t0\t0\tg\t-\t-\t-\t-\t{a}\t{b}"
        lines.append(row if is_test else row + f"\tx\t{labels[i % 3]}")
      (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder
  for split, name in (("train", "train.jsonl"), ("dev", "val.jsonl"), ("test", "test.jsonl")):
    records = []
    for i, (a, b, label) in enumerate(pairs):
      labeled = {} if split == "test" else {"label": label == "entailment"}
      if task == "boolq":
        records.append({"question": a, "passage": b, "idx": i, **labeled})
      elif i % 3 == 0:  # MultiRC: one paragraph per 3 pairs, one question, 3 answers
        answers = [
            {
                "text": pairs[j][1],
                "idx": j,
                **({} if split == "test" else {"label": int(pairs[j][2] == "entailment")}),
            }
            for j in range(i, min(i + 3, len(pairs)))
        ]
        records.append(
            {
                "idx": i // 3,
                "passage": {
                    "text": a,
                    "questions": [{"question": "which one ?", "idx": i // 3, "answers": answers}],
                },
            }
        )
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
  return folder


@pytest.mark.parametrize(
    "task,files,metrics",
    [
        ("boolq", ["BoolQ.jsonl"], {"accuracy"}),
        ("multirc", ["MultiRC.jsonl"], {"f1a", "exact_match"}),
        ("mnli", ["MNLI-m.tsv", "MNLI-mm.tsv"], {"accuracy"}),
    ],
)
def test_superglue_and_mnli_wiring(task, files, metrics, task_files, tmp_path):
  """Every eval split scored with the task's metrics; every test split's submission file."""
  folder = _superglue_and_mnli_folder(tmp_path, task)
  model_dir = tmp_path / "model"
  run_entry(
      "recurrent_bert.finetune_glue",
      f"--task={task}",
      f"--data_dir={folder}",
      f"--vocab_file={task_files['vocab']}",
      f"--model_dir={model_dir}",
      "--model_config=bert_tiny",
      "--max_seq_length=48",
      "--train_batch_size=8",
      "--max_train_steps=3",
      "--learning_rate=1e-4",
  )
  results = read_json(model_dir / "eval_results.json")
  splits = ["dev_matched", "dev_mismatched"] if task == "mnli" else ["dev"]
  for split in splits:
    assert set(results[split]) == metrics | {"num_examples"}
    assert all(0.0 <= results[split][m] <= 1.0 for m in metrics)
  assert sorted(os.listdir(model_dir / "predictions")) == sorted(files)
  if task == "multirc":  # nested back into paragraphs / questions / answers
    records = [json.loads(line) for line in open(model_dir / "predictions" / files[0])]
    answers = [a for r in records for q in r["passage"]["questions"] for a in q["answers"]]
    assert [a["idx"] for a in answers] == list(range(24))
    assert {a["label"] for a in answers} <= {0, 1}


def test_multi_worker_finetuning_matches_single_device_evaluation(task_files, tmp_path):
  """Two MultiWorkerMirrored worker processes on 127.0.0.1 train with evaluation (the
  distributed, gathered prediction); a default-strategy --mode=eval of the same best
  checkpoint reproduces the metric, and predictions are written once."""
  from tests.training.conftest import assert_all_succeeded
  from tests.training.conftest import free_port
  from tests.training.conftest import subprocess_env
  from tests.training.conftest import wait_all

  model_dir = tmp_path / "mwms"
  cluster = {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]}
  flags = [
      "-m",
      "recurrent_bert.finetune_glue",
      "--task=rte",
      f"--data_dir={task_files['rte']}",
      f"--vocab_file={task_files['vocab']}",
      f"--model_dir={model_dir}",
      *GLUE_FLAGS,
      "--max_train_steps=30",
      "--distribution_strategy=multi_worker_mirrored",
  ]
  processes = [
      forkserver.start(
          [sys.executable, *flags],
          REPO,
          subprocess_env(
              TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
          ),
      )
      for index in range(2)
  ]
  assert_all_succeeded(("worker 0", "worker 1"), wait_all(processes, timeout=400))
  distributed = read_json(model_dir / "eval_results.json")
  assert not os.listdir(model_dir / ".scratch")  # worker 1's checkpoints are gone
  run_entry(
      "recurrent_bert.finetune_glue",
      "--task=rte",
      "--mode=eval",
      f"--data_dir={task_files['rte']}",
      f"--model_dir={model_dir}",
  )
  single = read_json(model_dir / "eval_results.json")
  assert single["global_step"] == distributed["global_step"]
  assert single["dev"] == distributed["dev"]
  assert os.listdir(model_dir / "predictions") == ["RTE.tsv"]


def test_tfds_path_of_the_entry_point(task_files, tmp_path):
  """--tfds through finetune_glue on tfds.testing.mock_data (offline; random text, so
  plumbing only): every split read from TFDS, metrics and the submission file written."""
  script = r"""
import sys
import tensorflow_datasets as tfds
from absl import app
from recurrent_bert import finetune_glue
with tfds.testing.mock_data(num_examples=20):
  app.run(finetune_glue.main, argv=["finetune_glue", *sys.argv[1:]])
"""
  model_dir = tmp_path / "model"
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
  result = forkserver.run(
      [
          sys.executable,
          "-c",
          script,
          "--task=cola",
          "--tfds",
          f"--tfds_data_dir={tmp_path / 'tfds'}",
          f"--vocab_file={task_files['vocab']}",
          f"--model_dir={model_dir}",
          "--model_config=bert_tiny",
          "--max_seq_length=24",
          "--train_batch_size=4",
          "--max_train_steps=2",
      ],
      REPO,
      env,
      timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  results = read_json(model_dir / "eval_results.json")
  assert results["dev"]["num_examples"] == 20
  assert set(results["dev"]) == {"matthews_corr", "accuracy", "num_examples"}
  rows = (model_dir / "predictions" / "CoLA.tsv").read_text().splitlines()
  assert rows[0] == "index\tprediction" and len(rows) == 21
