"""The demo on a user's own corpus: a corpus too small stops at its stage, naming it (and is
not "other settings" on the next try), and the files of a corpus are the classes of its
fine-tuning task."""

import os
import random
import subprocess
import sys

from recurrent_bert.demo import pipeline
from recurrent_bert.demo import settings as settings_lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _demo_on(corpus, work_dir):
  """The demo's command on one corpus file, at tiny size."""
  return subprocess.run(
      [
          sys.executable,
          "-m",
          "recurrent_bert.demo",
          f"--work_dir={work_dir}",
          f"--input_files={corpus}",
          "--size=tiny",
          "--models=bert",
      ],
      cwd=REPO,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
      capture_output=True,
      text=True,
      timeout=120,
  )


def test_failing_stage_names_itself_and_its_log(tmp_path):
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("Just one sentence here.\n")
  result = _demo_on(corpus, tmp_path / "w")
  assert result.returncode == 1
  assert "stage 'corpus' failed" in result.stdout and "demo stopped" in result.stdout
  assert "too few" in result.stdout
  # Nothing finished there: another corpus is not refused as "other settings".
  other = tmp_path / "other.txt"
  other.write_text("Another lone sentence.\n")
  result = _demo_on(other, tmp_path / "w")
  assert result.returncode == 1 and "stage 'corpus' failed" in result.stdout


def test_own_corpus_classes_are_its_files(tmp_path):
  rng = random.Random(0)
  words = {
      "cats": "cat whisker purr meow tail paw fur",
      "ships": "hull sail mast deck keel anchor port",
      "stars": "orbit nebula comet galaxy quasar pulsar light",
  }
  for name, vocab in words.items():
    docs = [
        "\n".join(" ".join(rng.choice(vocab.split()) for _ in range(12)) + "." for _ in range(8))
        for _ in range(15)
    ]
    (tmp_path / f"{name}.txt").write_text("\n\n".join(docs) + "\n")
  settings = settings_lib.Settings(
      work_dir=str(tmp_path / "w"),
      input_files=[str(tmp_path / "*.txt")],
      cache_dir=None,
      corpus_max_bytes=0,
      presets=["bert_tiny"],
      size="tiny",
      vocab_size=1000,
      vocab_max_lines=0,
      seq_length=32,
      max_predictions_per_seq=5,
      dupe_factor=1,
      batch_size=8,
      pretrain_steps=4,
      learning_rate=1e-3,
      warmup_steps=0,
      pretrain_seeds=[1],
      eval_sequences=64,
      finetune_seeds=[1],
      finetune_steps=2,
      finetune_batch_size=8,
      finetune_learning_rates=[1e-4],
      task_train_examples=30,
      task_eval_examples=9,
      eval_documents_fraction=0.1,
      seed=1,
      task_classes=4,
  )
  runner = pipeline.Demo(settings)
  runner.results["corpus"] = runner.stage_corpus()
  assert runner.results["corpus"]["splits"]["dev"]["documents"] == 6  # 2 of each file
  task = runner.stage_task()
  assert sorted(task["classes"]) == ["cats", "ships", "stars"]
  assert task["splits"]["train"]["examples"] == 30
