"""The classification adapter, built from plain arguments on task folders written here in
the official formats, checked against hand-packed features and numpy metrics."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.config import get_preset
from recurrent_bert.errors import InputError
from recurrent_bert.models import build_encoder
from recurrent_bert.models import task_kinds
from recurrent_bert.tasks.classification import adapter as classification
from tests.tasks.conftest import piece_ids

SEQ_LEN = 10
MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
# (label, sentence 1, sentence 2) of the labeled MRPC files.
MRPC_TRAIN = [("1", "the cat", "the dog is red"), ("0", "a1 a2 a3 a4 a5", "b1 b2 b3 b4 b5")]
MRPC_DEV = [
    ("1", "the cat", "the cat"),
    ("0", "the dog", "a1"),
    ("1", "red", "the apple"),
    ("1", "a2", "b2"),
    ("0", "b3", "a3"),
]
MRPC_TEST = [("1089874", "the apple", "is red"), ("1089875", "it", "the dog")]


def _write(path, lines):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
  return path


@pytest.fixture
def mrpc_dir(tmp_path):
  folder = tmp_path / "MRPC"
  for split, rows in (("train", MRPC_TRAIN), ("dev", MRPC_DEV)):
    _write(
        folder / f"{split}.tsv",
        [MRPC_HEADER] + [f"{label}\t1\t2\t{a}\t{b}" for label, a, b in rows],
    )
  _write(
      folder / "test.tsv",
      ["index\t#1 ID\t#2 ID\t#1 String\t#2 String"]
      + [f"{index}\t1\t2\t{a}\t{b}" for index, a, b in MRPC_TEST],
  )
  return str(folder)


def _mrpc_adapter(mrpc_dir, tokenizer, cache_dir):
  source = classification.task_source("MRPC", mrpc_dir)
  return classification.ClassificationAdapter(
      source.spec, source.read_split, tokenizer, SEQ_LEN, str(cache_dir), source.predict_splits
  )


def test_glue_features_are_the_hand_packed_pairs(mrpc_dir, word_tokenizer, tmp_path):
  t = word_tokenizer
  adapter = _mrpc_adapter(mrpc_dir, t, tmp_path / "cache")
  assert adapter.predict_splits == ("test",) and adapter.eval_splits == ("dev",)
  adapter.prepare(["train", "dev", "test"])
  assert adapter.info.text_pair and adapter.info.kind == "classifier"
  assert adapter.info.label_names == ("0", "1") and adapter.info.main_metric == "f1"
  assert (tmp_path / "cache" / "mrpc_train.tfrecord").exists()

  features = adapter.features("train")
  cls, sep, pad = t.cls_id, t.sep_id, t.pad_id
  # "the cat" / "the dog is red": 2 + 4 pieces fit in 10 - 3.
  np.testing.assert_array_equal(
      features["input_ids"][0],
      [cls, *piece_ids(t, "the cat"), sep, *piece_ids(t, "the dog is red"), sep, pad],
  )
  np.testing.assert_array_equal(features["segment_ids"][0], [0] * 4 + [1] * 5 + [0])
  np.testing.assert_array_equal(features["input_mask"][0], [1] * 9 + [0])
  # 5 + 5 pieces into 7, longest first (a tie cuts b): b5, a5, b4 go -> 4 + 3.
  np.testing.assert_array_equal(
      features["input_ids"][1],
      [cls, *piece_ids(t, "a1 a2 a3 a4"), sep, *piece_ids(t, "b1 b2 b3"), sep],
  )
  np.testing.assert_array_equal(features["num_truncated_tokens"], [0, 3])
  np.testing.assert_array_equal(features["label_ids"], [1, 0])
  np.testing.assert_array_equal(adapter.features("test")["label_ids"], [-1, -1])
  assert adapter.num_examples("dev") == len(MRPC_DEV)


def test_glue_metrics_and_submission_file(mrpc_dir, word_tokenizer, tmp_path):
  adapter = _mrpc_adapter(mrpc_dir, word_tokenizer, tmp_path / "cache")
  logits = np.array([[0.0, 1.0], [0.0, 2.0], [3.0, 0.0], [0.0, 1.0], [1.0, 0.0]], np.float32)
  results = adapter.evaluate("dev", {"logits": logits})
  predicted = logits.argmax(-1)
  gold = np.array([int(label) for label, _, _ in MRPC_DEV])
  true_positives = np.sum((predicted == 1) & (gold == 1))
  precision = true_positives / np.sum(predicted == 1)
  recall = true_positives / np.sum(gold == 1)
  assert results["f1"] == pytest.approx(2 * precision * recall / (precision + recall))
  assert results["accuracy"] == pytest.approx(np.mean(predicted == gold))
  assert results["num_examples"] == len(MRPC_DEV)

  paths = adapter.write_predictions(
      "test", {"logits": np.array([[0.0, 1.0], [2.0, 0.0]])}, str(tmp_path / "predictions")
  )
  assert [p.rsplit("/", 1)[-1] for p in paths] == ["MRPC.tsv"]
  with open(paths[0], encoding="utf-8") as f:
    assert f.read() == "index\tprediction\n1089874\t1\n1089875\t0\n"


def test_loss_and_accuracy_of_a_tiny_encoder_match_numpy(mrpc_dir, word_tokenizer, tmp_path):
  adapter = _mrpc_adapter(mrpc_dir, word_tokenizer, tmp_path / "cache")
  config = get_preset("bert_tiny").replace(vocab_size=word_tokenizer.vocab_size)
  model = task_kinds.build_task_model(build_encoder(config), adapter.info)
  batch = {k: tf.constant(v) for k, v in adapter.features("dev").items()}
  logits = model(adapter.objective.model_inputs(batch), training=False)
  loss = adapter.objective.loss(
      adapter.objective.sums(batch, logits), adapter.objective.normalizers(batch)
  )

  logits = logits.numpy().astype(np.float64)
  labels = batch["label_ids"].numpy()
  log_probabilities = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  expected = -np.mean(log_probabilities[np.arange(len(labels)), labels])
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  results = adapter.evaluate("dev", {"logits": logits})
  assert results["accuracy"] == pytest.approx(np.mean(logits.argmax(-1) == labels))


def test_regression_task_scores_with_correlations(tmp_path, word_tokenizer):
  header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
  scores = [4.5, 0.25, 2.0, 3.0]
  rows = [f"{i}\tg\tf\ty\to\ts\ts\tthe cat\tthe dog\t{score:.3f}" for i, score in enumerate(scores)]
  folder = tmp_path / "STS-B"
  for split in ("train", "dev"):
    _write(folder / f"{split}.tsv", [header] + rows)
  source = classification.task_source("sts-b", str(folder))
  assert source.predict_splits == ()  # no test.tsv
  adapter = classification.ClassificationAdapter(
      source.spec, source.read_split, word_tokenizer, SEQ_LEN, str(tmp_path / "c")
  )
  assert adapter.info.kind == "regressor" and adapter.info.label_names == ()
  np.testing.assert_allclose(adapter.features("dev")["label_ids"], scores)

  predicted = np.array([4.0, 1.0, 1.5, 3.5])
  results = adapter.evaluate("dev", {"logits": predicted[:, None]})
  assert results["pearson"] == pytest.approx(np.corrcoef(predicted, scores)[0, 1])
  # Distinct values: Spearman is the Pearson correlation of the ranks.
  ranks = np.corrcoef(np.argsort(np.argsort(predicted)), np.argsort(np.argsort(scores)))
  assert results["spearman"] == pytest.approx(ranks[0, 1])


def test_custom_task_labels_and_prediction_probabilities(tmp_path, word_tokenizer):
  folder = tmp_path / "custom"
  _write(folder / "train.tsv", ["sentence\tlabel", "the cat\tpos", "the dog\tneg"])
  _write(folder / "dev.tsv", ["sentence\tlabel", "red\tpos"])
  _write(folder / "test.tsv", ["index\tsentence", "u7\tthe apple", "u8\tit"])
  source = classification.task_source("custom", str(folder))
  assert source.spec.label_list == ("neg", "pos") and source.predict_splits == ("test",)
  # A model already trained with other labels keeps them; a contradicting list is refused.
  trained = classification.task_source("custom", str(folder), trained_label_list=["pos", "neg"])
  assert trained.spec.label_list == ("pos", "neg")
  with pytest.raises(InputError, match="differs from the labels pos,neg"):
    classification.task_source(
        "custom", str(folder), label_list=["neg", "pos"], trained_label_list=["pos", "neg"]
    )

  adapter = classification.ClassificationAdapter(
      source.spec, source.read_split, word_tokenizer, SEQ_LEN, str(tmp_path / "cache"), ["test"]
  )
  adapter.prepare(["test"])
  assert not adapter.info.text_pair
  logits = np.array([[0.5, 1.5], [2.0, -1.0]])
  [path] = adapter.write_predictions("test", {"logits": logits}, str(tmp_path / "out"))
  with open(path, encoding="utf-8") as f:
    lines = f.read().splitlines()
  assert lines == [
      "index\tprediction\tprobability",
      f"u7\tpos\t{1 / (1 + math.exp(-1.0)):.4f}",
      f"u8\tneg\t{1 / (1 + math.exp(-3.0)):.4f}",
  ]


def test_superglue_boolq_folder_and_submission(tmp_path, word_tokenizer):
  folder = tmp_path / "BoolQ"
  _write(
      folder / "val.jsonl",
      [json.dumps({"question": "is it red", "passage": "the apple", "idx": 0, "label": True})],
  )
  _write(folder / "test.jsonl", [json.dumps({"question": "is it", "passage": "the cat", "idx": 5})])
  source = classification.task_source("BoolQ", str(folder))
  assert source.spec.benchmark == "superglue" and source.predict_splits == ("test",)
  adapter = classification.ClassificationAdapter(
      source.spec,
      source.read_split,
      word_tokenizer,
      SEQ_LEN,
      str(tmp_path / "c"),
      source.predict_splits,
  )
  np.testing.assert_array_equal(adapter.features("dev")["label_ids"], [1])  # "true"
  [path] = adapter.write_predictions(
      "test", {"logits": np.array([[1.0, 0.0]])}, str(tmp_path / "out")
  )
  with open(path, encoding="utf-8") as f:
    assert [json.loads(line) for line in f] == [{"idx": 5, "label": "false"}]


def test_task_source_refuses_what_it_cannot_read(tmp_path):
  with pytest.raises(InputError, match="not from TFDS"):
    classification.task_source("custom", str(tmp_path), use_tfds=True)
  with pytest.raises(InputError, match="give its folder"):
    classification.task_source("rte")
  with pytest.raises(InputError, match="unknown task"):
    classification.task_source("squad", str(tmp_path))
