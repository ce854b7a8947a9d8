"""The demo's tokenizer comparison (--tokenizers) without running it: the stages it plans
and their command lines (the main runs' builders, with the comparison's paths), and the
report section from synthetic run outputs. One real run of its stages, of one tokenizer,
is in the CI-sized demo run (test_pipeline.py)."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from recurrent_bert.demo import pipeline
from recurrent_bert.demo import settings as settings_lib
from recurrent_bert.demo import tokenizer_report
from recurrent_bert.errors import InputError
from tests.data import sentencepiece_models
from tests.data.conftest import corpus_file  # noqa: F401 (a fixture)
from tests.data.conftest import vocab_file  # noqa: F401 (a fixture)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAIN_STAGES = [
    "corpus",
    "vocab",
    "pretrain_data",
    "eval_data",
    "task",
    # Seed by seed: a model's later seeds reuse its first seed's compiled programs.
    "pretrain:bert_tiny:seed1",
    "pretrain:swishrnn_tiny:seed1",
    "pretrain:bert_tiny:seed2",
    "pretrain:swishrnn_tiny:seed2",
    "finetune",
    "export",
    "query",
    "report",
]


def make_settings(work_dir, tokenizers=()):
  return settings_lib.Settings(
      work_dir=str(work_dir),
      input_files=["builtin"],
      cache_dir=None,
      corpus_max_bytes=1000000,
      presets=["bert_tiny", "swishrnn_tiny"],
      size="tiny",
      vocab_size=1000,
      vocab_max_lines=3000,
      seq_length=32,
      max_predictions_per_seq=5,
      dupe_factor=1,
      batch_size=8,
      pretrain_steps=6,
      learning_rate=1e-3,
      warmup_steps=0,
      pretrain_seeds=[1, 2],
      eval_sequences=64,
      finetune_seeds=[1, 2],
      finetune_steps=4,
      finetune_batch_size=8,
      finetune_learning_rates=[3e-4, 1e-3, 3e-3],
      task_train_examples=30,
      task_eval_examples=9,
      eval_documents_fraction=0.1,
      seed=1,
      tokenizers=list(tokenizers),
  )


def flag(command, name):
  """The value of --name in a command line (None when absent)."""
  prefix = f"--{name}="
  return next((a[len(prefix) :] for a in command if a.startswith(prefix)), None)


def test_without_the_flag_the_plan_is_the_main_one(tmp_path):
  demo = pipeline.Demo(make_settings(tmp_path))
  stages = demo.plan()
  assert [st.name for st in stages] == MAIN_STAGES
  assert "tokenizers" not in stages[-1].key
  assert "--do_whole_word_mask" not in demo.data_command()
  assert "tokenizers" not in settings_lib.Settings.fingerprint(demo.s)


def test_comparison_stages_come_before_the_report(tmp_path):
  demo = pipeline.Demo(make_settings(tmp_path, ["wordpiece", "unigram", "bpe"]))
  names = [st.name for st in demo.plan()]
  per_tokenizer = ["data", "eval_data", "pretrain", "finetune"]
  assert names == MAIN_STAGES[:-1] + [f"tokenizer_{s}:wordpiece" for s in per_tokenizer] + [
      f"tokenizer_{s}:{t}" for t in ("unigram", "bpe") for s in ["vocab"] + per_tokenizer
  ] + ["report"]
  assert demo.plan()[-1].key["tokenizers"] == ["wordpiece", "unigram", "bpe"]


def test_commands_are_the_main_ones_with_the_comparisons_paths(tmp_path):
  demo = pipeline.Demo(make_settings(tmp_path, ["wordpiece", "unigram"]))
  work = str(tmp_path)
  # WordPiece: the main vocabulary; unigram: its SentencePiece model, else the same command.
  assert flag(demo.data_command("train", "wordpiece"), "vocab_file") == f"{work}/vocab/vocab.txt"
  vocab = demo.vocab_command("unigram")
  model = f"{work}/tokenizers/unigram/vocab/spm.model"
  assert flag(vocab, "tokenizer") == "unigram" and flag(vocab, "output_file") == model
  assert [a for a in vocab if not a.startswith(("--tokenizer=", "--output_file="))] == [
      a for a in demo.vocab_command() if not a.startswith("--output_file=")
  ]
  for split, out in (("train", "pretrain_data"), ("dev", "eval_data")):
    data = demo.data_command(split, "unigram")
    assert "--do_whole_word_mask" in data and flag(data, "vocab_file") == model
    assert flag(data, "output_dir") == f"{work}/tokenizers/unigram/{out}"
    main = demo.data_command(split)
    paths = ("--vocab_file=", "--output_dir=", "--do_whole_word_mask")
    assert [a for a in data if not a.startswith(paths)] == [
        a for a in main if not a.startswith(paths)
    ]
  # One pretraining: the first model and seed, the main runs' budget, the comparison's data.
  pretrain = demo.pretrain_command("bert_tiny", 1, "unigram")
  assert flag(pretrain, "model_dir") == f"{work}/tokenizers/unigram/pretrain/bert_tiny/seed1"
  assert flag(pretrain, "input_files") == f"{work}/tokenizers/unigram/pretrain_data/*.tfrecord"
  assert flag(pretrain, "eval_input_files") == f"{work}/tokenizers/unigram/eval_data/*.tfrecord"
  paths = ("--vocab_file=", "--input_files=", "--eval_input_files=", "--model_dir=")
  assert [a for a in pretrain if not a.startswith(paths)] == [
      a for a in demo.pretrain_command("bert_tiny", 1) if not a.startswith(paths)
  ]
  # Fine-tuning: the middle learning rate x every seed, from the comparison's encoder.
  sweep = demo.sweep_command("unigram")
  encoder = f"{work}/tokenizers/unigram/pretrain/bert_tiny/seed1/encoder"
  assert flag(sweep, "models") == f"bert_tiny={encoder}"
  assert flag(sweep, "learning_rates") == "0.001" and flag(sweep, "seeds") == "1,2"
  assert flag(sweep, "output_dir") == f"{work}/tokenizers/unigram/finetune"
  assert flag(sweep, "entry_flags") == flag(demo.sweep_command(), "entry_flags")
  assert demo.finetune_grid("unigram") == [("bert_tiny", 1e-3, 1), ("bert_tiny", 1e-3, 2)]


def test_unknown_tokenizer_is_refused_in_one_line(tmp_path):
  result = subprocess.run(
      [sys.executable, "-m", "recurrent_bert.demo", f"--work_dir={tmp_path}", "--tokenizers=bpe,x"],
      cwd=REPO,
      env=dict(os.environ, PYTHONPATH=REPO),
      capture_output=True,
      text=True,
      timeout=120,
  )
  assert result.returncode == 2 and "--tokenizers: unknown x" in result.stderr
  assert "Traceback" not in result.stderr


# ------------------------------------------------------------------ the report section


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory, corpus_file):
  return sentencepiece_models.build_model(
      corpus_file, "unigram", str(tmp_path_factory.mktemp("sp") / "u"), vocab_size=300
  )


def write_run(root, tokenizer, vocab_file, input_tokens, loss, per_word, accuracies):
  """A comparison's outputs for one tokenizer, as its stages leave them."""
  eval_dir = root / tokenizer / "eval_data"
  pretrain_dir = root / tokenizer / "pretrain"
  for d in (eval_dir, pretrain_dir):
    d.mkdir(parents=True)
  (eval_dir / "stats.json").write_text(json.dumps({"input_tokens": input_tokens}))
  evaluation = {"mlm_loss": loss, "mlm_loss_per_word": per_word, "mlm_accuracy": 0.25}
  (pretrain_dir / "eval_results.json").write_text(
      json.dumps({"global_step": 6, "eval": {**evaluation, "mlm_words": 40.0}})
  )
  return {
      "vocab_file": vocab_file,
      "eval_data": str(eval_dir / "*.tfrecord"),
      "pretrain_dir": str(pretrain_dir),
      "preset": "bert_tiny",
      "seed": 1,
      "learning_rate": 1e-3,
      "runs": [
          {"dev_accuracy": dev, "test_accuracy": test, "seed": seed}
          for seed, (dev, test) in enumerate(accuracies, start=1)
      ],
  }


