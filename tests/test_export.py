"""Text-in SavedModels, served in a fresh process that imports only TF and TF Text.

Every output is compared with the in-process Keras model on inputs packed by the numpy
feature pipeline (`data/task_features.py`, `data/squad.py`), not by the exporter.
"""

import json
import os
import shutil
import string
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert import model_dir as layout
from recurrent_bert import serving
from recurrent_bert.config import get_preset
from recurrent_bert.tasks import squad
from recurrent_bert.tasks.pair_features import PairExample
from recurrent_bert.tasks.pair_features import convert_pair_examples
from recurrent_bert.data.tokenization import BertWordpieceTokenizer
from recurrent_bert.models import Classifier
from recurrent_bert.models import SpanExtractor
from recurrent_bert.models import build_encoder
from recurrent_bert.training import checkpoints

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_LEN = 32
ENCODER_PRESETS = ("bert_tiny", "trans_blstm_2_tiny", "swishrnn_tiny")
LABELS = ["contradiction", "entailment", "neutral"]
WORDS = ("the a an cat sat on mat dog ran far away who what where is was did and of in "
         "to hello world paris capital france café").split()
VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + list(".,!?'-")
         + [c for c in string.ascii_lowercase + string.digits if c not in WORDS]
         + ["##" + c for c in string.ascii_lowercase + string.digits] + ["##s", "##ed"])
VOCAB = list(dict.fromkeys(VOCAB))
LONG_TEXT = " ".join(["the dog ran far away and the cat sat on the mat"] * 5)
TEXTS = ["The cat sat on the mat.", "Hello, world!", LONG_TEXT]
PAIRS = ["Who sat?", "", "Paris is the capital of France."]
QUESTIONS = ["Who sat on the mat?", "What is the capital of France?", "Where?"]
CONTEXTS = ["The  cat sat on the mat, and the dog ran away.",
            "Paris is the capital of France; Café au lait!", LONG_TEXT]
# SQuAD v2.0: one window each (the signature's case); the empty context has no span.
V2_QUESTIONS = QUESTIONS[:2] + ["Who ran away?", "What did the dog do?", "Who sat?"]
V2_CONTEXTS = CONTEXTS[:2] + [CONTEXTS[0], "The dog ran far away.", ""]
V2_MAX_QUERY_LENGTH = 8

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


def _encoder(preset):
  return build_encoder(get_preset(preset).replace(vocab_size=len(VOCAB) + 3,
                                                  max_position_embeddings=64))


def _reference_inputs(tokenizer, texts, pairs=None):
  examples = [PairExample(str(i), a, None if pairs is None else pairs[i], None)
              for i, a in enumerate(texts)]
  features = convert_pair_examples(examples, tokenizer, MAX_LEN)
  return {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}


def _write_finetuning_dir(model_dir, model, info, vocab_file, best_metrics=None):
  """A fine-tuning model_dir as finetune_glue / finetune_squad leave it: task files at
  the top, the best checkpoint in best/ with the same files (and best_metrics.json, the
  best checkpoint's evaluation, when given)."""
  best = model_dir / layout.BEST_DIR
  best.mkdir(parents=True)
  for directory in (model_dir, best):
    checkpoints.write_model_config(str(directory), model.encoder.config)
    (directory / layout.TASK_INFO_FILE).write_text(info.to_json(), encoding="utf-8")
    shutil.copyfile(vocab_file, directory / layout.VOCAB_FILE)
  tf.train.CheckpointManager(tf.train.Checkpoint(model=checkpoints.variables_by_path(model)),
                             str(best), max_to_keep=1).save(checkpoint_number=1)
  if best_metrics is not None:
    (best / layout.BEST_METRICS_FILE).write_text(json.dumps(best_metrics), encoding="utf-8")


def _squad_v2_reference(span_extractor, tokenizer):
  """The windowed numpy pipeline's inputs and the Keras model's logits on them."""
  examples = [squad.SquadExample(str(i), q, c, ()) for i, (q, c) in
              enumerate(zip(V2_QUESTIONS, V2_CONTEXTS))]
  features = squad.squad_features(examples, tokenizer, MAX_LEN,
                                  max_query_length=V2_MAX_QUERY_LENGTH)
  assert len(features["input_ids"]) == len(examples)  # one window each
  logits = span_extractor({k: features[k] for k in ("input_ids", "input_mask",
                                                    "segment_ids")}, training=False)
  return examples, features, logits["start_logits"].numpy(), logits["end_logits"].numpy()


