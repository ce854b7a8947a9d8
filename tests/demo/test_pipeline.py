"""The end-to-end demo (python -m recurrent_bert.demo), CI-sized, run as a user runs it.

One run of the whole pipeline (tiny models, a few steps, a small slice of the built-in
corpus) through the real entry points; then each stage's outputs are checked, and a
second run must reuse every stage. The pure helpers (document split, task building,
report pieces) are tested beside this file, the subprocess pool in tests/test_jobs.py.
"""

import glob
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from scipy import stats

from recurrent_bert.demo import model_stages
from recurrent_bert.demo import origin_task

pytestmark = pytest.mark.slow(seconds=300)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = ("bert_tiny", "trans_blstm_small_2_tiny")
SEQ_LENGTH = 32
MAX_PREDICTIONS = 5  # round(32 * 0.15625)
PRETRAIN_SEEDS = (1, 2)
LEARNING_RATES = (1e-3, 3e-3)
# corpus, vocab, pretrain_data, eval_data, task, 2 x 2 pretrain, finetune, export, query,
# the unigram comparison's vocab, data, eval data, pretrain and finetune, report
STAGES = 18
# The 4 pretraining runs go 2 at a time (--parallel_pretraining, the default) under one
# banner "[6/18] 4 runs, 2 at a time: pretraining runs": 3 fewer banners than stages.
BANNERS = STAGES - 3
CI_FLAGS = [
    "--size=tiny",
    "--models=bert,trans_blstm_small_2",
    # Two pretraining seeds (the bands, the MLM claim's interval) and two learning rates
    # (the stability figure), but one fine-tuning seed: a second adds no code path here,
    # only four more processes (the claims over several seeds: test_claims.py).
    "--pretrain_seeds=1,2",
    "--finetune_seeds=1",
    "--finetune_learning_rates=1e-3,3e-3",
    "--eval_sequences=64",
    "--pretrain_steps=6",
    "--finetune_steps=4",
    "--corpus_max_bytes=1000000",
    "--vocab_size=1000",
    "--vocab_max_lines=3000",
    "--task_classes=3",
    "--task_train_examples=96",
    "--task_eval_examples=60",
    f"--seq_length={SEQ_LENGTH}",
    "--batch_size=8",
    "--finetune_batch_size=8",
    "--num_workers=1",
    "--jobs=2",
    # The tokenizer comparison's stages, of one tokenizer (~30 CPU-seconds; the stages of
    # every tokenizer and the report section from synthetic outputs: test_tokenizers.py).
    "--tokenizers=unigram",
]


def _run_demo(work_dir, cache_dir, *extra, timeout=900):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", RECURRENT_BERT_CACHE=str(cache_dir))
  start = time.time()
  result = subprocess.run(
      [sys.executable, "-m", "recurrent_bert.demo", f"--work_dir={work_dir}", *CI_FLAGS, *extra],
      cwd=REPO,
      env=env,
      capture_output=True,
      text=True,
      timeout=timeout,
  )
  return result, time.time() - start


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
  """(work_dir, first run's CompletedProcess, its seconds, cache dir)."""
  root = tmp_path_factory.mktemp("demo")
  work_dir, cache_dir = root / "work", root / "cache"
  result, seconds = _run_demo(work_dir, cache_dir)
  assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
  return work_dir, result, seconds, cache_dir


# ------------------------------------------------------------------ the pipeline


def test_progress_is_visible(demo_run):
  _, result, _, _ = demo_run
  out = result.stdout
  stages = re.findall(r"^\[(\d+)/(\d+)\] ", out, re.M)
  assert len(stages) == BANNERS and stages[-1] == (str(STAGES),) * 2, out[:3000]
  assert f"[6/{STAGES}] 4 runs, 2 at a time: pretraining runs" in out
  assert len(re.findall(r"done in ", out)) == STAGES
  assert "ETA ~" in out and "elapsed" in out
  assert re.search(r"step \d+/6 .*loss=", out)  # pretraining progress, forwarded
  assert re.search(r"eval step 6: mlm_loss=", out)  # its held-out evaluations
  assert "create_pretraining_data" in out  # the data tool's progress bar
  # The sweep's progress: every run's dev accuracy as it finishes, with an ETA.
  assert "running 4 of 4 runs, up to 2 at once" in out
  assert len(re.findall(r"\[\d/4\] \S+/custom lr=.* accuracy=", out)) == 4
  for name in ("report.md", "mlm_loss.png", "stability.png", "tensorboard", "saved_model"):
    assert name in out.split("stage timings")[-1]  # where the outputs are, at the end


