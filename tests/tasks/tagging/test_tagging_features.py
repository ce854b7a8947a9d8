"""Sentences → tagging windows (tasks/tagging/tagging_features.py): the first piece of each word,
document context, long sentences scored in their most-centred window.

References: features written out by hand for small cases, and brute-force loops (every
(left, right) context split; every window a word appears in) for the rules.
"""

import itertools

import numpy as np
import pytest

from recurrent_bert.data.tokenization import BertWordpieceTokenizer
from recurrent_bert.tasks.tagging import tagging_features
from recurrent_bert.tasks.tagging.conll import TaggedSentence
from tests.data.conftest import RESERVED
from tests.data.conftest import write_vocab

TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
WORDS = ["the", "cat", "john", "new", "york", "big", "##gest", "un", "##happy", "."]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  path = write_vocab(tmp_path_factory.mktemp("tagvocab") / "vocab.txt", RESERVED + WORDS)
  return BertWordpieceTokenizer(path, do_lower_case=True)


def ids(tokenizer, tokens):
  return tokenizer.convert_tokens_to_ids(tokens)


def sentence(text, tags=None, document=0):
  words = tuple(text.split(" "))
  return TaggedSentence(words, tuple(tags.split()) if tags else (), document, "f:1")


def test_first_piece_is_scored_and_a_pieceless_word_is_unk(tokenizer):
  s = sentence("John biggest \x01 unhappy cat", "B-PER O O O O")
  f = tagging_features.tagging_features([s], tokenizer, TAGS, max_seq_length=12)
  expected_ids = (
      ids(
          tokenizer,
          ["[CLS]", "john", "big", "##gest", "[UNK]", "un", "##happy", "cat", "[SEP]"],
      )
      + [0] * 3
  )
  np.testing.assert_array_equal(f["input_ids"], [expected_ids])
  np.testing.assert_array_equal(f["input_mask"], [[1] * 9 + [0] * 3])
  np.testing.assert_array_equal(f["segment_ids"], np.zeros((1, 12)))
  #                       CLS john big ##g UNK un ##h cat SEP pad
  np.testing.assert_array_equal(f["word_index"], [[-1, 0, 1, -1, 2, 3, -1, 4, -1, -1, -1, -1]])
  np.testing.assert_array_equal(f["label_weights"], [[0, 1, 1, 0, 1, 1, 0, 1, 0, 0, 0, 0]])
  np.testing.assert_array_equal(f["label_ids"], [[0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]])
  np.testing.assert_array_equal(f["example_index"], [0])
  assert f["label_weights"].dtype == np.float32 and f["input_ids"].dtype == np.int32


def test_unlabeled_sentences_are_scored_with_label_zero(tokenizer):
  f = tagging_features.tagging_features([sentence("new york")], tokenizer, TAGS, 8)
  np.testing.assert_array_equal(f["word_index"], [[-1, 0, 1, -1, -1, -1, -1, -1]])
  assert not f["label_ids"].any()


def brute_force_split(room, left_available, right_available):
  """The most context, then the most balanced split, then the odd piece on the right."""
  candidates = [
      (left, right)
      for left in range(left_available + 1)
      for right in range(right_available + 1)
      if left + right <= room
  ]
  return max(candidates, key=lambda lr: (lr[0] + lr[1], -abs(lr[0] - lr[1]), lr[1]))


def test_context_split_matches_brute_force():
  for room, left, right in itertools.product(range(9), range(7), range(7)):
    assert tagging_features.context_split(room, left, right) == brute_force_split(
        room, left, right
    ), (room, left, right)


