"""Text-in SavedModels of task models, served in a fresh process that imports only TF
and TF Text: bert_tiny's encoder, classifier and span extractor exported together from
memory, and a SQuAD v2.0 fine-tuning model_dir with its recorded no-answer threshold;
a regressor's signatures in-process. Model dirs of pretraining, the command line and
pair tasks are in test_export.py; tests/support/export_checks.py has what both share.
"""

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert import model_dir as layout
from recurrent_bert import serving
from recurrent_bert.data.tokenization import BertWordpieceTokenizer
from recurrent_bert.models import Classifier
from recurrent_bert.models import SpanExtractor
from recurrent_bert.tasks.span import squad
from recurrent_bert.tasks.span import squad_postprocessing
from recurrent_bert.tasks.span import squad_windows
from tests.support.export_checks import LABELS
from tests.support.export_checks import LONG_TEXT
from tests.support.export_checks import MAX_LEN
from tests.support.export_checks import PAIRS
from tests.support.export_checks import TEXTS
from tests.support.export_checks import answers
from tests.support.export_checks import ask
from tests.support.export_checks import ask_encoder
from tests.support.export_checks import check_encode
from tests.support.export_checks import check_encode_ids
from tests.support.export_checks import check_packing
from tests.support.export_checks import classifier_probabilities
from tests.support.export_checks import encoder
from tests.support.export_checks import reference_inputs
from tests.support.export_checks import serve
from tests.support.export_checks import write_finetuning_dir
from tests.support.export_checks import write_vocab

pytestmark = pytest.mark.slow(seconds=70)

QUESTIONS = ["Who sat on the mat?", "What is the capital of France?", "Where?", "What is Paris?"]
CONTEXTS = [
    "The  cat sat on the mat, and the dog ran away.",
    "Paris is the capital of France; Café au lait!",
    LONG_TEXT,
    # Characters where word boundaries used to differ (U+2028, NUL, U+000B): issue 15.
    "Paris\u2028is the capital\x00 of France\x0b; Café au lait!",
]
# SQuAD v2.0: one window each (the signature's case); the empty context has no span.
V2_QUESTIONS = QUESTIONS[:2] + ["Who ran away?", "What did the dog do?", "Who sat?"]
V2_CONTEXTS = CONTEXTS[:2] + [CONTEXTS[0], "The dog ran far away.", ""]
V2_MAX_QUERY_LENGTH = 8


def _squad_v2_reference(span_extractor, tokenizer):
  """The windowed numpy pipeline's inputs and the Keras model's logits on them."""
  examples = [
      squad.SquadExample(str(i), q, c, ())
      for i, (q, c) in enumerate(zip(V2_QUESTIONS, V2_CONTEXTS))
  ]
  features = squad_windows.squad_features(
      examples, tokenizer, MAX_LEN, max_query_length=V2_MAX_QUERY_LENGTH
  )
  assert len(features["input_ids"]) == len(examples)  # one window each
  logits = span_extractor(
      {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}, training=False
  )
  return examples, features, logits["start_logits"].numpy(), logits["end_logits"].numpy()