@pytest.mark.slow(seconds=3)
def test_report_section_from_the_runs_outputs(tmp_path, spm_model, vocab_file):
  (tmp_path / "corpus").mkdir()
  # 10 whitespace words over two lines and a blank line between documents.
  (tmp_path / "corpus" / "dev_documents.txt").write_text("a b c, d e.\n f g  h\n\ni j\n")
  runs = tmp_path / "tokenizers"
  inputs = {
      "settings": dataclasses.asdict(make_settings(tmp_path, ["bpe", "unigram"])),
      "tokenizers": {
          "unigram": write_run(
              runs, "unigram", spm_model, 13, 2.0, 3.0, [(0.5, 0.6), (0.7, 0.8), (0.6, 0.7)]
          ),
          "bpe": write_run(runs, "bpe", vocab_file, 12, 2.5, 3.5, [(0.5, 0.5), (0.5, 0.5)]),
      },
  }
  section = tokenizer_report.write_section(inputs, run_seconds=30.0)
  rows = section["results"]["rows"]
  assert [r["tokenizer"] for r in rows] == ["bpe", "unigram"]  # --tokenizers order
  unigram = rows[1]
  assert unigram["vocab_size"] == 300 and rows[0]["vocab_size"] > 1000
  assert unigram["pieces_per_word"] == pytest.approx(1.3)
  assert unigram["eval_mlm_loss_per_text_word"] == pytest.approx(2.0 * 1.3)
  assert unigram["test_accuracy"] == [0.6, 0.8, 0.7]
  lines = section["lines"]
  assert lines[0] == tokenizer_report.SECTION_TITLE
  table = [line for line in lines if line.startswith("| unigram LM |")]
  assert table == [
      "| unigram LM | 300 | 1.300 | 2.000 | 3.000 | 2.600 | 0.250 | 0.600 ± 0.100 | 0.700 ± 0.100 |"
  ]
  # The claim: unigram minus BPE test accuracy, Welch over the seeds (BPE's spread 0).
  (claim,) = section["results"]["claims"]
  assert claim["source"] == "tokenisation lecture" and claim["predicted_sign"] == 1
  assert claim["estimate"] == pytest.approx(0.2)
  assert claim["verdict"] == "inconclusive at this budget"  # 0.2 ± t(2) * 0.0577 spans 0
  assert claim["low"] < 0 < claim["high"]
  assert "\n| tokenisation lecture | " in "\n".join(lines)