def _postprocess_v2(reference, threshold):
  """`postprocess_squad` of v2.0, every span considered (as the signature does)."""
  return squad.postprocess_squad(*reference, n_best_size=MAX_LEN,
                                 version_2_with_negative=True,
                                 null_score_diff_threshold=threshold)


def _write_model_dir(model_dir, encoder, vocab_file):
  """A model dir as pretraining leaves it: model_config.json + encoder/ export."""
  model_dir.mkdir()
  checkpoints.write_model_config(str(model_dir), encoder.config)
  checkpoints.export_encoder(encoder, str(model_dir), vocab_file=vocab_file,
                             info={"do_lower_case": True})


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  """Exports three SavedModels once and serves every request in one fresh process.

  - bert_tiny: from memory, encoder + 3-class classifier + span extractor (BLSTM decoder);
  - trans_blstm_2_tiny: from a model dir, through `serving.export_model_dir`;
  - swishrnn_tiny: from a model dir, through the command line (run concurrently).

  Returns (models, tokenizer, requests, results): results[f"{i}/{output}"] answers
  requests[i].
  """
  root = tmp_path_factory.mktemp("export")
  vocab_file = str(root / "vocab.txt")
  with open(vocab_file, "w", encoding="utf-8") as f:
    f.write("\n".join(VOCAB) + "\n")
  tokenizer = BertWordpieceTokenizer(vocab_file, do_lower_case=True)
  models = {preset: _encoder(preset) for preset in ENCODER_PRESETS}
  export_dirs = {preset: root / f"{preset}_saved_model" for preset in ENCODER_PRESETS}

  _write_model_dir(root / "swishrnn_tiny", models["swishrnn_tiny"], vocab_file)
  command_line = subprocess.Popen(  # the command line, as users run it
      [sys.executable, "-m", "recurrent_bert.export", f"--model_dir={root / 'swishrnn_tiny'}",
       f"--export_dir={export_dirs['swishrnn_tiny']}", f"--max_seq_length={MAX_LEN}"],
      cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True)

  _write_model_dir(root / "trans_blstm_2_tiny", models["trans_blstm_2_tiny"], vocab_file)
  serving.export_model_dir(str(root / "trans_blstm_2_tiny"),
                          str(export_dirs["trans_blstm_2_tiny"]), max_seq_length=MAX_LEN)

  # Task models: random heads on the random bert_tiny encoder, exported from memory.
  models["classifier"] = Classifier(models["bert_tiny"], len(LABELS))
  models["span"] = SpanExtractor(models["bert_tiny"], use_blstm_decoder=True)
  serving.export_saved_model(
      str(export_dirs["bert_tiny"]), tokenizer, MAX_LEN, encoder=models["bert_tiny"],
      classifier=models["classifier"], label_names=LABELS, span_extractor=models["span"],
      max_query_length=8)

  # Fine-tuning dirs (random heads on bert_tiny), through `serving.export_model_dir`:
  # SQuAD v2.0 with a dev threshold recorded in best/best_metrics.json; a pair task.
  models["squad_v2"] = SpanExtractor(models["bert_tiny"])
  reference = models["squad_v2_reference"] = _squad_v2_reference(models["squad_v2"],
                                                                 tokenizer)
  odds = sorted(_postprocess_v2(reference, 0.0).null_odds.values())
  gap = int(np.argmax(np.diff(odds[:-1])))  # the last is the empty context's 1e9
  models["recorded_threshold"] = threshold = (odds[gap] + odds[gap + 1]) / 2
  v2_info = layout.TaskInfo(task="squad_v2", kind="span", max_seq_length=MAX_LEN,
                            main_metric="f1", max_query_length=V2_MAX_QUERY_LENGTH)
  _write_finetuning_dir(root / "squad_v2", models["squad_v2"], v2_info, vocab_file, {
      "main_metric_value": 50.0, "eval_splits": ["dev"],
      "dev": {"f1": 50.0, "best_f1": 60.0, "best_f1_threshold": threshold}})
  models["squad_v2_signatures"] = serving.export_model_dir(
      str(root / "squad_v2"), str(root / "squad_v2_saved_model"))
  pair_info = layout.TaskInfo(task="mnli", kind="classifier", label_names=LABELS,
                              max_seq_length=MAX_LEN, text_pair=True)
  _write_finetuning_dir(root / "pair", models["classifier"], pair_info, vocab_file)
  models["pair_signatures"] = serving.export_model_dir(str(root / "pair"),
                                                       str(root / "pair_saved_model"))

  stdout, stderr = command_line.communicate(timeout=600)
  assert command_line.returncode == 0, stderr[-3000:]
  models["cli_stdout"] = stdout

  requests = []

  def ask(directory, signature, **inputs):
    requests.append({"dir": str(directory), "signature": signature, "inputs": inputs})

  for preset, export_dir in export_dirs.items():
    ask(export_dir, "encode", text=TEXTS)
    ask(export_dir, "encode_pair", text=TEXTS, text_pair=PAIRS)
    ask(export_dir, "encode", text=TEXTS[:1])  # another batch size and length
    ids = _reference_inputs(tokenizer, TEXTS[:2])
    ask(export_dir, "encode_ids", **{k: v.tolist() for k, v in ids.items()})
  ask(export_dirs["bert_tiny"], "classify_pair", text=TEXTS, text_pair=PAIRS)
  ask(export_dirs["bert_tiny"], "classify", text=TEXTS)
  ask(export_dirs["bert_tiny"], "answer_question", question=QUESTIONS, context=CONTEXTS)
  ask(export_dirs["bert_tiny"], "serving_default", text=TEXTS)
  ask(root / "pair_saved_model", "serving_default", text=TEXTS, text_pair=PAIRS)
  v2_dir, v2_inputs = root / "squad_v2_saved_model", dict(question=V2_QUESTIONS,
                                                          context=V2_CONTEXTS)
  ask(v2_dir, "answer_question", **v2_inputs)
  ask(v2_dir, "serving_default", **v2_inputs)
  for threshold in (1e6, -1e6):  # never / always "no answer"
    ask(v2_dir, "answer_question_with_threshold", **v2_inputs,
        null_score_diff_threshold=[threshold] * len(V2_QUESTIONS))
  # Per question: just below its own null_score_diff (no answer) on even rows, just
  # above it (the span) on odd rows.
  odds = _postprocess_v2(models["squad_v2_reference"], 0.0).null_odds
  ask(v2_dir, "answer_question_with_threshold", **v2_inputs, null_score_diff_threshold=[
      odds[str(i)] + (0.01 if i % 2 else -0.01) for i in range(len(V2_QUESTIONS))])

  requests_file, results_file = root / "requests.json", root / "results.npz"
  requests_file.write_text(json.dumps(requests), encoding="utf-8")
  script = root / "serve.py"
  script.write_text(SERVE_SCRIPT, encoding="utf-8")
  result = subprocess.run([sys.executable, str(script), str(requests_file), str(results_file)],
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
                          capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  with np.load(results_file) as results:
    return models, tokenizer, requests, dict(results)


def _answers(served, directory_suffix, signature, text_key="text"):
  """[(request, {output: array})] for one signature of one SavedModel."""
  _, _, requests, results = served
  found = []
  for i, request in enumerate(requests):
    if request["dir"].endswith(directory_suffix) and request["signature"] == signature:
      outputs = {k.split("/", 1)[1]: v for k, v in results.items() if k.startswith(f"{i}/")}
      found.append((request, outputs))
  assert found
  return found


def _check_packing(outputs, reference):
  """The signature's inputs are the reference's, cut to the batch's longest row."""
  steps = outputs["input_ids"].shape[1]
  assert steps == reference["input_mask"].sum(1).max()
  for key in ("input_ids", "input_mask"):
    np.testing.assert_array_equal(outputs[key], reference[key][:, :steps])


@pytest.mark.parametrize("preset", ENCODER_PRESETS)
def test_encode_matches_keras_model(served, preset):
  models, tokenizer, _, _ = served
  encoder = models[preset]
  for request, outputs in (_answers(served, f"{preset}_saved_model", "encode") +
                           _answers(served, f"{preset}_saved_model", "encode_pair")):
    reference = _reference_inputs(tokenizer, request["inputs"]["text"],
                                  request["inputs"].get("text_pair"))
    _check_packing(outputs, reference)
    want = encoder(reference, training=False)
    real = outputs["input_mask"].astype(bool)
    steps = real.shape[1]
    np.testing.assert_allclose(outputs["sequence_output"][real],
                               want["sequence_output"].numpy()[:, :steps][real], atol=1e-5)
    np.testing.assert_allclose(outputs["pooled_output"], want["pooled_output"], atol=1e-5)
  long_row = _answers(served, f"{preset}_saved_model", "encode")[0][1]["input_mask"][2]
  assert long_row.sum() == MAX_LEN  # LONG_TEXT was truncated to max_seq_length


@pytest.mark.parametrize("preset", ENCODER_PRESETS)
def test_encode_ids_matches_keras_model(served, preset):
  models, _, _, _ = served
  [(request, outputs)] = _answers(served, f"{preset}_saved_model", "encode_ids")
  inputs = {k: np.array(v, np.int32) for k, v in request["inputs"].items()}
  want = models[preset](inputs, training=False)
  np.testing.assert_allclose(outputs["sequence_output"], want["sequence_output"], atol=1e-5)
  np.testing.assert_allclose(outputs["pooled_output"], want["pooled_output"], atol=1e-5)


def test_cli_prints_signatures(served):
  stdout = served[0]["cli_stdout"]
  for name in ("encode", "encode_pair", "encode_ids"):
    assert f"  {name}(" in stdout
  assert "  serving_default(text string[None]) = encode\n" in stdout
  assert "sequence_output float32[None, None, 128]" in stdout


def test_classify_matches_keras_model(served):
  models, tokenizer, _, _ = served
  for signature, pairs in (("classify_pair", PAIRS), ("classify", None)):
    [(request, outputs)] = _answers(served, "bert_tiny_saved_model", signature)
    reference = _reference_inputs(tokenizer, TEXTS, pairs)
    _check_packing(outputs, reference)
    logits = models["classifier"](reference, training=False).numpy()
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(outputs["probabilities"], probabilities, atol=1e-5)
    np.testing.assert_array_equal(outputs["label_id"], logits.argmax(-1))
    assert list(outputs["label"]) == [LABELS[i] for i in logits.argmax(-1)]


def test_regress_matches_keras_model(served):
  # Same code path as classify (its K = 1 branch); called in-process, not re-exported.
  _, tokenizer, _, _ = served
  regressor = Classifier(_encoder("swishrnn_tiny"), 1)
  module = serving.ServingModule(tokenizer, MAX_LEN, classifier=regressor)
  outputs = module.regress_pair(tf.constant(TEXTS), tf.constant(PAIRS))
  reference = _reference_inputs(tokenizer, TEXTS, PAIRS)
  _check_packing({k: v.numpy() for k, v in outputs.items()}, reference)
  want = regressor(reference, training=False).numpy()[:, 0]
  np.testing.assert_allclose(outputs["score"], want, atol=1e-5)
  assert "classify" not in module.signature_functions()


def test_answer_question_matches_windowed_numpy_pipeline(served):
  models, tokenizer, _, _ = served
  [(request, outputs)] = _answers(served, "bert_tiny_saved_model", "answer_question")
  np.testing.assert_array_equal(outputs["context_truncated"], [False, False, True])
  examples = [squad.SquadExample(str(i), q, c, ()) for i, (q, c) in
              enumerate(zip(QUESTIONS[:2], CONTEXTS[:2]))]
  features = squad.squad_features(examples, tokenizer, MAX_LEN, max_query_length=8)
  assert len(features["input_ids"]) == 2  # one window each: the signature's case
  logits = models["span"]({k: features[k] for k in ("input_ids", "input_mask",
                                                    "segment_ids")}, training=False)
  want = squad.postprocess_squad(examples, features, logits["start_logits"].numpy(),
                                 logits["end_logits"].numpy(), n_best_size=MAX_LEN)
  for i, example in enumerate(examples):
    best = want.nbest[example.qas_id][0]
    assert outputs["answer"][i] == best["text"]
    start, end = outputs["start_char"][i], outputs["end_char"][i]
    assert example.context[start:end] == best["text"]
    np.testing.assert_allclose(outputs["score"][i], best["start_logit"] + best["end_logit"],
                               atol=1e-5)


def _check_v2_outputs(outputs, want, reference):
  """One answer_question(_with_threshold) result against `postprocess_squad`'s `want`."""
  examples, _, start_logits, end_logits = reference
  np.testing.assert_allclose(outputs["null_score"], start_logits[:, 0] + end_logits[:, 0],
                             atol=1e-5)
  for i, example in enumerate(examples):
    prediction = want.predictions[example.qas_id]
    assert outputs["answer"][i] == prediction, i
    assert outputs["no_answer"][i] == (prediction == ""), i
    np.testing.assert_allclose(outputs["null_score_diff"][i],
                               want.null_odds[example.qas_id], rtol=1e-6, atol=1e-4)
    start, end = outputs["start_char"][i], outputs["end_char"][i]
    if prediction:
      assert example.context[start:end] == prediction
    else:
      assert start == end == 0  # the "no answer" convention


def test_squad_v2_answers_no_answer_where_the_keras_model_does(served):
  """The recorded dev threshold decides as `postprocess_squad` does with it."""
  models = served[0]
  reference, threshold = models["squad_v2_reference"], models["recorded_threshold"]
  want = _postprocess_v2(reference, threshold)
  [(_, outputs)] = _answers(served, "squad_v2_saved_model", "answer_question")
  _check_v2_outputs(outputs, want, reference)
  # Both decisions are covered: the threshold sits between two questions' odds, and the
  # empty context is always "no answer".
  assert outputs["no_answer"][-1] and outputs["null_score_diff"][-1] == 1e9
  assert 0 < outputs["no_answer"][:-1].sum() < len(V2_QUESTIONS) - 1
  [(_, default)] = _answers(served, "squad_v2_saved_model", "serving_default")
  for key, value in outputs.items():
    np.testing.assert_array_equal(default[key], value)
  description = models["squad_v2_signatures"]["answer_question"]
  assert f"no_answer = null_score_diff > {threshold:g}" in description
  assert "no_answer bool[None]" in description and "null_score_diff float32[None]" in (
      description)


def test_squad_v2_threshold_per_call(served):
  models = served[0]
  reference = models["squad_v2_reference"]
  calls = _answers(served, "squad_v2_saved_model", "answer_question_with_threshold")
  assert len(calls) == 3
  for request, outputs in calls:
    thresholds = request["inputs"]["null_score_diff_threshold"]
    # postprocess_squad takes one threshold: each row against its own.
    want = [_postprocess_v2(reference, t).predictions[str(i)]
            for i, t in enumerate(thresholds)]
    assert list(outputs["answer"]) == want
    np.testing.assert_array_equal(outputs["no_answer"], [w == "" for w in want])
  never, always, per_row = (outputs["no_answer"] for _, outputs in calls)
  np.testing.assert_array_equal(never, [False] * 4 + [True])  # the empty context: no span
  assert always.all()
  np.testing.assert_array_equal(per_row, [True, False, True, False, True])


def test_recorded_threshold_reader(tmp_path):
  assert serving.recorded_null_score_diff_threshold(str(tmp_path)) is None
  path = tmp_path / layout.BEST_METRICS_FILE
  path.write_text(json.dumps({"eval_splits": ["dev"], "dev": {"f1": 80.0}}))
  assert serving.recorded_null_score_diff_threshold(str(tmp_path)) is None  # v1.1
  path.write_text(json.dumps({"eval_splits": ["dev"], "dev": {"best_f1_threshold": -1.5}}))
  assert serving.recorded_null_score_diff_threshold(str(tmp_path)) == -1.5


def test_v1_span_model_has_no_threshold_signature(served):
  description = serving.describe_signatures(serving.ServingModule(
      served[1], MAX_LEN, span_extractor=served[0]["span"], max_query_length=8))
  assert "answer_question_with_threshold" not in description
  assert "no_answer" not in description["answer_question"]


def test_pair_task_default_signature_takes_both_texts(served):
  models, tokenizer, _, _ = served
  [(request, outputs)] = _answers(served, "pair_saved_model", "serving_default")
  assert set(request["inputs"]) == {"text", "text_pair"}
  reference = _reference_inputs(tokenizer, TEXTS, PAIRS)
  _check_packing(outputs, reference)
  logits = models["classifier"](reference, training=False).numpy()
  probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  np.testing.assert_allclose(outputs["probabilities"], probabilities, atol=1e-5)
  assert models["pair_signatures"]["serving_default"].startswith(
      "(text string[None], text_pair string[None]) ->")


def test_single_text_task_default_signature_stays_single_text(served):
  [(_, default)] = _answers(served, "bert_tiny_saved_model", "serving_default")
  [(_, classify)] = _answers(served, "bert_tiny_saved_model", "classify")
  for key, value in classify.items():
    np.testing.assert_array_equal(default[key], value)
  # Regressors too, and text_pair picks the pair signature.
  regressor = Classifier(served[0]["bert_tiny"], 1)
  for text_pair, name in ((False, "regress"), (True, "regress_pair")):
    module = serving.ServingModule(served[1], MAX_LEN, classifier=regressor,
                                   text_pair=text_pair)
    assert module.signature_functions()["serving_default"] is getattr(module, name)


def test_max_seq_length_beyond_positions_fails_before_loading(tmp_path):
  encoder = _encoder("bert_tiny")
  checkpoints.export_encoder(encoder, str(tmp_path))
  (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
  with pytest.raises(serving.ExportError, match="--max_seq_length=65 exceeds"):
    serving.export_model_dir(str(tmp_path), str(tmp_path / "out"), max_seq_length=65)
  assert not (tmp_path / "out").exists()