def _postprocess_v2(reference, threshold):
  """`postprocess_squad` of v2.0, every span considered (as the signature does)."""
  return squad_postprocessing.postprocess_squad(
      *reference,
      n_best_size=MAX_LEN,
      version_2_with_negative=True,
      null_score_diff_threshold=threshold,
  )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  """Exports two SavedModels once and serves every request in one fresh process.

  - bert_tiny: from memory, encoder + 3-class classifier + span extractor (BLSTM decoder);
  - squad_v2: a fine-tuning dir (random span head on the same bert_tiny), through
    `serving.export_model_dir`, with a dev threshold recorded in best/best_metrics.json.

  Returns (models, tokenizer, requests, results): results[f"{i}/{output}"] answers
  requests[i].
  """
  root = tmp_path_factory.mktemp("export")
  vocab_file = write_vocab(root)
  tokenizer = BertWordpieceTokenizer(vocab_file, do_lower_case=True)
  models = {"bert_tiny": encoder("bert_tiny")}
  export_dir = root / "bert_tiny_saved_model"

  # Task models: random heads on the random bert_tiny encoder, exported from memory.
  models["classifier"] = Classifier(models["bert_tiny"], len(LABELS))
  models["span"] = SpanExtractor(models["bert_tiny"], use_blstm_decoder=True)
  serving.export_saved_model(
      str(export_dir),
      tokenizer,
      MAX_LEN,
      encoder=models["bert_tiny"],
      classifier=models["classifier"],
      label_names=LABELS,
      span_extractor=models["span"],
      max_query_length=8,
  )

  models["squad_v2"] = SpanExtractor(models["bert_tiny"])
  reference = models["squad_v2_reference"] = _squad_v2_reference(models["squad_v2"], tokenizer)
  odds = sorted(_postprocess_v2(reference, 0.0).null_odds.values())
  gap = int(np.argmax(np.diff(odds[:-1])))  # the last is the empty context's 1e9
  models["recorded_threshold"] = threshold = (odds[gap] + odds[gap + 1]) / 2
  v2_info = layout.TaskInfo(
      task="squad_v2",
      kind="span",
      max_seq_length=MAX_LEN,
      main_metric="f1",
      max_query_length=V2_MAX_QUERY_LENGTH,
  )
  write_finetuning_dir(
      root / "squad_v2",
      models["squad_v2"],
      v2_info,
      vocab_file,
      {
          "main_metric_value": 50.0,
          "eval_splits": ["dev"],
          "dev": {"f1": 50.0, "best_f1": 60.0, "best_f1_threshold": threshold},
      },
  )
  models["squad_v2_signatures"] = serving.export_model_dir(
      str(root / "squad_v2"), str(root / "squad_v2_saved_model")
  )

  requests = []
  ask_encoder(requests, export_dir, tokenizer)
  ask(requests, export_dir, "classify_pair", text=TEXTS, text_pair=PAIRS)
  ask(requests, export_dir, "classify", text=TEXTS)
  ask(requests, export_dir, "answer_question", question=QUESTIONS, context=CONTEXTS)
  ask(requests, export_dir, "serving_default", text=TEXTS)
  v2_dir, v2_inputs = root / "squad_v2_saved_model", dict(
      question=V2_QUESTIONS, context=V2_CONTEXTS
  )
  ask(requests, v2_dir, "answer_question", **v2_inputs)
  ask(requests, v2_dir, "serving_default", **v2_inputs)
  for never_or_always in (1e6, -1e6):  # never / always "no answer"
    ask(
        requests,
        v2_dir,
        "answer_question_with_threshold",
        **v2_inputs,
        null_score_diff_threshold=[never_or_always] * len(V2_QUESTIONS),
    )
  # Per question: just below its own null_score_diff (no answer) on even rows, just
  # above it (the span) on odd rows.
  odds = _postprocess_v2(models["squad_v2_reference"], 0.0).null_odds
  ask(
      requests,
      v2_dir,
      "answer_question_with_threshold",
      **v2_inputs,
      null_score_diff_threshold=[
          odds[str(i)] + (0.01 if i % 2 else -0.01) for i in range(len(V2_QUESTIONS))
      ],
  )
  return models, tokenizer, requests, serve(root, requests)


def test_encode_matches_keras_model(served):
  check_encode(served, "bert_tiny")


def test_encode_ids_matches_keras_model(served):
  check_encode_ids(served, "bert_tiny")


def test_classify_matches_keras_model(served):
  models, tokenizer, _, _ = served
  for signature, pairs in (("classify_pair", PAIRS), ("classify", None)):
    [(_, outputs)] = answers(served, "bert_tiny_saved_model", signature)
    reference = reference_inputs(tokenizer, TEXTS, pairs)
    check_packing(outputs, reference)
    probabilities, logits = classifier_probabilities(models["classifier"], reference)
    np.testing.assert_allclose(outputs["probabilities"], probabilities, atol=1e-5)
    np.testing.assert_array_equal(outputs["label_id"], logits.argmax(-1))
    assert list(outputs["label"]) == [LABELS[i] for i in logits.argmax(-1)]


def test_regress_matches_keras_model(served):
  # Same code path as classify (its K = 1 branch); called in-process, not re-exported.
  _, tokenizer, _, _ = served
  regressor = Classifier(encoder("swishrnn_tiny"), 1)
  module = serving.ServingModule(tokenizer, MAX_LEN, classifier=regressor)
  outputs = module.regress_pair(tf.constant(TEXTS), tf.constant(PAIRS))
  reference = reference_inputs(tokenizer, TEXTS, PAIRS)
  check_packing({k: v.numpy() for k, v in outputs.items()}, reference)
  want = regressor(reference, training=False).numpy()[:, 0]
  np.testing.assert_allclose(outputs["score"], want, atol=1e-5)
  assert "classify" not in module.signature_functions()