def test_document_context_fills_the_window_around_the_centred_sentence(tokenizer):
  # Document 0: three sentences of 4, 2 and 3 pieces; document 1: one of 2 pieces.
  doc0 = [
      sentence("the cat biggest", "O O O"),  # the cat big ##gest
      sentence("john .", "B-PER O"),
      sentence("new york cat", "B-LOC I-LOC O"),
  ]
  doc1 = [sentence("un cat", "O O", document=1)]
  T = 8  # 6 pieces of window
  f = tagging_features.tagging_features(doc0 + doc1, tokenizer, TAGS, T)
  pieces = ["the", "cat", "big", "##gest", "john", ".", "new", "york", "cat"]
  # Sentence 1 (john .) at pieces 4..6: room 4 -> 2 left, 2 right.
  # Sentence 0 at 0..4: room 2, nothing on the left -> 2 on the right.
  # Sentence 2 at 6..9: room 3, nothing on the right -> 3 on the left.
  # Sentence 3 alone in its document: no context from document 0.
  expected_windows = [pieces[0:6], pieces[2:8], pieces[3:9], ["un", "cat"]]
  expected_scored = [[1, 2, 3], [3, 4], [4, 5, 6], [1, 2]]  # row positions of first pieces
  assert f["input_ids"].shape == (4, T)
  for row, (window, scored) in enumerate(zip(expected_windows, expected_scored)):
    expected = ids(tokenizer, ["[CLS]", *window, "[SEP]"])
    np.testing.assert_array_equal(f["input_ids"][row, : len(expected)], expected)
    assert f["input_mask"][row].sum() == len(expected)
    assert list(np.flatnonzero(f["label_weights"][row])) == scored
    assert list(f["word_index"][row][scored]) == list(range(len(scored)))
  np.testing.assert_array_equal(f["example_index"], [0, 1, 2, 3])
  # Only the target sentence's tags are labels: row 1 scores john (B-PER) and "." (O).
  assert list(f["label_ids"][1][[3, 4]]) == [TAGS.index("B-PER"), 0]
  assert list(f["label_ids"][2][[4, 5, 6]]) == [3, 4, 0]

  alone = tagging_features.tagging_features(doc0 + doc1, tokenizer, TAGS, T, document_context=False)
  np.testing.assert_array_equal(
      alone["input_ids"][1][:4], ids(tokenizer, ["[CLS]", "john", ".", "[SEP]"])
  )
  assert alone["input_mask"][1].sum() == 4
  assert list(np.flatnonzero(alone["label_weights"][1])) == [1, 2]


def reference_long_sentence(num_pieces, firsts, capacity, stride):
  """{word: (window start, position in the window)} by brute force over all windows."""
  starts = [0]
  while starts[-1] + capacity < num_pieces:
    starts.append(starts[-1] + min(stride, capacity))
  best = {}
  for word, piece in enumerate(firsts):
    scores = []
    for w, start in enumerate(starts):
      length = min(capacity, num_pieces - start)
      if start <= piece < start + length:
        context = min(piece - start, start + length - 1 - piece) + 0.01 * length
        scores.append((context, -w, start))
    _, _, start = max(scores)
    best[word] = (start, piece - start)
  return starts, best


@pytest.mark.parametrize("stride", [1, 2, 3, 5, 9])
def test_long_sentences_score_each_word_once_in_its_most_centred_window(tokenizer, stride):
  rng = np.random.default_rng(stride)
  vocab_words = ["the", "cat", "john", "biggest", "unhappy", "."]
  words = list(rng.choice(vocab_words, size=9))
  tags = list(rng.choice(TAGS, size=9))
  s = TaggedSentence(tuple(words), tuple(tags), 0, "f:1")
  context = sentence("the cat")  # same document: no context for a long sentence
  T = 7
  f = tagging_features.tagging_features([context, s], tokenizer, TAGS, T, doc_stride=stride)
  pieces = []
  firsts = []
  for word in words:
    firsts.append(len(pieces))
    pieces += {"biggest": ["big", "##gest"], "unhappy": ["un", "##happy"]}.get(word, [word])
  starts, best = reference_long_sentence(len(pieces), firsts, T - 2, stride)
  rows = np.flatnonzero(f["example_index"] == 1)
  assert len(rows) == len(starts)
  seen = {}
  for row, start in zip(rows, starts):
    window = pieces[start : start + T - 2]
    expected = ids(tokenizer, ["[CLS]", *window, "[SEP]"])
    np.testing.assert_array_equal(f["input_ids"][row, : len(expected)], expected)
    for position in np.flatnonzero(f["label_weights"][row]):
      word = int(f["word_index"][row, position])
      assert word not in seen
      seen[word] = (start, position - 1)
      assert f["label_ids"][row, position] == TAGS.index(tags[word])
  assert seen == best


def test_word_predictions_gather_back_into_sentences(tokenizer):
  sentences = [
      sentence("john biggest cat .", "B-PER O O O"),
      sentence("new york " * 4 + "cat", "B-LOC I-LOC " * 4 + "O"),
      sentence("un", "O", document=1),
  ]
  f = tagging_features.tagging_features(sentences, tokenizer, TAGS, 8, doc_stride=2)
  logits = np.zeros((*f["input_ids"].shape, len(TAGS)), np.float32)
  rows, positions = np.nonzero(f["label_weights"])
  logits[rows, positions, f["label_ids"][rows, positions]] = 1.0
  predicted = tagging_features.gather_word_predictions(f, logits, [len(s.words) for s in sentences])
  assert [[TAGS[i] for i in p] for p in predicted] == [list(s.tags) for s in sentences]
