"""Multiple choice: the SWAG CSV and JSONL readers, the [N, C, T] packing, its feature
cache, the adapter's scoring and prediction file, and the model under XLA.

Files are written here in the official formats (SWAG's header, csv quoting); expected
packings are written by hand with the word-level vocabulary of conftest.py.
"""

import json

import numpy as np
import pytest

from recurrent_bert.data import feature_cache
from recurrent_bert.tasks.multiple_choice import adapter as multiple_choice
from recurrent_bert.tasks.multiple_choice import swag
from recurrent_bert.tasks.multiple_choice.swag import ChoiceExample
from tests.tasks.conftest import piece_ids

HEADER = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3"


def _write(path, text, encoding="utf-8"):
  path.write_bytes(text.encode(encoding))
  return str(path)


def test_swag_csv_official_layout_quoting_and_newlines(tmp_path):
  # Row 1 quotes a comma and a doubled quote; row 2's sent1 spans lines 3-4; a BOM opens.
  text = (
      "\ufeff" + HEADER + ",label\n"
      '7,lsmdc1,12,"He sits, then",He sits,then,gold,"he ""runs"".",he eats.,he sleeps.,'
      "he flies.,0\n"
      '8,anet2,13,x,"Someone opens\nthe door",She,gen,walks in.,waves.,sits.,jumps.,3\n'
      "\n"
      "9,anet3,14,x,A man,,gen,e0,e1,e2,e3,2\n"
  )
  data = swag.read_swag_csv(_write(tmp_path / "val.csv", text), "dev")
  assert data.examples == [
      ChoiceExample(
          "7",
          "He sits",
          ('then he "runs".', "then he eats.", "then he sleeps.", "then he flies."),
          0,
      ),
      ChoiceExample(
          "8",
          "Someone opens\nthe door",
          ("She walks in.", "She waves.", "She sits.", "She jumps."),
          3,
      ),
      # An empty sent2 adds no leading space.
      ChoiceExample("9", "A man", ("e0", "e1", "e2", "e3"), 2),
  ]


def test_swag_folder_splits_and_unlabeled_test(tmp_path):
  row = "0,v,1,s,A cat,It,gold,runs.,eats.,sleeps.,sits."
  _write(tmp_path / "train.csv", HEADER + ",label\n" + row + ",1\n")
  _write(tmp_path / "val.csv", HEADER + ",label\n" + row + ",2\n")
  _write(tmp_path / "test.csv", HEADER + "\n" + row + "\n")
  assert swag.read_swag(str(tmp_path), "train").examples[0].label == 1
  assert swag.read_swag(str(tmp_path), "dev").examples[0].label == 2
  test = swag.read_swag(str(tmp_path), "test").examples[0]
  assert test.label is None and test.endings[0] == "It runs."


def test_swag_without_the_unnamed_column_uses_fold_ind(tmp_path):
  text = "video-id,fold-ind,sent1,sent2,ending0,ending1,label\nv,41,A,B,c,d,1\n"
  [example] = swag.read_swag_csv(_write(tmp_path / "x.csv", text)).examples
  assert example == ChoiceExample("41", "A", ("B c", "B d"), 1)


def test_jsonl_reader_with_and_without_question(tmp_path):
  lines = [
      {"id": 3, "context": "The cat", "choices": ["sleeps", "flies", "swims"], "label": 0},
      {
          "id": "q2",
          "context": "A story .",
          "question": "who ?",
          "choices": ["a", "b", "c"],
          "label": 2,
      },
  ]
  path = _write(tmp_path / "dev.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n\n")
  assert swag.read_choice_jsonl(path).examples == [
      ChoiceExample("3", "The cat", ("sleeps", "flies", "swims"), 0),
      ChoiceExample("q2", "A story . who ?", ("a", "b", "c"), 2),
  ]
  unlabeled = _write(tmp_path / "test.jsonl", '{"id": 1, "context": "c", "choices": ["x", "y"]}\n')
  assert swag.read_choice_jsonl(unlabeled).examples[0].label is None