def test_tfrecords_parse_with_the_schema(demo_run):
  import tensorflow as tf

  from recurrent_bert.data import schema

  work_dir = demo_run[0]
  files = sorted(glob.glob(str(work_dir / "pretrain_data" / "*.tfrecord")))
  assert files
  with open(work_dir / "pretrain_data" / "stats.json") as f:
    stats = json.load(f)
  vocab_size = len((work_dir / "vocab" / "vocab.txt").read_text().splitlines())
  assert vocab_size == 1000
  count = 0
  for batch in tf.data.TFRecordDataset(files).batch(256):
    parsed = schema.parse_pretraining_example(batch, SEQ_LENGTH, MAX_PREDICTIONS)
    assert parsed["input_ids"].shape[1] == SEQ_LENGTH
    assert parsed["masked_lm_ids"].shape[1] == MAX_PREDICTIONS
    ids = parsed["input_ids"].numpy()
    assert ids.min() >= 0 and ids.max() < vocab_size
    assert (parsed["masked_lm_weights"].numpy().sum(axis=1) >= 1).all()
    count += ids.shape[0]
  assert count == stats["instances"] > 0


def test_held_out_documents_are_not_trained_on(demo_run):
  work_dir = demo_run[0]
  splits = {
      s: origin_task.load_split(str(work_dir / "corpus"), s) for s in ("train", "dev", "test")
  }
  keys = {s: {tuple(d.sentences) for d in docs} for s, docs in splits.items()}
  assert keys["dev"] and keys["test"]
  assert not keys["train"] & keys["dev"] and not keys["train"] & keys["test"]
  assert not keys["dev"] & keys["test"]
  # The pretraining data was made from the train documents only.
  with open(work_dir / "pretrain_data" / "stats.json") as f:
    options = json.load(f)["options"]
  assert options["input_files"] == [str(work_dir / "corpus" / "train_documents.txt")]
  # Task passages of dev/test come from their documents, train's from train's.
  train_text = " ".join(" ".join(d.sentences) for d in splits["train"])
  dev_rows = origin_task.read_tsv(str(work_dir / "task" / "dev.tsv"))
  assert dev_rows and all(r["sentence"] not in train_text for r in dev_rows)


def test_task_files_are_balanced_and_test_labels_apart(demo_run):
  work_dir = demo_run[0]
  task = work_dir / "task"
  train = origin_task.read_tsv(str(task / "train.tsv"))
  test = origin_task.read_tsv(str(task / "test.tsv"))
  labels = origin_task.read_tsv(str(task / "test_labels.tsv"))
  assert "label" not in test[0] and len(labels) == len(test)
  counts = {}
  for row in train:
    counts[row["label"]] = counts.get(row["label"], 0) + 1
  assert len(counts) == 3 and len(set(counts.values())) == 1


def test_pretraining_checkpoints_restore(demo_run):
  from recurrent_bert import io_utils
  from recurrent_bert import saving

  work_dir = demo_run[0]
  for preset in MODELS:
    model_dir = str(work_dir / "pretrain" / preset / "seed1")
    records = io_utils.read_metrics_log(model_dir)
    assert sorted(records) == list(range(1, 7))
    assert all(math.isfinite(r["mlm_loss"]) for r in records.values())
    encoder = saving.open_model(model_dir).load_encoder()
    ids = np.array([[2, 10, 11, 12, 3, 0]], "int32")
    out = encoder(
        {
            "input_ids": ids,
            "input_mask": (ids > 0).astype("int32"),
            "segment_ids": np.zeros_like(ids),
        },
        training=False,
    )
    assert out["sequence_output"].shape == (1, 6, 128)
    assert np.isfinite(out["pooled_output"].numpy()).all()


