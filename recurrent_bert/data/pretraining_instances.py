"""Pretraining instances: a chunk's documents as token spans -> NSP pairs or packed rows.

Instance building follows BERT's generator:
- per document and per duplication round, a target length of max_seq_length - 3 tokens,
  or with probability `short_seq_prob` a uniform length in [2, max_seq_length - 3];
- sentences are gathered until the target is reached; a random split point makes segment
  A; segment B is the rest (IsNext, label 0) or, with probability 1/2 (and always when only
  one sentence was gathered), text from a random point of *another* document (label 1),
  in which case the unused sentences go back for the next instance;
- the longer segment is truncated, one token at a time from a random end, to fit;
- [CLS] A [SEP] B [SEP], segment ids 0 for [CLS] A [SEP] and 1 for B [SEP].
Without NSP (`use_nsp=False`, the SwishRNN recipe): [CLS] text [SEP], one segment packed
with consecutive whole sentences of one document up to the target length, segment ids 0,
next_sentence_labels 0.

Long lines. A line with more tokens than fit in a sequence (max_seq_length - 3 with NSP,
- 2 without) is cut, after tokenization, into sentence-sized pieces of at most a quarter of
that (`LONG_LINE_PIECES_PER_SEQUENCE`; 31 tokens at max_seq_length 128), which then count
as sentences: each cut goes after the last ".", "!" or "?" in the second half of the
piece, else before the last word start, else (one word longer than a piece) at the
piece's end. So a corpus that is one line per paragraph, or a whole book on one line,
yields as many instances as the same text one sentence per line, in linear time. The
stats report `long_lines_split` and `long_line_pieces`.

The documents come tokenized, a chunk at a time, from `pretraining_workers.ChunkProcessor`,
and the "random next" document is another document of the same chunk
(`pretraining_corpus`). numpy and the standard library only: this runs in the worker
processes, which do not import TensorFlow.
"""

import collections
import random
from typing import Dict, List, Sequence, Tuple

import numpy as np

# A line longer than a sequence is cut into pieces of at most this fraction of it.
LONG_LINE_PIECES_PER_SEQUENCE = 4

# A chunk's tokens are one flat array; a sentence is a span (begin, end) of it, and the
# sentences of a document are adjacent spans. Segment A (consecutive sentences) and segment
# B (the rest, or consecutive sentences of another document) are therefore each one span,
# and so is a truncated segment: an instance is four ints, and the [batch, max_seq_length]
# arrays are gathered from the flat tokens by array operations (`fill_instances`).

Span = Tuple[int, int]


def split_long_sentence(
    ids: np.ndarray, starts: np.ndarray, piece_length: int, end_ids: Sequence[int]
) -> List[Span]:
  """Cuts a sentence into pieces of at most `piece_length` tokens, in O(len(ids)).

  Each cut is after the last sentence end (`end_ids`: ".", "!", "?") in the second half of
  the piece's window, else before the last word start in it, else at the window's end.

  Args:
    ids: piece ids [n]; starts: per piece, whether it starts a word [n].
    piece_length: the longest piece, >= 1.
    end_ids: ids that end a sentence.

  Returns:
    The pieces as spans of the sentence, in order, covering it.
  """
  cut_after_end = np.flatnonzero(np.isin(ids, list(end_ids))) + 1
  cut_before_word = np.flatnonzero(np.asarray(starts, bool))
  pieces = []
  begin, n = 0, len(ids)
  while n - begin > piece_length:
    limit = begin + piece_length
    k = np.searchsorted(cut_after_end, limit, side="right") - 1
    if k >= 0 and cut_after_end[k] > begin + piece_length // 2:
      cut = int(cut_after_end[k])
    else:
      k = np.searchsorted(cut_before_word, limit, side="right") - 1
      cut = int(cut_before_word[k]) if k >= 0 and cut_before_word[k] > begin else limit
    pieces.append((begin, cut))
    begin = cut
  pieces.append((begin, n))
  return pieces