def test_no_claim_without_both_unigram_and_bpe():
  rows = [{"tokenizer": "wordpiece", "test_accuracy": [0.5]}]
  assert tokenizer_report.unigram_claim(rows, 1.0) is None


def test_data_only_plans_every_stage_that_reads_text_and_prepared_data_runs_none(tmp_path):
  """--data_only: the main data stages and the tokenizer comparison's, nothing else.
  --prepared_data: refused while one of them is unfinished or named by --redo, before
  --redo deletes anything."""
  settings = make_settings(tmp_path, tokenizers=["unigram"])
  data_only = pipeline.Demo(dataclasses.replace(settings, data_only=True)).plan()
  assert [st.name for st in data_only] == MAIN_STAGES[:5] + [
      "tokenizer_vocab:unigram",
      "tokenizer_data:unigram",
      "tokenizer_eval_data:unigram",
  ]
  demo = pipeline.Demo(dataclasses.replace(settings, prepared_data=True))
  with pytest.raises(InputError, match=r"^--prepared_data: the corpus stage is not finished"):
    demo.run()
  for stage in data_only:  # as if --data_only had run: a marker of each, with its key
    marker = demo.engine.marker(stage.name)
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    with open(marker, "w", encoding="utf-8") as f:
      json.dump({"key": stage.key, "result": {}}, f)
  redo = pipeline.Demo(dataclasses.replace(settings, prepared_data=True, redo=["vocab"]))
  with pytest.raises(InputError, match=r"^--prepared_data: the vocab stage is not finished"):
    redo.run()
  assert os.path.exists(demo.engine.marker("vocab"))  # not deleted by --redo
  assert [st.name for st in data_only if demo.engine.reusable(st) is None] == []
