"""The span-extraction adapter, built from plain arguments on SQuAD JSON written here,
checked against hand-packed windows, hand-scored answers and a numpy loss."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.config import get_preset
from recurrent_bert.errors import InputError
from recurrent_bert.models import build_encoder
from recurrent_bert.models import task_kinds
from recurrent_bert.tasks.span import adapter as span_extraction
from tests.tasks.conftest import piece_ids

QUESTION = "which fruit is it ?"  # 5 pieces
# 10 pieces; with T = 16 a window holds 16 - 5 - 3 = 8 of them, so doc_stride 4 makes the
# windows [0, 8) and [4, 10), each row [CLS] question [SEP] window [SEP] (pad).
CONTEXT = "the cat is red . the apple is red ."
SETTINGS = span_extraction.SpanSettings(
    max_seq_length=16,
    doc_stride=4,
    max_query_length=64,
    max_answer_length=30,
    n_best_size=20,
    null_score_diff_threshold=0.0,
)
CONTEXT_START = 7  # [CLS] + 5 question pieces + [SEP]


def _question(qid, answer=None, impossible=False):
  qa = {
      "id": qid,
      "question": QUESTION,
      "answers": []
      if answer is None
      else [{"text": answer, "answer_start": CONTEXT.index(answer)}],
  }
  if impossible:
    qa["is_impossible"] = True
  return qa


def _squad_file(path, questions, version="1.1"):
  document = {
      "version": version,
      "data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": questions}]}],
  }
  path.write_text(json.dumps(document), encoding="utf-8")
  return str(path)


def _adapter(tmp_path, tokenizer, questions, version="1.1"):
  files = {"dev": _squad_file(tmp_path / "dev.json", questions, version)}
  return span_extraction.SpanExtractionAdapter(
      span_extraction.squad_reader(version, files),
      tokenizer,
      str(tmp_path / "cache"),
      SETTINGS,
      version_2=version == "2.0",
  )


def test_windows_are_the_hand_packed_rows(tmp_path, word_tokenizer):
  t = word_tokenizer
  adapter = _adapter(tmp_path, t, [_question("q1", "apple")])
  adapter.prepare(["dev"])
  assert adapter.eval_splits == ("dev",) and adapter.info.kind == "span"
  assert adapter.info.doc_stride == 4 and adapter.info.max_seq_length == 16
  assert os.path.exists(tmp_path / "cache" / "squad_dev.tfrecord")
  features = adapter.features("dev")
  question = [t.cls_id, *piece_ids(t, QUESTION), t.sep_id]
  np.testing.assert_array_equal(
      features["input_ids"],
      [
          question + piece_ids(t, "the cat is red . the apple is") + [t.sep_id],
          question + piece_ids(t, ". the apple is red .") + [t.sep_id, t.pad_id, t.pad_id],
      ],
  )
  np.testing.assert_array_equal(features["segment_ids"][1], [0] * 7 + [1] * 7 + [0] * 2)
  # "apple" is context piece 6: position 7 + 6 in the first window, 7 + 2 in the second,
  # which gives it more context on both sides.
  np.testing.assert_array_equal(features["start_positions"], [13, 9])
  np.testing.assert_array_equal(features["end_positions"], [13, 9])
  np.testing.assert_array_equal(features["token_is_max_context"][[0, 1], [13, 9]], [0, 1])
  assert features["token_char_start"][1, 9] == CONTEXT.index("apple")


def test_answers_are_scored_and_written_as_the_official_files(tmp_path, word_tokenizer):
  adapter = _adapter(tmp_path, word_tokenizer, [_question("q1", "apple"), _question("q2", "red")])
  start = np.zeros((4, 16), np.float32)
  end = np.zeros((4, 16), np.float32)
  start[1, 9] = end[1, 9] = 10.0  # q1: "apple" in its best window
  start[3, 10] = end[3, 11] = 10.0  # q2: pieces 7-8 of the second window, "is red"
  outputs = {"start_logits": start, "end_logits": end}
  results = adapter.evaluate("dev", outputs)
  # q1 exact; q2 "is red" against "red": precision 1/2, recall 1.
  assert results["exact_match"] == pytest.approx(50.0)
  assert results["f1"] == pytest.approx(100.0 * (1.0 + 2.0 / 3.0) / 2.0)
  assert results["total"] == 2

  paths = adapter.write_predictions("dev", outputs, str(tmp_path / "out"))
  assert sorted(os.path.basename(p) for p in paths) == [
      "nbest_predictions.json",
      "predictions.json",
  ]
  with open(tmp_path / "out" / "predictions.json", encoding="utf-8") as f:
    assert json.load(f) == {"q1": "apple", "q2": "is red"}


def test_version_2_predicts_no_answer_from_the_null_score(tmp_path, word_tokenizer):
  adapter = _adapter(
      tmp_path,
      word_tokenizer,
      [_question("q1", "apple"), _question("q2", impossible=True)],
      version="2.0",
  )
  assert adapter.info.task == "squad_v2"
  start = np.zeros((4, 16), np.float32)
  end = np.zeros((4, 16), np.float32)
  start[1, 9] = end[1, 9] = 10.0
  start[2:, 0] = end[2:, 0] = 5.0  # q2: null score 10 > best span 0
  outputs = {"start_logits": start, "end_logits": end}
  results = adapter.evaluate("dev", outputs)
  assert results["exact_match"] == pytest.approx(100.0)
  assert results["HasAns_total"] == 1 and results["NoAns_total"] == 1
  paths = adapter.write_predictions("dev", outputs, str(tmp_path / "out"))
  assert "null_odds.json" in [os.path.basename(p) for p in paths]
  with open(tmp_path / "out" / "null_odds.json", encoding="utf-8") as f:
    assert json.load(f)["q2"] == pytest.approx(10.0)


def test_a_predict_file_without_answers_is_predicted_not_scored(tmp_path, word_tokenizer):
  adapter = _adapter(tmp_path, word_tokenizer, [_question("q1")])
  adapter.prepare(["dev"])
  assert adapter.eval_splits == () and adapter.predict_splits == ("dev",)


def test_span_loss_of_a_tiny_encoder_matches_numpy(tmp_path, word_tokenizer):
  adapter = _adapter(tmp_path, word_tokenizer, [_question("q1", "apple"), _question("q2", "red")])
  config = get_preset("bert_tiny").replace(vocab_size=word_tokenizer.vocab_size)
  model = task_kinds.build_task_model(build_encoder(config), adapter.info)
  batch = {k: tf.constant(v) for k, v in adapter.features("dev").items()}
  outputs = model(adapter.objective.model_inputs(batch), training=False)
  loss = adapter.objective.loss(
      adapter.objective.sums(batch, outputs), adapter.objective.normalizers(batch)
  )

  def cross_entropy(logits, positions):
    logits = logits.numpy().astype(np.float64)
    log_probabilities = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -log_probabilities[np.arange(len(positions)), positions.numpy()]

  expected = np.mean(
      (
          cross_entropy(outputs["start_logits"], batch["start_positions"])
          + cross_entropy(outputs["end_logits"], batch["end_positions"])
      )
      / 2
  )
  assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_reader_names_a_missing_file(tmp_path):
  read = span_extraction.squad_reader("1.1", {})
  with pytest.raises(InputError, match="no train file"):
    read("train")