def truncate_seq_pair(
    span_a: Span, span_b: Span, max_num_tokens: int, rng: random.Random
) -> Tuple[Span, Span, int]:
  """Truncates the longer segment, one token at a time from a random end, in O(1).

  BERT's loop removes a token from the longer segment (from b on a tie) until the pair
  fits, each from the front or the back with probability 1/2. Which segment loses how
  many tokens does not depend on the coin flips, so it is computed directly; the number
  taken from the front of a segment losing k tokens is then Binomial(k, 1/2), drawn as the
  number of set bits of k random bits: the same distribution as the loop's, without a
  Python step (and a random draw) per token.

  Returns:
    (truncated span a, truncated span b, number of tokens removed).
  """
  length_a, length_b = span_a[1] - span_a[0], span_b[1] - span_b[0]
  excess = length_a + length_b - max_num_tokens
  if excess <= 0:
    return span_a, span_b, 0
  gap = abs(length_a - length_b)
  if gap >= excess:  # the longer one loses it all
    cut_a, cut_b = (excess, 0) if length_a > length_b else (0, excess)
  else:  # the longer one comes down to a tie, then they alternate, b first
    rest = excess - gap
    cut_a = rest // 2 + (gap if length_a > length_b else 0)
    cut_b = rest - rest // 2 + (gap if length_b > length_a else 0)

  def cut(span, count):
    if count == 0:
      return span
    front = bin(rng.getrandbits(count)).count("1")
    return span[0] + front, span[1] - (count - front)

  return cut(span_a, cut_a), cut(span_b, cut_b), excess


