"""Tiny SentencePiece models for the tests, and a Python reference of whole-word grouping."""

import random

import numpy as np

from recurrent_bert.data import sentencepiece_vocab

MARKER = "\u2581"
# Covered by the models (repeated in their training text): non-ASCII that must not be [UNK].
NON_ASCII = [
    "Café naïve résumé, déjà vu à la carte.",
    "Über Größe und Maß: Straße, Fußgänger.",
    "東京は日本の首都です。北京是中国的首都。",
    "서울은 한국의 수도입니다.",
    "Emoji 😀 and 🎉 mixed in text 👍.",
    "ΕΛΛΗΝΙΚΆ και русский текст.",
]


def build_model(
    corpus_file: str, model_type: str, output: str, vocab_size: int = 400, extra=()
) -> str:
  """Learns a model from the corpus plus NON_ASCII (and `extra` lines); returns the path
  of `<output>.model`."""
  lines = list(sentencepiece_vocab.iter_lines([corpus_file])) + NON_ASCII * 20 + list(extra)
  proto = sentencepiece_vocab.train_sentencepiece(lines, model_type, vocab_size)
  sentencepiece_vocab.write_model(output, proto)
  return output + ".model"


def run_lines(count: int, seed: int = 0):
  """Lines rich in digit runs, repeated characters and punctuation runs, between words:
  where a unigram model has segmentations of equal score (['00', '000'] and ['000', '00']
  of '00000', whatever the scores)."""
  rng = random.Random(seed)
  fixed = ["-12300000", "-999", "100000", "2000000", "aaaaaa", "!!!!!", "-----", "......"]
  words = ["the", "price", "was", "Wait", "really", "ok", "section", "[MASK]", "☃☃"]

  def run():
    kind = rng.randrange(4)
    if kind == 0:  # a number: digits, then a run of zeros or nines
      head = "-" * (rng.random() < 0.3) + (str(rng.randint(1, 999)) if rng.random() < 0.7 else "")
      return head + rng.choice("09") * rng.randint(1, 12)
    if kind == 1:  # one character repeated
      return rng.choice("a!-.?=_*#~x") * rng.randint(2, 16)
    if kind == 2:  # a word with a punctuation run stuck to it
      return rng.choice(words) + rng.choice("!.?-") * rng.randint(1, 12)
    return rng.choice(fixed + words)

  return [" ".join(run() for _ in range(rng.randint(1, 8))) for _ in range(count)]


def reference_words(pieces, candidate):
  """Word index per position (-1 off candidates): a new word at a "▁" piece, a special
  symbol, or the first candidate after a non-candidate ([CLS], [SEP], padding)."""
  words, current = [], -1
  for t, piece in enumerate(pieces):
    if not candidate[t]:
      words.append(-1)
      continue
    if piece.startswith(MARKER) or piece in ("[MASK]", "[PAD]") or t == 0 or not candidate[t - 1]:
      current += 1
    words.append(current)
  return words


def check_whole_words(original_ids, input_mask, positions, weights, vocab, cls_id, sep_id):
  """No word is partly masked: per row, each reference word is all-in or all-out.

  Args:
    original_ids, input_mask: [batch, seq] unmasked ids and the real-token mask.
    positions, weights: [batch, predictions] masked_lm_positions and masked_lm_weights.
    vocab: piece strings, index = id.
    cls_id, sep_id: not candidates.

  (A row may have nothing masked: a word longer than the budget is skipped whole.)
  """
  assert weights.sum() > len(weights)  # most rows have something masked
  for row in range(original_ids.shape[0]):
    real = input_mask[row].astype(bool)
    candidate = real & (original_ids[row] != cls_id) & (original_ids[row] != sep_id)
    pieces = [vocab[i] for i in original_ids[row]]
    words = np.array(reference_words(pieces, candidate))
    chosen = set(positions[row][weights[row] > 0].tolist())
    for word in set(words[sorted(chosen)].tolist()):
      members = set(np.flatnonzero(words == word).tolist())
      assert members <= chosen, (row, word, members, sorted(chosen))
