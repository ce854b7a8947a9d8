"""SQuAD contexts cut into word pieces that keep their characters (token ↔ char maps).

Alignment. The tokenizer runs in TensorFlow and does not report where its pieces came
from, so the context is cut in Python first, keeping character offsets:
  1. split the context into the basic tokenizer's words, located in the original text
     (`tokenization.split_words_with_offsets`: the tokenizer's own definition of
     whitespace, dropped characters, punctuation and CJK; byte offsets turned into char
     offsets);
  2. tokenize each word on its own: every piece inherits its word's [char_start, char_end)
     in the ORIGINAL context, which never starts or ends with a dropped character (NUL,
     U+FEFF ...).
A predicted span of pieces (i..j) therefore maps to context[char_start(i):char_end(j)],
an exact substring of the original text (whitespace, punctuation, case and accents kept);
its granularity is the basic-tokenizer word, which is what the model can point at anyway.

A SentencePiece model has no such words (pieces cross punctuation; a word is a run of
pieces from a "▁" one): the whole context is tokenized at once and each piece keeps its
own characters (`tokenization.pieces_with_offsets`: the model's offsets, moved off the
whitespace a "▁" stands for), so spans are piece-grained. A lone "▁" piece covers no
character: it can neither start nor end a predicted span (nor can any piece with
char_end <= char_start), and an answer's piece span never starts or ends on one.
"""

import dataclasses
from typing import List, Sequence, Tuple

import numpy as np
import tensorflow as tf

from recurrent_bert import model_dir as layout
from recurrent_bert.data import tokenization
from recurrent_bert.tasks.pair_features import tokenize_texts

_TOKENIZE_BATCH_SIZE = 4096


@dataclasses.dataclass
class ContextPieces:
  """A context's word pieces, each with the context characters it came from.

  Attributes:
    ids: int [P] piece ids.
    char_start, char_end: int [P]; piece i covers context[char_start[i]:char_end[i]]
      (the whole basic-tokenizer word it belongs to; a SentencePiece piece's own
      characters, char_end <= char_start for one that covers none).
  """

  ids: np.ndarray
  char_start: np.ndarray
  char_end: np.ndarray


def _byte_to_char_offsets(text: str) -> np.ndarray:
  """[len(utf-8 bytes) + 1] char offset of each byte offset of `text`."""
  sizes = [len(ch.encode("utf-8")) for ch in text]
  return np.repeat(np.arange(len(text) + 1), [*sizes, 1])


def word_char_spans(texts: Sequence[str]) -> List[List[Tuple[int, int]]]:
  """The basic tokenizer's words of each text, as [start, end) char offsets into it.

  Args:
    texts: N strings.

  Returns:
    N lists of (char_start, char_end), in text order.
  """
  spans: List[List[Tuple[int, int]]] = []
  for begin in range(0, len(texts), _TOKENIZE_BATCH_SIZE):
    batch = list(texts[begin : begin + _TOKENIZE_BATCH_SIZE])
    _, byte_starts, byte_ends = tokenization.split_words_with_offsets(tf.constant(batch, tf.string))
    for text, starts, ends in zip(batch, byte_starts.to_list(), byte_ends.to_list()):
      if len(text.encode("utf-8")) == len(text):  # ASCII: byte offsets are char offsets
        spans.append(list(zip(starts, ends)))
      else:
        char_of = _byte_to_char_offsets(text)
        spans.append([(int(char_of[a]), int(char_of[b])) for a, b in zip(starts, ends)])
  return spans


def _sentencepiece_context_pieces(contexts: Sequence[str], tokenizer) -> List[ContextPieces]:
  """`context_pieces` of a SentencePiece tokenizer: each piece at its own characters."""
  result = []
  for begin in range(0, len(contexts), _TOKENIZE_BATCH_SIZE):
    batch = list(contexts[begin : begin + _TOKENIZE_BATCH_SIZE])
    ids, byte_starts, byte_ends = tokenization.pieces_with_offsets(
        tokenizer, tf.constant(batch, tf.string)
    )
    for context, piece_ids, starts, ends in zip(
        batch, ids.to_list(), byte_starts.to_list(), byte_ends.to_list()
    ):
      char_of = _byte_to_char_offsets(context)
      result.append(
          ContextPieces(
              np.array(piece_ids, np.int64),
              char_of[np.array(starts, np.int64)].astype(np.int64),
              char_of[np.array(ends, np.int64)].astype(np.int64),
          )
      )
  return result


def context_pieces(contexts: Sequence[str], tokenizer) -> List[ContextPieces]:
  """Tokenizes contexts into pieces aligned to characters (module docstring, steps 1-2).

  Args:
    contexts: C context strings.
    tokenizer: a `tokenizer_interface.Tokenizer` (WordPiece or SentencePiece).

  Returns:
    C `ContextPieces`.
  """
  if tokenizer.kind == layout.SENTENCEPIECE:
    return _sentencepiece_context_pieces(contexts, tokenizer)
  words, word_spans, word_context = [], [], []
  for c, (context, spans) in enumerate(zip(contexts, word_char_spans(contexts))):
    words += [context[start:end] for start, end in spans]
    word_spans += spans
    word_context += [c] * len(spans)

  piece_ids = tokenize_texts(tokenizer, words)
  per_context: List[Tuple[List[int], List[int], List[int]]] = [([], [], []) for _ in contexts]
  for ids, (start, end), c in zip(piece_ids, word_spans, word_context):
    target = per_context[c]
    target[0].extend(ids)
    target[1].extend([start] * len(ids))
    target[2].extend([end] * len(ids))
  return [
      ContextPieces(np.array(ids, np.int64), np.array(starts, np.int64), np.array(ends, np.int64))
      for ids, starts, ends in per_context
  ]
