"""finetune_tagging end to end on a generated NER task that a tiny model learns only from
context (tasks/sample_tasks.py `tagged_documents`: names shared by every entity type, the
type told by the document's cue words).

The runs are real subprocesses of the entry points. Their results are checked against
independent paths: conlleval recomputed from the written prediction files, the input files
themselves, prediction under MirroredStrategy over 2 logical CPUs, the checkpoints' encoder
weights, and the exported SavedModel served in a process that imports only TF and TF Text
against the in-process Keras model on features of the numpy pipeline.
"""

import json
import os
import shutil

import numpy as np
import pytest

from recurrent_bert import weights_file
from recurrent_bert.tasks import sample_tasks as generated_tasks
from tests.support import export_checks
from tests.support.finetune_runs import read_json
from tests.support.readme_text import finish
from tests.support.readme_text import run_module
from tests.support.readme_text import start_module

pytestmark = pytest.mark.slow(seconds=90)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEQ_LEN = 32
COMMAND = "recurrent_bert.finetune_tagging"
TRAIN_FLAGS = [
    f"--max_seq_length={SEQ_LEN}",
    "--train_batch_size=16",
    "--learning_rate=2e-3",
    "--warmup_steps=10",
    "--log_steps=50",
    "--eval_batch_size=32",
]


def read_prediction_file(path):
  """[(word, gold, predicted) per line of a sentence] per sentence, and the DOCSTART count."""
  sentences, current, docstarts = [], [], 0
  with open(path, encoding="utf-8") as f:
    for line in f:
      fields = line.split()
      if not fields:
        if current:
          sentences.append(current)
        current = []
      elif fields[0] == "-DOCSTART-":
        docstarts += 1
      else:
        current.append(tuple(fields))
  assert not current, "the file must end with a blank line"
  return sentences, docstarts


def input_sentences(path):
  """[(word, tag)] per sentence of a generated CoNLL file, read here by hand."""
  sentences, docstarts = read_prediction_file(path)
  return [[(f[0], f[-1]) for f in s] for s in sentences], docstarts


def checked(process):
  result = finish(process)
  assert result.returncode == 0, result.stderr[-4000:]
  return result


@pytest.fixture(scope="module")
def task_files(tmp_path_factory):
  root = tmp_path_factory.mktemp("conll")
  vocab = generated_tasks.write_vocab(root / "vocab.txt", entities=True)
  files = generated_tasks.write_conll_files(root, num_train=320, num_dev=60, num_test=12)
  return {"vocab": vocab, **files, "root": root}


def start_training(task_files, model_dir, steps, *flags):
  return start_module(
      COMMAND,
      f"--train_file={task_files['train']}",
      f"--eval_file={task_files['dev']}",
      f"--vocab_file={task_files['vocab']}",
      f"--model_dir={model_dir}",
      f"--max_train_steps={steps}",
      *TRAIN_FLAGS,
      *flags,
  )


@pytest.fixture(scope="module")
def runs(task_files, tmp_path_factory):
  """Every subprocess of the file, started side by side where they do not depend on each
  other (the machine has 2 cores; a process spends seconds importing): the bert_tiny and
  recurrent trainings, then from bert_tiny's model_dir the mirrored prediction (in a copy
  of it), the feature-based training and the export."""
  from recurrent_bert.config import get_preset

  root = tmp_path_factory.mktemp("runs")
  dirs = {name: str(root / name) for name in ("bert", "recurrent", "mirrored", "feature_based")}
  # SwishRNN-BERT, one layer of a smaller recurrence: learns the task as fast, in less time.
  config = get_preset("swishrnn_tiny").replace(num_layers=1, swish_rnn_size=128)
  config_file = root / "swishrnn.json"
  config_file.write_text(config.to_json())
  recurrent = start_training(task_files, dirs["recurrent"], 200, f"--model_config={config_file}")
  bert = checked(
      start_training(
          task_files,
          dirs["bert"],
          240,
          "--model_config=bert_tiny",
          f"--predict_file={task_files['test']}",
      )
  )
  shutil.copytree(dirs["bert"], dirs["mirrored"])
  later = {
      "mirrored": start_module(
          COMMAND,
          "--mode=predict",
          f"--eval_file={task_files['dev']}",
          f"--model_dir={dirs['mirrored']}",
          f"--checkpoint={os.path.join(dirs['mirrored'], 'best')}",
          "--distribution_strategy=mirrored",
          "--num_cpu_devices=2",
          "--eval_batch_size=6",  # 60 rows: 3 per replica
      ),
      "feature_based": start_module(
          COMMAND,
          "--mode=train",
          "--feature_based",
          "--layer_mix=concat_last_four",
          f"--init_checkpoint={dirs['bert']}",
          f"--train_file={task_files['train']}",
          f"--model_dir={dirs['feature_based']}",
          f"--max_seq_length={SEQ_LEN}",
          "--train_batch_size=16",
          "--learning_rate=1e-2",
          "--max_train_steps=4",
          "--warmup_steps=0",
      ),
      "export": start_module(
          "recurrent_bert.export",
          f"--model_dir={dirs['bert']}",
          f"--export_dir={root / 'export'}",
      ),
  }
  results = {name: checked(process) for name, process in later.items()}
  checked(recurrent)
  return {"dirs": dirs, "bert": bert, "export_dir": str(root / "export"), **results}