def test_held_out_pretraining_eval_for_every_model_and_seed(demo_run):
  from recurrent_bert import io_utils

  work_dir = demo_run[0]
  with open(work_dir / "eval_data" / "stats.json") as f:
    stats = json.load(f)
  # The records of the dev documents, none of the train documents'.
  assert stats["options"]["input_files"] == [str(work_dir / "corpus" / "dev_documents.txt")]
  for preset in MODELS:
    losses = []
    for seed in PRETRAIN_SEEDS:
      model_dir = work_dir / "pretrain" / preset / f"seed{seed}"
      with open(model_dir / "eval_results.json") as f:
        results = json.load(f)
      held_out = results["eval"]
      assert results["global_step"] == 6 and held_out["num_examples"] == 64
      assert math.isfinite(held_out["mlm_loss"]) and 0 <= held_out["mlm_accuracy"] <= 1
      assert held_out["mlm_perplexity"] == pytest.approx(math.exp(held_out["mlm_loss"]))
      # Evaluated after every step (6 // 8 -> 1), the last as eval_results.json says.
      records = io_utils.read_metrics_log(str(model_dir))
      curve = {step: r["eval/mlm_loss"] for step, r in records.items() if "eval/mlm_loss" in r}
      assert sorted(curve) == list(range(1, 7))
      assert curve[6] == pytest.approx(held_out["mlm_loss"])
      losses.append(held_out["mlm_loss"])
    assert losses[0] != losses[1]  # the seeds are different runs


def test_finetuning_results_and_test_accuracy(demo_run):
  work_dir = demo_run[0]
  for preset in MODELS:
    for lr in LEARNING_RATES:
      model_dir = work_dir / "finetune" / "runs" / preset / "custom" / f"lr{lr!r}_seed1"
      with open(model_dir / "eval_results.json") as f:
        results = json.load(f)
      assert 0 <= results["dev"]["accuracy"] <= 1
      accuracy, n = origin_task.accuracy_on_test(
          str(model_dir / "predictions" / "test_predictions.tsv"),
          str(work_dir / "task" / "test_labels.tsv"),
      )
      assert 0 <= accuracy <= 1 and n > 0


def test_saved_model_answers_raw_text_with_tf_and_tf_text_only(demo_run):
  # The query stage ran the query program by its path in a fresh interpreter (not through
  # this package); the program checks itself that no recurrent_bert module was loaded
  # before it prints its last line, and writes every label's probability.
  work_dir, result = demo_run[0], demo_run[1]
  classes = json.loads((work_dir / "stages" / "task.json").read_text())["result"]["classes"]
  queries = json.loads((work_dir / "export" / "queries.json").read_text())
  answers = json.loads((work_dir / "export" / "answers.json").read_text())
  assert len(answers) == 3 and [a["text"] for a in answers] == [q["text"] for q in queries]
  for answer in answers:
    assert answer["label"] in classes and len(answer["probabilities"]) == len(classes)
    assert sum(answer["probabilities"]) == pytest.approx(1, abs=1e-4)
    assert answer["probability"] == max(answer["probabilities"])
  # The passages shown are the exported run's most and least confident test predictions,
  # each with its truth, and the SavedModel answers them as the run itself did.
  best = json.loads((work_dir / "stages" / "export.json").read_text())["result"]
  run_dir = next(
      r["model_dir"]
      for r in json.loads((work_dir / "stages" / "finetune.json").read_text())["result"]["runs"]
      if (r["preset"], r["learning_rate"], r["seed"])
      == (best["preset"], best["learning_rate"], best["seed"])
  )
  predictions = origin_task.read_tsv(os.path.join(run_dir, "predictions", "test_predictions.tsv"))
  confidence = sorted(float(p["probability"]) for p in predictions)
  labels = {
      r["index"]: r["label"] for r in origin_task.read_tsv(work_dir / "task" / "test_labels.tsv")
  }
  by_text = {
      r["sentence"]: r["index"] for r in origin_task.read_tsv(work_dir / "task" / "test.tsv")
  }
  assert [a["shown_as"] for a in answers][::2] == ["most confident", "least confident"]
  for answer in answers:
    assert answer["truth"] == labels[by_text[answer["text"]]]
    assert answer["label"] == answer["run_answer"]
  assert answers[0]["probability"] == pytest.approx(confidence[-1], abs=2e-3)
  assert answers[2]["probability"] == pytest.approx(confidence[0], abs=2e-3)
  command = next(
      line
      for line in (work_dir / "logs" / "query.log").read_text().splitlines()
      if line.startswith("=== ")
  )
  assert f" -P {model_stages.QUERY_PROGRAM} " in command and " -m " not in command
  assert "answer:" in result.stdout
  assert "(SavedModel loaded in a fresh process with tensorflow + tensorflow_text only)" in (
      result.stdout
  )


