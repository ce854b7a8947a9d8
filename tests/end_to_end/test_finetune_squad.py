"""finetune_squad end to end on generated SQuAD v1.1 files a tiny model can learn: the
span head learns to point at the marked token, its predictions are scored again by the
official rule, its SavedModel answers raw text; the BLSTM decoder head trains and resumes.
(A file of its own, apart from test_finetune.py, so that the two test workers share the
fine-tuning runs.)"""

import json
import os
import sys

import numpy as np
import pytest

from recurrent_bert import serving
from recurrent_bert.tasks import sample_tasks as generated_tasks
from tests.support import forkserver
from tests.support.finetune_runs import read_json
from tests.support.finetune_runs import run_entry

pytestmark = pytest.mark.slow(seconds=130)

# A tiny model learns the generated task in these 60 steps (tests/backends' JAX run too).
SQUAD_FLAGS = (
    "--model_config=bert_tiny",
    "--max_seq_length=40",
    "--max_query_length=8",
    "--doc_stride=12",
    "--train_batch_size=16",
    "--learning_rate=1e-3",
    "--max_train_steps=60",
    "--warmup_steps=6",
    "--log_steps=20",
)


@pytest.fixture(scope="module")
def task_files(tmp_path_factory):
  root = tmp_path_factory.mktemp("squad_tasks")
  vocab = generated_tasks.write_vocab(root / "vocab.txt")
  squad_files = generated_tasks.write_squad_files(root / "squad", num_train=240, num_dev=50)
  return {"vocab": vocab, "squad": squad_files}


def test_squad_span_head_learns_to_point_at_the_marked_token(task_files, tmp_path):
  model_dir = str(tmp_path / "squad")
  result = run_entry(
      "recurrent_bert.finetune_squad",
      f"--train_file={task_files['squad']['train']}",
      f"--predict_file={task_files['squad']['dev']}",
      f"--vocab_file={task_files['vocab']}",
      f"--model_dir={model_dir}",
      *SQUAD_FLAGS,
  )
  results = read_json(os.path.join(model_dir, "eval_results.json"))
  assert results["main_metric"] == "f1" and results["dev"]["total"] == 50
  assert results["dev"]["exact_match"] >= 80.0, results  # chance: ~1/20 words
  assert "exact_match=" in result.stdout
  # The official files, scored again here with the official definition.
  predictions = read_json(os.path.join(model_dir, "predictions", "predictions.json"))
  nbest = read_json(os.path.join(model_dir, "predictions", "nbest_predictions.json"))
  gold = {
      qa["id"]: qa["answers"][0]["text"]
      for p in read_json(task_files["squad"]["dev"])["data"][0]["paragraphs"]
      for qa in p["qas"]
  }
  assert set(predictions) == set(gold) == set(nbest)
  exact = 100.0 * np.mean([predictions[q] == gold[q] for q in gold])
  assert results["dev"]["exact_match"] == pytest.approx(exact)
  for qid, entries in nbest.items():
    assert entries[0]["text"] == predictions[qid]
    assert sum(e["probability"] for e in entries) == pytest.approx(1.0, abs=1e-6)

  # Served: the answer is the fruit of a new context, as a character span of it.
  # Exported in this process (the export command's flags are test_export.py's and the
  # README walkthrough's), served by a fresh one that imports only TF and TF Text.
  export_dir = str(tmp_path / "export")
  serving.export_model_dir(model_dir, export_dir)
  script = r"""
import json, sys
import tensorflow as tf, tensorflow_text  # noqa
model = tf.saved_model.load(sys.argv[1])
out = model.signatures["answer_question"](question=tf.constant(["which fruit is it ?"]),
                                          context=tf.constant([sys.argv[2]]))
print(json.dumps({"answer": out["answer"].numpy()[0].decode(),
                  "start": int(out["start_char"].numpy()[0])}))
"""
  context = "the old dog walks slow mango river cold ."
  served = forkserver.run(
      [sys.executable, "-c", script, export_dir, context],
      None,
      dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
      timeout=120,
  )
  assert served.returncode == 0, served.stderr[-3000:]
  answer = json.loads(served.stdout.strip().splitlines()[-1])
  assert answer == {"answer": "mango", "start": context.index("mango")}


def test_blstm_decoder_and_swishrnn_train_and_resume(task_files, tmp_path):
  """The "+ BLSTM decoder" head on a SwishRNN encoder: trains, and a re-run resumes."""
  model_dir = str(tmp_path / "squad_blstm")
  flags = [
      f"--train_file={task_files['squad']['train']}",
      f"--predict_file={task_files['squad']['dev']}",
      "--model_config=swishrnn_tiny",
      f"--vocab_file={task_files['vocab']}",
      f"--model_dir={model_dir}",
      "--use_blstm_decoder",
      "--max_seq_length=40",
      "--max_query_length=8",
      "--doc_stride=12",
      "--train_batch_size=8",
      "--learning_rate=5e-4",
      "--warmup_steps=2",
      "--log_steps=5",
      "--save_checkpoints_steps=5",
      "--mode=train",
  ]
  run_entry("recurrent_bert.finetune_squad", *flags, "--max_train_steps=5")
  info = read_json(os.path.join(model_dir, "task_info.json"))
  assert info["kind"] == "span" and info["use_blstm_decoder"] is True
  run_entry("recurrent_bert.finetune_squad", *flags, "--max_train_steps=10")
  steps = [json.loads(line)["step"] for line in open(os.path.join(model_dir, "metrics.jsonl"))]
  assert steps == list(range(1, 11))  # the second run continued from step 5
  assert all(
      np.isfinite(json.loads(line)["loss"])
      for line in open(os.path.join(model_dir, "metrics.jsonl"))
  )