def test_choices_pack_as_context_then_ending_with_longest_first_truncation(word_tokenizer):
  t = word_tokenizer
  cls, sep, pad = t.cls_id, t.sep_id, t.pad_id
  examples = [
      ChoiceExample("e0", "a1 a2", ("b1", "b2 b3 b4 b5 b6"), 1),
      ChoiceExample("e1", "a1 a2 a3 a4 a5", ("b1 b2", "b3"), None),
  ]
  features = multiple_choice.convert_choice_examples(examples, t, 8)
  assert features["input_ids"].shape == (2, 2, 8) and features["input_ids"].dtype == np.int32
  ids = lambda text: piece_ids(t, text)
  expected = [
      [
          [cls, *ids("a1 a2"), sep, *ids("b1"), sep, pad, pad],
          # 2 + 5 pieces into 8 - 3 = 5: b (longer) loses b6, b5 -> 2 + 3.
          [cls, *ids("a1 a2"), sep, *ids("b2 b3 b4"), sep],
      ],
      [
          # 5 + 2 into 5: a loses a5, a4 -> 3 + 2.
          [cls, *ids("a1 a2 a3"), sep, *ids("b1 b2"), sep],
          # 5 + 1 into 5: a loses a5 -> 4 + 1.
          [cls, *ids("a1 a2 a3 a4"), sep, *ids("b3"), sep],
      ],
  ]
  np.testing.assert_array_equal(features["input_ids"], expected)
  np.testing.assert_array_equal(
      features["segment_ids"][0], [[0, 0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1]]
  )
  np.testing.assert_array_equal(features["input_mask"][0, 0], [1] * 6 + [0, 0])
  np.testing.assert_array_equal(features["label_ids"], [1, -1])
  np.testing.assert_array_equal(features["num_truncated_tokens"], [2, 3])


def test_feature_cache_stores_and_streams_choice_arrays(tmp_path, word_tokenizer):
  examples = [
      ChoiceExample(f"e{i}", "a1 a2 a3", ("b1", "b2 b3", "b4 b5 b6"), i % 3) for i in range(5)
  ]
  features = multiple_choice.convert_choice_examples(examples, word_tokenizer, 7)
  path = str(tmp_path / "cache.tfrecord")
  feature_cache.write_feature_cache(path, features, "key")
  back = feature_cache.read_feature_cache(path)
  for name, array in features.items():
    np.testing.assert_array_equal(back[name], array)
  rows = list(feature_cache.load_feature_dataset(path).as_numpy_iterator())
  assert len(rows) == 5 and rows[3]["input_ids"].shape == (3, 7)
  for i, row in enumerate(rows):
    for name, array in features.items():
      np.testing.assert_array_equal(row[name], array[i])


def test_adapter_scores_accuracy_and_writes_predictions(tmp_path, word_tokenizer):
  examples = [ChoiceExample(f"id{i}", "a1", ("b1", "b2", "b3"), i % 3) for i in range(4)]
  source = multiple_choice.ChoiceSource(
      "jsonl",
      lambda split: feature_cache.SplitData(list(examples), "dev.jsonl"),
      ("dev",),
      ("dev",),
  )
  adapter = multiple_choice.MultipleChoiceAdapter(source, word_tokenizer, 8, str(tmp_path))
  assert adapter.info.kind == "multiple_choice" and adapter.info.main_metric == "accuracy"
  logits = np.array([[3.0, 0, 0], [0, 2.0, 1], [0, 5.0, 0], [1.0, 0, -1]], np.float32)
  # Predicted 0, 1, 1, 0 against labels 0, 1, 2, 0.
  assert adapter.evaluate("dev", {"logits": logits}) == {"accuracy": 0.75, "num_examples": 4}
  [path] = adapter.write_predictions("dev", {"logits": logits}, str(tmp_path / "predictions"))
  assert path.endswith("dev_predictions.jsonl")
  rows = [json.loads(line) for line in open(path, encoding="utf-8")]
  assert [r["id"] for r in rows] == ["id0", "id1", "id2", "id3"]
  assert [r["prediction"] for r in rows] == [0, 1, 1, 0]
  e = np.exp([0.0, 2.0, 1.0])
  np.testing.assert_allclose(rows[1]["probabilities"], e / e.sum(), atol=1e-6)


@pytest.mark.slow(seconds=7)
@pytest.mark.parametrize("family", ["bert_tiny", "swishrnn_tiny"])
def test_multiple_choice_model_compiles_with_xla(family):
  import tensorflow as tf

  from recurrent_bert import models
  from recurrent_bert.config import resolve_config

  encoder = models.build_encoder(resolve_config(family).replace(vocab_size=40))
  model = models.MultipleChoice(encoder)
  rng = np.random.default_rng(0)
  inputs = {
      "input_ids": tf.constant(rng.integers(5, 40, size=(2, 3, 6)), tf.int32),
      "input_mask": tf.ones((2, 3, 6), tf.int32),
      "segment_ids": tf.constant([[[0, 0, 0, 1, 1, 1]] * 3] * 2, tf.int32),
  }
  eager = model(inputs, training=False).numpy()
  compiled = tf.function(lambda x: model(x, training=False), jit_compile=True)(inputs).numpy()
  assert compiled.shape == (2, 3)
  np.testing.assert_allclose(compiled, eager, atol=1e-4)
  # Each choice is scored alone: choice 1 of example 0 equals that row run as C = 1.
  single = {k: v[:1, 1:2] for k, v in inputs.items()}
  np.testing.assert_allclose(model(single, training=False).numpy()[0, 0], eager[0, 1], atol=1e-5)
