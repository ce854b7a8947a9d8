"""Shared pieces of the SavedModel tests (test_export.py, test_export_tasks.py).

Each of those files exports its SavedModels once, then serves every request in one fresh
process that imports only TF and TF Text, and compares each output with the in-process
Keras model on inputs packed by the numpy feature pipeline (`tasks/pair_features.py`,
`tasks/span/squad_windows.py`), not by the exporter. The SavedModels are split over two files so
that the two test workers (`--dist loadfile`) export them side by side.
"""

import json
import os
import shutil
import string
import sys

import numpy as np
import tensorflow as tf

from recurrent_bert import model_dir as layout
from recurrent_bert import saving
from recurrent_bert.config import get_preset
from recurrent_bert.models import build_encoder
from recurrent_bert.tasks.pair_features import PairExample
from recurrent_bert.tasks.pair_features import convert_pair_examples
from tests.support import forkserver

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_LEN = 32
LABELS = ["contradiction", "entailment", "neutral"]
WORDS = (
    "the a an cat sat on mat dog ran far away who what where is was did and of in "
    "to hello world paris capital france café"
).split()
VOCAB = (
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + WORDS
    + list(".,!?'-")
    + [c for c in string.ascii_lowercase + string.digits if c not in WORDS]
    + ["##" + c for c in string.ascii_lowercase + string.digits]
    + ["##s", "##ed"]
)
VOCAB = list(dict.fromkeys(VOCAB))
LONG_TEXT = " ".join(["the dog ran far away and the cat sat on the mat"] * 5)
TEXTS = ["The cat sat on the mat.", "Hello, world!", LONG_TEXT]
PAIRS = ["Who sat?", "", "Paris is the capital of France."]

# Runs in a fresh interpreter that imports only tensorflow and tensorflow_text. Our
# package cannot be imported there. tensorflow_text itself pulls in Keras (through
# tf.keras); loading and serving the SavedModel must not import anything more.
SERVE_SCRIPT = r"""
import json, sys
for blocked in ("recurrent_bert", "keras_hub"):
  sys.modules[blocked] = None  # importing them now raises ImportError
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tokenizer ops
before = set(sys.modules)

requests = json.load(open(sys.argv[1]))
loaded, results = {}, {}
for i, request in enumerate(requests):
  if request["dir"] not in loaded:
    loaded[request["dir"]] = tf.saved_model.load(request["dir"])
  function = loaded[request["dir"]].signatures[request["signature"]]
  dtypes = {str: tf.string, float: tf.float32}
  inputs = {k: tf.constant(v, dtypes.get(type(v[0]), tf.int32))
            for k, v in request["inputs"].items()}
  for key, value in function(**inputs).items():
    value = value.numpy()
    if value.dtype == object:
      value = np.array([s.decode("utf-8") for s in value])
    results[f"{i}/{key}"] = value
imported = sorted(m for m in set(sys.modules) - before
                  if m.split(".")[0] in ("keras", "recurrent_bert", "keras_hub", "tf_keras"))
assert not imported, imported
np.savez(sys.argv[2], **results)
"""


def encoder(preset):
  """A random encoder of `preset` sized for VOCAB and MAX_LEN."""
  return build_encoder(
      get_preset(preset).replace(vocab_size=len(VOCAB) + 3, max_position_embeddings=64)
  )


def write_vocab(root):
  """Writes VOCAB to root/vocab.txt; returns the path."""
  vocab_file = str(root / "vocab.txt")
  with open(vocab_file, "w", encoding="utf-8") as f:
    f.write("\n".join(VOCAB) + "\n")
  return vocab_file


def reference_inputs(tokenizer, texts, pairs=None):
  """The numpy pipeline's input_ids, input_mask and segment_ids [B, MAX_LEN]."""
  examples = [
      PairExample(str(i), a, None if pairs is None else pairs[i], None) for i, a in enumerate(texts)
  ]
  features = convert_pair_examples(examples, tokenizer, MAX_LEN)
  return {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}


def write_model_dir(model_dir, model_encoder, vocab_file):
  """A model dir as pretraining leaves it: model_config.json + encoder/ export."""
  model_dir.mkdir()
  saving.write_model_config(str(model_dir), model_encoder.config)
  saving.export_encoder(
      model_encoder, str(model_dir), vocab_file=vocab_file, info={"do_lower_case": True}
  )


def write_finetuning_dir(model_dir, model, info, vocab_file, best_metrics=None):
  """A fine-tuning model_dir as finetune_glue / finetune_squad leave it: task files at
  the top, the best checkpoint in best/ with the same files (and best_metrics.json, the
  best checkpoint's evaluation, when given)."""
  best = model_dir / layout.BEST_DIR
  best.mkdir(parents=True)
  for directory in (model_dir, best):
    saving.write_model_config(str(directory), model.encoder.config)
    (directory / layout.TASK_INFO_FILE).write_text(info.to_json(), encoding="utf-8")
    shutil.copyfile(vocab_file, directory / layout.VOCAB_FILE)
  tf.train.CheckpointManager(saving.tf_checkpoint(model), str(best), max_to_keep=1).save(
      checkpoint_number=1
  )
  if best_metrics is not None:
    (best / layout.BEST_METRICS_FILE).write_text(json.dumps(best_metrics), encoding="utf-8")