@pytest.fixture(scope="module")
def bert_run(runs):
  return runs["dirs"]["bert"], runs["bert"]


def test_bert_learns_the_generated_task_and_writes_conll_predictions(bert_run, task_files):
  model_dir, result = bert_run
  results = read_json(os.path.join(model_dir, "eval_results.json"))
  assert results["main_metric"] == "f1" and results["eval_splits"] == ["dev"]
  assert results["dev"]["f1"] >= 95.0, results
  assert results["dev"]["num_sentences"] == 60
  assert "dev: f1=" in result.stdout
  info = read_json(os.path.join(model_dir, "task_info.json"))
  assert info["kind"] == "tagger" and info["main_metric"] == "f1"
  assert info["document_context"] is True
  assert info["label_names"] == ["O", "B-PER", "I-PER", "B-ORG", "I-ORG"] + [
      "B-LOC",
      "I-LOC",
      "B-MISC",
      "I-MISC",
  ]
  # Both files come back word for word, gold as in the input, a DOCSTART per document.
  for split in ("dev", "test"):
    written, docstarts = read_prediction_file(
        os.path.join(model_dir, "predictions", f"{split}_predictions.txt")
    )
    expected, expected_docstarts = input_sentences(task_files[split])
    assert docstarts == expected_docstarts > 1
    assert [[(w, g) for w, g, _ in s] for s in written] == expected
    assert {p for s in written for _, _, p in s} <= set(info["label_names"])


def test_eval_f1_is_conlleval_of_the_written_predictions(bert_run):
  from recurrent_bert.tasks.tagging.conlleval import conlleval_scores

  model_dir, _ = bert_run
  results = read_json(os.path.join(model_dir, "eval_results.json"))
  written, _ = read_prediction_file(os.path.join(model_dir, "predictions", "dev_predictions.txt"))
  scores = conlleval_scores(
      [[g for _, g, _ in s] for s in written], [[p for _, _, p in s] for s in written]
  )
  for name in ("f1", "precision", "recall", "accuracy"):
    assert results["dev"][name] == pytest.approx(scores[name], abs=1e-9), name


def test_mirrored_prediction_equals_the_default_strategy(runs):
  """Predictions of the best checkpoint under 2 replicas = one device's, exactly.

  Same weights and rows; only the batch split (3 rows per replica, the last batch padded)
  and the gather differ, so the logits agree to float rounding and an argmax could flip
  only on a near-exact tie, which a trained model's margins make vanishingly unlikely:
  the files must be the same, so F1 too.
  """
  files = {}
  for name in ("bert", "mirrored"):
    path = os.path.join(runs["dirs"][name], "predictions", "dev_predictions.txt")
    with open(path, encoding="utf-8") as f:
      files[name] = f.read()
  assert files["mirrored"] == files["bert"]
  assert files["bert"].count("\n") > 300


def test_a_recurrent_family_learns_it_too(runs):
  results = read_json(os.path.join(runs["dirs"]["recurrent"], "eval_results.json"))
  assert results["dev"]["f1"] >= 95.0, results


def test_feature_based_training_moves_no_encoder_weight(runs):
  import tensorflow as tf

  from recurrent_bert import saving
  from recurrent_bert.models import build_encoder

  init_dir, model_dir = runs["dirs"]["bert"], runs["dirs"]["feature_based"]
  info = read_json(os.path.join(model_dir, "task_info.json"))
  assert info["feature_based"] and info["layer_mix"] == "concat_last_four"
  encoder = build_encoder(saving.read_model_config(init_dir))
  init = tf.train.load_checkpoint(os.path.join(init_dir, "best"))
  final = tf.train.load_checkpoint(model_dir)
  keys = {
      path: "model/" + path.replace("/", ".S") + "/.ATTRIBUTES/VARIABLE_VALUE"
      for path in weights_file.variables_by_path(encoder)
  }
  assert len(keys) > 10
  for path, key in keys.items():
    np.testing.assert_array_equal(final.get_tensor(key), init.get_tensor(key), err_msg=path)
  # ... while the BiLSTM and head were built anew: weights the init checkpoint lacks.
  new = [k for k in final.get_variable_to_shape_map() if k.startswith("model/")]
  assert [k for k in new if not init.has_tensor(k)]


