"""A tiny SentencePiece model of the generated tasks' text (recurrent_bert/tasks/sample_tasks.py),
and how the fine-tuning commands' end-to-end tests run and serve with it."""

import json
import math
import os
import sys

from recurrent_bert.data import sentencepiece_vocab
from recurrent_bert.tasks import sample_tasks
from tests.support import export_checks
from tests.support import forkserver


def task_lines():
  """Text of every generated task (SQuAD, RTE, SWAG, CoNLL) and some punctuation."""
  lines = []
  for paragraph in sample_tasks.squad_examples(200, 7)["data"][0]["paragraphs"]:
    lines += [paragraph["context"], paragraph["qas"][0]["question"]]
  lines += [f"{a} {b}" for a, b, _ in sample_tasks.marker_pairs(200, 7)]
  lines += [f"{a} {b} " + " ".join(e) for a, b, e, _ in sample_tasks.choice_examples(100, 7)]
  for document in sample_tasks.tagged_documents(200, 7):
    lines += [" ".join(word for word, _ in sentence) for sentence in document]
  return lines + ["Which fruit is it? (A mango, or a peach!)"] * 10


def write_task_model(output: str, do_lower_case: bool = True) -> str:
  """A unigram model of `task_lines()`; returns the path of `<output>.model`."""
  proto = sentencepiece_vocab.train_sentencepiece(
      task_lines(), "unigram", 100, do_lower_case=do_lower_case
  )
  sentencepiece_vocab.write_model(output, proto)
  return output + ".model"


# The fine-tuning runs: a few steps of a tiny model.
RUN_FLAGS = [
    "--model_config=bert_tiny",
    "--max_seq_length=24",
    "--max_train_steps=6",
    "--warmup_steps=2",
    "--log_steps=3",
    "--train_batch_size=8",
    "--eval_batch_size=16",
]


def check_recorded(model_dir, model_file):
  """model_dir and best/ hold the model and say it is a SentencePiece one; eval ran."""
  with open(model_file, "rb") as f:
    model_bytes = f.read()
  for directory in (model_dir, os.path.join(model_dir, "best")):
    with open(os.path.join(directory, "tokenizer.json"), encoding="utf-8") as f:
      assert json.load(f) == {
          "type": "sentencepiece",
          "vocab_file": "sentencepiece.model",
          "do_lower_case": True,
      }
    with open(os.path.join(directory, "sentencepiece.model"), "rb") as f:
      assert f.read() == model_bytes
  with open(os.path.join(model_dir, "eval_results.json"), encoding="utf-8") as f:
    results = json.load(f)
  assert math.isfinite(results["main_metric_value"]), results


def train(root, model_file, name, command):
  """The model_dir of one run of `command` ([module, *flags]) with RUN_FLAGS."""
  return train_side_by_side(root, model_file, {name: command}, RUN_FLAGS)[name]


# Calls the signatures of SavedModels in a fresh process (only TF and TF Text imported):
# argv[1] is a JSON list of [export_dir, signature, {input: value}]; prints their outputs.
SERVE = r"""
import json, sys
import tensorflow as tf, tensorflow_text  # noqa
answers = []
for directory, signature, inputs in json.loads(sys.argv[1]):
  outputs = tf.saved_model.load(directory).signatures[signature](
      **{k: tf.constant(v) for k, v in inputs.items()})
  answers.append({k: (v.numpy().astype(str) if v.dtype == tf.string else v.numpy()).tolist()
                  for k, v in outputs.items()})
print(json.dumps(answers))
"""


def serve_exports(requests):
  """The outputs of each (export_dir, signature, inputs) request, served by SERVE."""
  return export_checks.run_fresh_python(SERVE, json.dumps(requests))


def train_side_by_side(root, model_file, commands, flags):
  """{name: model_dir} after running each command of {name: [module, *flags]} at once
  (the machine has 2 cores; a process spends seconds importing), with `flags` and
  --vocab_file=model_file added."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=export_checks.REPO)
  env.pop("TF_CONFIG", None)
  model_dirs, processes = {}, {}
  for name, (module, *own_flags) in commands.items():
    model_dirs[name] = str(root / name)
    command = [sys.executable, "-m", module, *own_flags, *flags]
    command += [f"--vocab_file={model_file}", f"--model_dir={model_dirs[name]}"]
    processes[name] = forkserver.start(command, export_checks.REPO, env)
  for name, process in processes.items():
    _, stderr = process.communicate(timeout=400)
    assert process.returncode == 0, (name, stderr[-4000:])
  return model_dirs