def test_report_lists_every_model_with_finite_numbers(demo_run):
  work_dir = demo_run[0]
  report = (work_dir / "report" / "report.md").read_text()
  for preset in MODELS:
    rows = [line for line in report.splitlines() if line.startswith("|") and f"`{preset}`" in line]
    assert len(rows) == 1, report
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    numbers = [float(x) for cell in cells[2:] for x in re.findall(r"-?\d+\.\d+|-?\d+(?=M)", cell)]
    assert len(numbers) >= 8 and all(math.isfinite(x) for x in numbers), rows[0]
    assert "nan" not in rows[0].lower()
  with open(work_dir / "report" / "results.json") as f:
    results = json.load(f)
  assert [m["preset"] for m in results["models"]] == list(MODELS)
  for model in results["models"]:
    assert model["parameters"] > 0
    for key in ("pretrain_seconds_per_step", "step_time_ratio"):
      assert math.isfinite(model[key]), key
    for key in ("final_mlm_loss", "eval_mlm_loss", "eval_mlm_accuracy"):
      assert len(model[key]) == len(PRETRAIN_SEEDS), key
      assert all(math.isfinite(x) for x in model[key]), key
    assert sorted(map(float, model["by_learning_rate"])) == list(LEARNING_RATES)
  assert (
      "![MLM loss](mlm_loss.png)" in report and "![Fine-tuning stability](stability.png)" in report
  )


FLOOR_KEYS = {"majority class": "majority", "bag-of-words logistic regression": "bag_of_words"}


def test_report_names_the_tasks_floors_and_flags_every_pretraining_run(demo_run):
  work_dir = demo_run[0]
  report = (work_dir / "report" / "report.md").read_text()
  with open(work_dir / "report" / "results.json") as f:
    results = json.load(f)
  floors = results["floors"]
  # 3 balanced classes: the majority class is right on a third of dev and test.
  assert floors["majority"]["dev"] == floors["majority"]["test"] == pytest.approx(1 / 3)
  assert 0 <= floors["bag_of_words"]["test"] <= 1
  for name in ("majority class", "bag-of-words logistic regression"):
    (row,) = [line for line in report.splitlines() if line.startswith(f"| *floor: {name}*")]
    # Only the dev and test accuracy: the other 9 of the 12 columns are a model's.
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 12 and cells[1:9] + cells[11:] == ["—"] * 9
    assert [float(c) for c in cells[9:11]] == pytest.approx(
        [floors[key][split] for key in [FLOOR_KEYS[name]] for split in ("dev", "test")], abs=5e-4
    )
  # Six steps leave every run near its start, at about ln(1000): not below the unigram
  # plateau, whose loss U is the held-out one of the training records' piece frequencies.
  unigram = results["unigram_plateau_loss"]
  assert 0 < unigram < math.log(1000)
  for model in results["models"]:
    assert len(model["plateau_flags"]) == len(PRETRAIN_SEEDS)
    assert set(model["plateau_flags"]) <= {"on the unigram plateau", "above the unigram plateau"}
  assert f"The unigram plateau is U = {unigram:.3f} nats" in report
  assert "(flagged runs: " in report


def test_claims_are_stated_with_a_verdict(demo_run):
  work_dir = demo_run[0]
  report = (work_dir / "report" / "report.md").read_text()
  with open(work_dir / "report" / "results.json") as f:
    checked = json.load(f)["claims"]
  # TRANS-BLSTM-SMALL-2 against BERT-orig: MLM loss, stability, downstream.
  assert [c["source"] for c in checked] == [
      "TRANS-BLSTM Fig. 3",
      "SwishRNN Fig. 3",
      "TRANS-BLSTM Tables 2-4",
  ]
  verdicts = ("reproduced", "not reproduced", "inconclusive at this budget")
  for claim in checked:
    assert claim["verdict"] in verdicts and math.isfinite(claim["estimate"])
    assert claim["statement"] in report and f"**{claim['verdict']}**" in report
  mlm = checked[0]
  assert mlm["baseline"] == "bert_tiny" and "(its paper's baseline)" in mlm["statement"]
  # The verdict follows from the rows: both models ran seeds 1 and 2 on the same record
  # order, so the interval is the paired t interval of the per-seed differences.
  with open(work_dir / "report" / "results.json") as f:
    models = {m["preset"]: m for m in json.load(f)["models"]}
  ours, theirs = models["trans_blstm_small_2_tiny"], models["bert_tiny"]
  assert ours["pretrain_seeds"] == theirs["pretrain_seeds"] == list(PRETRAIN_SEEDS)
  differences = np.subtract(ours["eval_mlm_loss"], theirs["eval_mlm_loss"])
  half = stats.t.ppf(0.975, len(differences) - 1) * stats.sem(differences)
  low, high = differences.mean() - half, differences.mean() + half
  assert mlm["design"] == "paired" and (mlm["low"], mlm["high"]) == pytest.approx((low, high))
  expected = (
      "reproduced" if high < 0 else "not reproduced" if low > 0 else "inconclusive at this budget"
  )
  assert mlm["verdict"] == expected
  # One fine-tuning seed: no interval, and the report says what would give one.
  assert "at least 2 fine-tuning seeds" in checked[2]["budget"]


