"""Tagged sentences → windows of word pieces, one prediction per word (BERT §5.3).

Words. A word is one token of the file (one CoNLL line); it is tokenized on its own by the
full tokenizer (basic + WordPiece) and never re-split beyond that: "U.S." stays one word
of four pieces. A word the tokenizer turns into no piece at all (only dropped characters:
a control character, U+FEFF ...) stands as one [UNK] piece, so that every word still gets
a prediction.

First piece. The tag is predicted at the FIRST piece of each word; the other pieces carry
label weight 0 (no loss, not scored), as in BERT §5.3. With a SentencePiece model a word
tokenized on its own starts with "▁" (the space before it, as in running text): its first
piece is "▁word..." or, when the model splits the mark off, a lone "▁" followed by the
word's pieces; the tag is read there all the same (whole-word grouping starts the word
at that piece too).

Document context (§5.3 "maximal document context"). A row is [CLS] window [SEP] (one
segment) where the window holds the sentence being labeled plus as much of the
neighbouring pieces of the SAME document as fits in max_seq_length − 2 pieces: the
sentence is centred, the room left split half to the left, half to the right (the odd
piece to the right), and room that one side cannot use (start or end of the document)
goes to the other. Context is cut at piece granularity (a context window may start or end
inside a word) and is never scored: only the target sentence's words are scored in its
row. With document_context=False the window is the sentence alone.

Long sentences (more pieces than max_seq_length − 2) get no context: windows of
max_seq_length − 2 pieces of the sentence start doc_stride pieces apart (the last one
reaches the end), and each word is scored once, in the window where its first piece has
the most context (`windows.best_window_of_pieces`, SQuAD's "max context" rule).
"""

from typing import Any, Dict, List, Sequence

import numpy as np

from recurrent_bert.data.feature_cache import Features
from recurrent_bert.tasks.pair_features import tokenize_texts
from recurrent_bert.tasks.windows import best_window_of_pieces
from recurrent_bert.tasks.windows import window_starts

FEATURE_NAMES = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "label_ids",
    "label_weights",
    "example_index",
    "word_index",
)


def word_pieces(tokenizer, words: Sequence[str]) -> List[List[int]]:
  """Piece ids of each word tokenized on its own; [UNK] for a word of no piece."""
  return [ids or [tokenizer.unk_id] for ids in tokenize_texts(tokenizer, list(words))]