SERVE_SCRIPT = r"""
import json, sys
for blocked in ("recurrent_bert", "keras_hub"):
  sys.modules[blocked] = None
import tensorflow as tf
import tensorflow_text  # noqa: F401
model = tf.saved_model.load(sys.argv[1])
sentences = json.loads(sys.argv[2])
def plain(out):
  return {k: (v.numpy().astype(str).tolist() if v.dtype == tf.string else v.numpy().tolist())
          for k, v in out.items()}
width = max(map(len, sentences))
words = [s + [""] * (width - len(s)) for s in sentences]
print(json.dumps({
    "tag": plain(model.signatures["tag"](text=tf.constant([" ".join(s) for s in sentences]))),
    "tag_words": plain(model.signatures["tag_words"](
        words=tf.constant(words), num_words=tf.constant([len(s) for s in sentences]))),
    "default": plain(model.signatures["serving_default"](text=tf.constant([sentences[0][0]]))),
}))
"""


def test_export_serves_the_same_tags_as_the_keras_model(runs):
  from recurrent_bert import saving
  from recurrent_bert.data.tokenization import BertWordpieceTokenizer
  from recurrent_bert.tasks.tagging.conll import TaggedSentence
  from recurrent_bert.tasks.tagging.tagging_features import gather_word_predictions
  from recurrent_bert.tasks.tagging.tagging_features import tagging_features

  model_dir, export_dir = runs["dirs"]["bert"], runs["export_dir"]
  assert "tag(" in runs["export"].stdout and "tag_words(" in runs["export"].stdout
  sentences = [
      "the cat mister zork plim sees .".split(),
      "city vorn .".split(),
      ("old " * 12 + "company blit drav runs " + "red " * 20).split(),  # past the cut
  ]
  served = export_checks.run_fresh_python(SERVE_SCRIPT, export_dir, json.dumps(sentences))

  stored = saving.open_model(model_dir)
  model, info = stored.load_task_model()
  directory = stored.config_dir
  tokenizer = BertWordpieceTokenizer(os.path.join(directory, "vocab.txt"), info.do_lower_case)
  # One window per sentence, no document context: what serving reads (the long one is
  # cut: only its words in the first window are compared).
  kept = [s[: SEQ_LEN - 2] for s in sentences]
  tagged = [TaggedSentence(tuple(s), (), d, f"s:{d}") for d, s in enumerate(kept)]
  features = tagging_features(tagged, tokenizer, info.label_names, SEQ_LEN, document_context=False)
  logits = model(
      {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}, training=False
  ).numpy()
  expected = [
      [info.label_names[i] for i in row]
      for row in gather_word_predictions(features, logits, [len(s) for s in kept])
  ]
  for signature in ("tag", "tag_words"):
    out = served[signature]
    assert out["num_words"] == [len(s) for s in sentences]
    assert out["truncated"] == [False, False, True]
    for b, sentence in enumerate(sentences):
      assert out["words"][b][: len(sentence)] == sentence
      assert out["tags"][b][: len(kept[b])] == expected[b], (signature, b)
      assert set(out["tags"][b][len(kept[b]) :]) <= {""}
  assert served["tag"]["tags"][0][3:5] == ["B-PER", "I-PER"]  # learned: "mister zork plim"
  text = " ".join(sentences[0])
  starts, ends = served["tag"]["start_char"][0], served["tag"]["end_char"][0]
  assert [text[a:b] for a, b in zip(starts, ends)][: len(sentences[0])] == sentences[0]
  assert served["default"]["tags"] == [[expected[0][0]]]


def test_bad_input_exits_2_naming_file_and_line(task_files, tmp_path):
  bad = tmp_path / "bad.txt"
  lines = open(task_files["train"], encoding="utf-8").read().splitlines()
  line = next(i for i, text in enumerate(lines) if text.endswith(" O") and i > 2)
  lines[line] = lines[line][: -len("O")] + "B-FOOD"
  bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
  result = run_module(
      COMMAND,
      f"--train_file={bad}",
      f"--vocab_file={task_files['vocab']}",
      f"--model_dir={tmp_path / 'model'}",
      "--model_config=bert_tiny",
  )
  assert result.returncode == 2, result.stderr[-2000:]
  # One line of ours (TensorFlow's start-up logs aside), no traceback.
  errors = [text for text in result.stderr.splitlines() if text.startswith("error:")]
  assert len(errors) == 1 and f"{bad}:{line + 1}: " in errors[0], result.stderr
  assert "B-FOOD" in errors[0] and "Traceback" not in result.stderr


def test_a_trained_model_keeps_its_document_context_setting(bert_run, task_files):
  """Eval features must be cut as training cut them: the recorded setting wins."""
  model_dir, _ = bert_run
  result = run_module(
      COMMAND,
      "--mode=eval",
      f"--eval_file={task_files['dev']}",
      f"--model_dir={model_dir}",
      "--nodocument_context",
  )
  assert result.returncode == 2, result.stderr[-2000:]
  errors = [text for text in result.stderr.splitlines() if text.startswith("error:")]
  assert len(errors) == 1 and "--document_context=False differs" in errors[0], result.stderr