def ask(requests, directory, signature, **inputs):
  """Appends a request: call `signature` of the SavedModel in `directory` on `inputs`."""
  requests.append({"dir": str(directory), "signature": signature, "inputs": inputs})


def ask_encoder(requests, export_dir, tokenizer):
  """The requests `check_encode` and `check_encode_ids` answer from."""
  ask(requests, export_dir, "encode", text=TEXTS)
  ask(requests, export_dir, "encode_pair", text=TEXTS, text_pair=PAIRS)
  ask(requests, export_dir, "encode", text=TEXTS[:1])  # another batch size and length
  ids = reference_inputs(tokenizer, TEXTS[:2])
  ask(requests, export_dir, "encode_ids", **{k: v.tolist() for k, v in ids.items()})


def run_fresh_python(script, *args):
  """The last stdout line, as JSON, of `python -c script args...` in a fresh process: a
  client that imports only what the script imports (tensorflow, tensorflow_text)."""
  result = forkserver.run(
      [sys.executable, "-c", script, *args],
      None,
      dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
      timeout=120,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout.strip().splitlines()[-1])


def serve(root, requests):
  """Answers every request in one fresh process; {f"{i}/{output}": array}."""
  requests_file, results_file = root / "requests.json", root / "results.npz"
  requests_file.write_text(json.dumps(requests), encoding="utf-8")
  script = root / "serve.py"
  script.write_text(SERVE_SCRIPT, encoding="utf-8")
  result = forkserver.run(
      [sys.executable, str(script), str(requests_file), str(results_file)],
      None,
      dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
      timeout=600,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  with np.load(results_file) as results:
    return dict(results)


def answers(served, directory_suffix, signature):
  """[(request, {output: array})] for one signature of one SavedModel.

  `served` is a test file's fixture: (models, tokenizer, requests, results).
  """
  _, _, requests, results = served
  found = []
  for i, request in enumerate(requests):
    if request["dir"].endswith(directory_suffix) and request["signature"] == signature:
      outputs = {k.split("/", 1)[1]: v for k, v in results.items() if k.startswith(f"{i}/")}
      found.append((request, outputs))
  assert found
  return found


def check_packing(outputs, reference):
  """The signature's inputs are the reference's, cut to the batch's longest row."""
  steps = outputs["input_ids"].shape[1]
  assert steps == reference["input_mask"].sum(1).max()
  for key in ("input_ids", "input_mask"):
    np.testing.assert_array_equal(outputs[key], reference[key][:, :steps])


def check_encode(served, preset):
  """encode and encode_pair of `{preset}_saved_model` match models[preset]."""
  models, tokenizer, _, _ = served
  model = models[preset]
  for request, outputs in answers(served, f"{preset}_saved_model", "encode") + answers(
      served, f"{preset}_saved_model", "encode_pair"
  ):
    reference = reference_inputs(
        tokenizer, request["inputs"]["text"], request["inputs"].get("text_pair")
    )
    check_packing(outputs, reference)
    want = model(reference, training=False)
    real = outputs["input_mask"].astype(bool)
    steps = real.shape[1]
    np.testing.assert_allclose(
        outputs["sequence_output"][real],
        want["sequence_output"].numpy()[:, :steps][real],
        atol=1e-5,
    )
    np.testing.assert_allclose(outputs["pooled_output"], want["pooled_output"], atol=1e-5)
  long_row = answers(served, f"{preset}_saved_model", "encode")[0][1]["input_mask"][2]
  assert long_row.sum() == MAX_LEN  # LONG_TEXT was truncated to max_seq_length


def check_encode_ids(served, preset):
  """encode_ids of `{preset}_saved_model` matches models[preset]."""
  models = served[0]
  [(request, outputs)] = answers(served, f"{preset}_saved_model", "encode_ids")
  inputs = {k: np.array(v, np.int32) for k, v in request["inputs"].items()}
  want = models[preset](inputs, training=False)
  np.testing.assert_allclose(outputs["sequence_output"], want["sequence_output"], atol=1e-5)
  np.testing.assert_allclose(outputs["pooled_output"], want["pooled_output"], atol=1e-5)


def classifier_probabilities(classifier, reference):
  """(softmax probabilities, logits) [B, K] of the Keras classifier on `reference`."""
  logits = classifier(reference, training=False).numpy()
  return np.exp(logits) / np.exp(logits).sum(-1, keepdims=True), logits