@pytest.mark.parametrize("name", ["mlm_loss.png", "stability.png"])
def test_figures_are_valid_pngs(demo_run, name):
  import matplotlib.image

  path = demo_run[0] / "report" / name
  assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  image = matplotlib.image.imread(str(path))
  assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_tensorboard_logs_are_in_the_report_folder(demo_run):
  board = demo_run[0] / "report" / "tensorboard"
  for preset in MODELS:
    for part in ("train", "eval"):
      for seed in PRETRAIN_SEEDS:
        assert glob.glob(str(board / preset / f"pretrain_seed{seed}" / part / "events.out.*"))
      for lr in LEARNING_RATES:
        assert glob.glob(str(board / preset / f"finetune_lr{lr:g}_seed1" / part / "events.out.*"))


def test_tokenizer_comparison_reports_finite_numbers(demo_run):
  work_dir = demo_run[0]
  root = work_dir / "tokenizers" / "unigram"
  assert (root / "vocab" / "spm.model").is_file()
  with open(root / "eval_data" / "stats.json") as f:
    options = json.load(f)["options"]
  assert options["input_files"] == [str(work_dir / "corpus" / "dev_documents.txt")]
  assert options["do_whole_word_mask"] and options["vocab_file"].endswith("spm.model")
  with open(root / "pretrain" / "bert_tiny" / "seed1" / "eval_results.json") as f:
    held_out = json.load(f)["eval"]
  assert held_out["mlm_words"] > 0
  assert held_out["mlm_loss_per_word"] >= held_out["mlm_loss"] > 0
  with open(work_dir / "report" / "results.json") as f:
    (row,) = json.load(f)["tokenizers"]["rows"]
  assert row["tokenizer"] == "unigram" and row["vocab_size"] == 1000
  numbers = [v for k, v in row.items() if k.startswith(("eval_", "pieces"))]
  numbers += row["dev_accuracy"] + row["test_accuracy"]
  assert len(numbers) == 9 and all(math.isfinite(x) for x in numbers), row
  report = (work_dir / "report" / "report.md").read_text()
  assert "## Tokenizers (the lecture's comparison)" in report and "| unigram LM | 1,000 |" in report


def test_rerun_reuses_every_stage(demo_run):
  work_dir, _, _, cache_dir = demo_run
  trained = {p: p.stat().st_mtime_ns for p in work_dir.glob("**/metrics.jsonl")}
  result, _ = _run_demo(work_dir, cache_dir, timeout=300)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  banners = re.findall(rf"^\[\d+/{STAGES}\] .*$", result.stdout, re.M)
  assert len(banners) == STAGES and all(b.endswith(")") and "reused" in b for b in banners), banners
  # Nothing was trained again: every run's metrics log is untouched.
  assert trained and all(p.stat().st_mtime_ns == t for p, t in trained.items())
  assert (work_dir / "report" / "report.md").exists()


def test_redo_runs_the_named_stages_again(demo_run):
  # The task stage: a stage of a moment (the report stage would start TensorFlow); the
  # engine's --redo is the same for every stage (tests/demo/test_stages.py).
  work_dir, _, _, cache_dir = demo_run
  result, _ = _run_demo(work_dir, cache_dir, "--redo=task", timeout=300)
  assert result.returncode == 0, result.stdout[-3000:]
  ran = re.findall(rf"^\[\d+/{STAGES}\] (.*)  \(elapsed", result.stdout, re.M)
  assert len(ran) == 1 and ran[0].startswith("fine-tuning task"), ran
  reused = re.findall(rf"^\[\d+/{STAGES}\] .*: reused \(", result.stdout, re.M)
  assert len(reused) == STAGES - 1, result.stdout
  result, _ = _run_demo(work_dir, cache_dir, "--redo=pretrain:nope", timeout=120)
  assert result.returncode == 1 and "--redo: no stage" in result.stdout


def test_rerun_with_other_settings_is_refused(demo_run):
  work_dir, _, _, cache_dir = demo_run
  result, _ = _run_demo(work_dir, cache_dir, "--pretrain_steps=7", timeout=120)
  assert result.returncode == 1
  assert "--pretrain_steps: 6 there, 7 now" in result.stdout