def test_answer_question_matches_windowed_numpy_pipeline(served):
  models, tokenizer, _, _ = served
  [(request, outputs)] = answers(served, "bert_tiny_saved_model", "answer_question")
  np.testing.assert_array_equal(outputs["context_truncated"], [False, False, True, False])
  one_window = [0, 1, 3]  # the long context (2) needs several windows: not the signature's case
  examples = [squad.SquadExample(str(i), QUESTIONS[i], CONTEXTS[i], ()) for i in one_window]
  features = squad_windows.squad_features(examples, tokenizer, MAX_LEN, max_query_length=8)
  assert len(features["input_ids"]) == len(one_window)  # one window each
  logits = models["span"](
      {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}, training=False
  )
  want = squad_postprocessing.postprocess_squad(
      examples,
      features,
      logits["start_logits"].numpy(),
      logits["end_logits"].numpy(),
      n_best_size=MAX_LEN,
  )
  for i, example in zip(one_window, examples):
    best = want.nbest[example.qas_id][0]
    assert outputs["answer"][i] == best["text"]
    start, end = outputs["start_char"][i], outputs["end_char"][i]
    assert example.context[start:end] == best["text"]
    np.testing.assert_allclose(
        outputs["score"][i], best["start_logit"] + best["end_logit"], atol=1e-5
    )


def _check_v2_outputs(outputs, want, reference):
  """One answer_question(_with_threshold) result against `postprocess_squad`'s `want`."""
  examples, _, start_logits, end_logits = reference
  np.testing.assert_allclose(
      outputs["null_score"], start_logits[:, 0] + end_logits[:, 0], atol=1e-5
  )
  for i, example in enumerate(examples):
    prediction = want.predictions[example.qas_id]
    assert outputs["answer"][i] == prediction, i
    assert outputs["no_answer"][i] == (prediction == ""), i
    np.testing.assert_allclose(
        outputs["null_score_diff"][i], want.null_odds[example.qas_id], rtol=1e-6, atol=1e-4
    )
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
  [(_, outputs)] = answers(served, "squad_v2_saved_model", "answer_question")
  _check_v2_outputs(outputs, want, reference)
  # Both decisions are covered: the threshold sits between two questions' odds, and the
  # empty context is always "no answer".
  assert outputs["no_answer"][-1] and outputs["null_score_diff"][-1] == 1e9
  assert 0 < outputs["no_answer"][:-1].sum() < len(V2_QUESTIONS) - 1
  [(_, default)] = answers(served, "squad_v2_saved_model", "serving_default")
  for key, value in outputs.items():
    np.testing.assert_array_equal(default[key], value)
  description = models["squad_v2_signatures"]["answer_question"]
  assert f"no_answer = null_score_diff > {threshold:g}" in description
  assert "no_answer bool[None]" in description and "null_score_diff float32[None]" in (description)


def test_squad_v2_threshold_per_call(served):
  models = served[0]
  reference = models["squad_v2_reference"]
  calls = answers(served, "squad_v2_saved_model", "answer_question_with_threshold")
  assert len(calls) == 3
  for request, outputs in calls:
    thresholds = request["inputs"]["null_score_diff_threshold"]
    # postprocess_squad takes one threshold: each row against its own.
    want = [_postprocess_v2(reference, t).predictions[str(i)] for i, t in enumerate(thresholds)]
    assert list(outputs["answer"]) == want
    np.testing.assert_array_equal(outputs["no_answer"], [w == "" for w in want])
  never, always, per_row = (outputs["no_answer"] for _, outputs in calls)
  np.testing.assert_array_equal(never, [False] * 4 + [True])  # the empty context: no span
  assert always.all()
  np.testing.assert_array_equal(per_row, [True, False, True, False, True])


def test_v1_span_model_has_no_threshold_signature(served):
  description = serving.describe_signatures(
      serving.ServingModule(
          served[1], MAX_LEN, span_extractor=served[0]["span"], max_query_length=8
      )
  )
  assert "answer_question_with_threshold" not in description
  assert "no_answer" not in description["answer_question"]


def test_single_text_task_default_signature_stays_single_text(served):
  [(_, default)] = answers(served, "bert_tiny_saved_model", "serving_default")
  [(_, classify)] = answers(served, "bert_tiny_saved_model", "classify")
  for key, value in classify.items():
    np.testing.assert_array_equal(default[key], value)
  # Regressors too, and text_pair picks the pair signature.
  regressor = Classifier(served[0]["bert_tiny"], 1)
  for text_pair, name in ((False, "regress"), (True, "regress_pair")):
    module = serving.ServingModule(served[1], MAX_LEN, classifier=regressor, text_pair=text_pair)
    assert module.signature_functions()["serving_default"] is getattr(module, name)
