"""Sentence-pair packing and longest-first truncation.

The word-level vocabulary of conftest.py (every test word is one piece) makes the expected
packing writable by hand.
"""

import numpy as np
import pytest

from recurrent_bert.tasks import pair_features
from recurrent_bert.tasks.pair_features import PairExample
from tests.tasks.conftest import piece_ids


def test_pair_packing_layout(word_tokenizer):
  t = word_tokenizer
  examples = [PairExample("e0", "a1 a2", "b1 b2 b3", "1"), PairExample("e1", "A3", None, "0")]
  features = pair_features.convert_pair_examples(examples, t, 9, label_list=("0", "1"))
  cls, sep, pad = t.cls_id, t.sep_id, t.pad_id
  expected_pair = [cls, *piece_ids(t, "a1 a2"), sep, *piece_ids(t, "b1 b2 b3"), sep, pad]
  np.testing.assert_array_equal(features["input_ids"][0], expected_pair)
  np.testing.assert_array_equal(features["segment_ids"][0], [0, 0, 0, 0, 1, 1, 1, 1, 0])
  np.testing.assert_array_equal(features["input_mask"][0], [1] * 8 + [0])
  expected_single = [cls, *piece_ids(t, "a3"), sep] + [pad] * 6
  np.testing.assert_array_equal(features["input_ids"][1], expected_single)
  np.testing.assert_array_equal(features["segment_ids"][1], [0] * 9)
  np.testing.assert_array_equal(features["input_mask"][1], [1, 1, 1] + [0] * 6)
  np.testing.assert_array_equal(features["label_ids"], [1, 0])
  assert features["input_ids"].dtype == np.int32 and features["input_ids"].shape == (2, 9)


@pytest.mark.parametrize(
    "text_a, text_b, max_seq_length, kept_a, kept_b",
    [
        # 5 + 6 pieces into 10 - 3 = 7: b (longer) loses b6 -> 5 + 5; tie, b loses b5 ->
        # 5 + 4; a is longer, loses a5 -> 4 + 4; tie, b loses b4 -> 4 + 3.
        ("a1 a2 a3 a4 a5", "b1 b2 b3 b4 b5 b6", 10, 4, 3),
        # A short a keeps everything; the long b is cut from its end.
        ("a1", "b1 b2 b3 b4 b5 b6", 7, 1, 3),
        # A tie removes from b first (google-research/bert): 3 + 3 into 5 -> 3 + 2.
        ("a1 a2 a3", "b1 b2 b3", 8, 3, 2),
    ],
)
def test_longest_first_truncation(word_tokenizer, text_a, text_b, max_seq_length, kept_a, kept_b):
  t = word_tokenizer
  features = pair_features.convert_pair_examples(
      [PairExample("e", text_a, text_b, None)], t, max_seq_length, label_list=("0", "1")
  )
  expected = [
      t.cls_id,
      *piece_ids(t, text_a)[:kept_a],
      t.sep_id,
      *piece_ids(t, text_b)[:kept_b],
      t.sep_id,
  ]
  expected += [t.pad_id] * (max_seq_length - len(expected))
  np.testing.assert_array_equal(features["input_ids"][0], expected)
  removed = len(text_a.split()) + len(text_b.split()) - kept_a - kept_b
  assert features["num_truncated_tokens"][0] == removed
  assert features["label_ids"][0] == -1  # unlabeled


def test_single_sentence_truncation_and_regression_labels(word_tokenizer):
  t = word_tokenizer
  features = pair_features.convert_pair_examples(
      [PairExample("e", "a1 a2 a3 a4", None, 3.2), PairExample("f", "a1", None, None)],
      t,
      4,
      label_list=None,
  )
  np.testing.assert_array_equal(
      features["input_ids"][0], [t.cls_id, *piece_ids(t, "a1 a2"), t.sep_id]
  )
  assert features["label_ids"].dtype == np.float32
  assert features["label_ids"][0] == pytest.approx(3.2)
  assert np.isnan(features["label_ids"][1])


def test_unknown_label_is_rejected(word_tokenizer):
  with pytest.raises(ValueError, match="'maybe'"):
    pair_features.convert_pair_examples(
        [PairExample("e", "a1", None, "maybe")], word_tokenizer, 8, label_list=("0", "1")
    )