def context_split(room: int, left_available: int, right_available: int):
  """(left, right) context pieces around a centred sentence (module docstring).

  Args:
    room: free pieces in the window.
    left_available, right_available: document pieces before / after the sentence.
  """
  left = min(left_available, room // 2)
  right = min(right_available, room - left)
  left = min(left_available, room - right)
  return left, right


def _document_runs(documents: Sequence[int]) -> List[range]:
  """Ranges of consecutive sentences with the same document index."""
  runs, begin = [], 0
  for i in range(1, len(documents) + 1):
    if i == len(documents) or documents[i] != documents[begin]:
      runs.append(range(begin, i))
      begin = i
  return runs


def tagging_features(
    sentences: Sequence[Any],
    tokenizer,
    label_list: Sequence[str],
    max_seq_length: int = 128,
    doc_stride: int = 64,
    document_context: bool = True,
) -> Features:
  """Converts tagged sentences into windowed feature rows (module docstring).

  Args:
    sentences: S `conll.TaggedSentence`s (words, tags (() if unlabeled), document), in
      file order: the neighbours of a sentence in its document are the sentences next to
      it with the same document index.
    tokenizer: a `tokenizer_interface.Tokenizer` (WordPiece or SentencePiece).
    label_list: the K tags; tag ids are indices into it.
    max_seq_length: T (at least 3).
    doc_stride: pieces between the starts of a long sentence's windows.
    document_context: fill the window with the document's neighbouring pieces.

  Returns:
    dict of numpy arrays, N rows (one per sentence, more for long sentences):
      input_ids, input_mask, segment_ids: int32 [N, T]
      label_ids: int32 [N, T]; the tag id at scored pieces (0 elsewhere, and for
        unlabeled sentences)
      label_weights: float32 [N, T]; 1.0 at scored pieces (each word's first piece, in
        one row only), 0.0 elsewhere
      example_index: int32 [N], the row's sentence (index into `sentences`)
      word_index: int32 [N, T]; the word number at scored pieces, -1 elsewhere
  """
  if max_seq_length < 3:
    raise ValueError(f"max_seq_length={max_seq_length} leaves no room for a word")
  capacity = max_seq_length - 2
  tag_id = {tag: i for i, tag in enumerate(label_list)}
  all_words = [w for s in sentences for w in s.words]
  pieces_of_words = word_pieces(tokenizer, all_words) if all_words else []

  # Per sentence: its pieces and the offset of each word's first piece.
  sentence_pieces: List[List[int]] = []
  first_pieces: List[np.ndarray] = []
  cursor = 0
  for s in sentences:
    ids: List[int] = []
    firsts = []
    for pieces in pieces_of_words[cursor : cursor + len(s.words)]:
      firsts.append(len(ids))
      ids.extend(pieces)
    cursor += len(s.words)
    sentence_pieces.append(ids)
    first_pieces.append(np.array(firsts, np.int64))

  rows: Dict[str, List[Any]] = {name: [] for name in FEATURE_NAMES}

  def add_row(index: int, window: Sequence[int], offset: int, words: np.ndarray, firsts):
    """One row: `window` pieces; `words` scored at window positions `firsts` + offset."""
    input_ids = np.full(max_seq_length, tokenizer.pad_id, np.int32)
    input_ids[0] = tokenizer.cls_id
    input_ids[1 : 1 + len(window)] = window
    input_ids[1 + len(window)] = tokenizer.sep_id
    input_mask = np.zeros(max_seq_length, np.int32)
    input_mask[: len(window) + 2] = 1
    positions = 1 + offset + np.asarray(firsts, np.int64)
    label_ids = np.zeros(max_seq_length, np.int32)
    tags = sentences[index].tags
    if tags:
      label_ids[positions] = [tag_id[tags[w]] for w in words]
    label_weights = np.zeros(max_seq_length, np.float32)
    label_weights[positions] = 1.0
    word_index = np.full(max_seq_length, -1, np.int32)
    word_index[positions] = words
    for name, value in (
        ("input_ids", input_ids),
        ("input_mask", input_mask),
        ("segment_ids", np.zeros(max_seq_length, np.int32)),
        ("label_ids", label_ids),
        ("label_weights", label_weights),
        ("example_index", index),
        ("word_index", word_index),
    ):
      rows[name].append(value)

  for run in _document_runs([s.document for s in sentences]):
    document = [p for i in run for p in sentence_pieces[i]]
    begin = 0
    for i in run:
      pieces, firsts = sentence_pieces[i], first_pieces[i]
      end = begin + len(pieces)
      words = np.arange(len(firsts))
      if len(pieces) <= capacity:
        left = right = 0
        if document_context:
          left, right = context_split(capacity - len(pieces), begin, len(document) - end)
        add_row(i, document[begin - left : end + right], left, words, firsts)
      else:
        starts = window_starts(len(pieces), capacity, doc_stride)
        lengths = [min(capacity, len(pieces) - s) for s in starts]
        best = best_window_of_pieces(starts, lengths, len(pieces))[firsts]
        for w, (start, length) in enumerate(zip(starts, lengths)):
          mine = best == w
          add_row(i, pieces[start : start + length], 0, words[mine], firsts[mine] - start)
      begin = end

  def stack(name, values):
    dtype = np.float32 if name == "label_weights" else np.int32
    if values:
      return np.array(values, dtype)
    return np.zeros((0,) if name == "example_index" else (0, max_seq_length), dtype)

  return {name: stack(name, values) for name, values in rows.items()}


def gather_word_predictions(
    features: Features, logits: np.ndarray, num_words: Sequence[int]
) -> List[np.ndarray]:
  """Per sentence, the tag id predicted for each word (argmax at its scored piece).

  Args:
    features: the rows of `tagging_features`.
    logits: float [N, T, K] of those rows.
    num_words: S, the word count of each sentence.

  Returns:
    S int arrays [words]; every word is scored in exactly one row.
  """
  predicted = [np.full(n, -1, np.int64) for n in num_words]
  rows, positions = np.nonzero(features["word_index"] >= 0)
  tag_ids = logits[rows, positions].argmax(-1)
  for row, position, tag in zip(rows, positions, tag_ids):
    predicted[features["example_index"][row]][features["word_index"][row, position]] = tag
  if any((p < 0).any() for p in predicted):
    raise RuntimeError("a word was scored in no row")
  return predicted