class InstanceBuilder:
  """Builds instances from documents of sentence spans (BERT rules, module docstring).

  An instance is (a_begin, a_end, b_begin, b_end, is_random_next, truncated_tokens), spans
  of the chunk's flat tokens; without NSP, b is (0, 0).
  """

  def __init__(self, max_seq_length: int, short_seq_prob: float, use_nsp: bool):
    self.max_seq_length = max_seq_length
    self.short_seq_prob = short_seq_prob
    self.use_nsp = use_nsp

  @property
  def max_num_tokens(self) -> int:
    """Tokens of text per sequence: [CLS] A [SEP] B [SEP], or [CLS] text [SEP]."""
    return self.max_seq_length - (3 if self.use_nsp else 2)

  @property
  def piece_length(self) -> int:
    """The longest piece of a split long line (module docstring): about a sentence."""
    return max(1, self.max_num_tokens // LONG_LINE_PIECES_PER_SEQUENCE)

  def split_long_sentences(
      self,
      document: List[Span],
      ids: np.ndarray,
      starts: np.ndarray,
      end_ids: Sequence[int],
      stats: collections.Counter,
  ) -> List[Span]:
    """The document with every sentence longer than a sequence split (module docstring)."""
    if all(end - begin <= self.max_num_tokens for begin, end in document):
      return document
    split = []
    for begin, end in document:
      if end - begin <= self.max_num_tokens:
        split.append((begin, end))
        continue
      pieces = split_long_sentence(ids[begin:end], starts[begin:end], self.piece_length, end_ids)
      stats["long_lines_split"] += 1
      stats["long_line_pieces"] += len(pieces)
      split.extend((begin + a, begin + b) for a, b in pieces)
    return split

  def _target_length(self, max_num_tokens: int, rng: random.Random) -> int:
    # Short sequences now and then so the model also sees lengths it meets in fine-tuning.
    if rng.random() < self.short_seq_prob:
      return rng.randint(2, max_num_tokens)
    return max_num_tokens

  def from_document(
      self, documents: Sequence[Sequence[Span]], document_index: int, rng: random.Random
  ) -> List[Tuple]:
    if self.use_nsp:
      return self._nsp_instances(documents, document_index, rng)
    return self._packed_instances(documents[document_index], rng)

  def _nsp_instances(self, documents, document_index, rng) -> List[Tuple]:
    document = documents[document_index]
    max_num_tokens = self.max_num_tokens
    target_length = self._target_length(max_num_tokens, rng)
    instances = []
    first = 0  # the first sentence of the instance being gathered
    current_length = 0
    i = 0
    while i < len(document):
      current_length += document[i][1] - document[i][0]
      if i == len(document) - 1 or current_length >= target_length:
        count = i - first + 1
        a_end = rng.randint(1, count - 1) if count >= 2 else 1
        span_a = (document[first][0], document[first + a_end - 1][1])
        if count == 1 or rng.random() < 0.5:
          is_random_next = True
          target_b_length = target_length - (span_a[1] - span_a[0])
          random_document = documents[self._other_document(len(documents), document_index, rng)]
          start = rng.randint(0, len(random_document) - 1)
          # At least one sentence, then up to the target.
          end = start + 1
          taken_length = random_document[start][1] - random_document[start][0]
          while end < len(random_document) and taken_length < target_b_length:
            taken_length += random_document[end][1] - random_document[end][0]
            end += 1
          span_b = (random_document[start][0], random_document[end - 1][1])
          # The sentences after A were not used: they start the next instance.
          i = first + a_end - 1
        else:
          is_random_next = False
          span_b = (document[first + a_end][0], document[i][1])
        span_a, span_b, truncated = truncate_seq_pair(span_a, span_b, max_num_tokens, rng)
        instances.append((*span_a, *span_b, is_random_next, truncated))
        first, current_length = i + 1, 0
      i += 1
    return instances

  @staticmethod
  def _other_document(num_documents: int, document_index: int, rng: random.Random) -> int:
    if num_documents < 2:
      return document_index  # nothing else to draw from (reported in the stats)
    other = rng.randint(0, num_documents - 2)
    return other + 1 if other >= document_index else other

  def _packed_instances(self, document, rng) -> List[Tuple]:
    target_length = self._target_length(self.max_num_tokens, rng)
    instances = []
    begin = end = None
    for sentence_begin, sentence_end in document:  # each fits: see split_long_sentences
      if begin is not None and (end - begin) + (sentence_end - sentence_begin) > target_length:
        instances.append((begin, end, 0, 0, False, 0))
        begin = None
      if begin is None:
        begin = sentence_begin
      end = sentence_end
    if begin is not None:
      instances.append((begin, end, 0, 0, False, 0))
    return instances


def fill_instances(
    instances: np.ndarray,
    ids: np.ndarray,
    starts: np.ndarray,
    max_seq_length: int,
    use_nsp: bool,
    cls_id: int,
    sep_id: int,
) -> Dict[str, np.ndarray]:
  """[CLS] A [SEP] (B [SEP]) rows, gathered from the flat tokens by array operations.

  Args:
    instances: int64 [n, 6] rows of InstanceBuilder instances.
    ids, starts: the chunk's flat piece ids and word-start flags [tokens].
    max_seq_length, use_nsp, cls_id, sep_id: the sequence layout.

  Returns:
    input_ids, input_mask, segment_ids int64 [n, max_seq_length]; word_starts bool
    [n, max_seq_length]; next_sentence_labels int64 [n, 1].
  """
  a_begin, a_end, b_begin, b_end = (instances[:, k : k + 1] for k in range(4))
  len_a, len_b = a_end - a_begin, b_end - b_begin
  t = np.arange(max_seq_length)[None, :]
  in_a = (t >= 1) & (t <= len_a)
  in_b = (t >= len_a + 2) & (t < len_a + 2 + len_b)
  size = len_a + 2 + (len_b + 1 if use_nsp else 0)
  last = max(len(ids) - 1, 0)
  source = np.where(in_a, a_begin + t - 1, np.where(in_b, b_begin + t - len_a - 2, 0))
  source = np.clip(source, 0, last)
  text = in_a | in_b
  is_sep = (t == len_a + 1) | ((t == size - 1) & use_nsp)
  input_ids = np.where(text, ids[source], 0)
  input_ids = np.where(is_sep, sep_id, np.where(t == 0, cls_id, input_ids))
  real = t < size
  return {
      "input_ids": input_ids.astype(np.int64),
      "input_mask": real.astype(np.int64),
      "segment_ids": ((t >= len_a + 2) & real).astype(np.int64),
      "word_starts": np.where(text, starts[source], True),
      "next_sentence_labels": instances[:, 4:5].astype(np.int64),
  }
