"""Sentence(-pair) examples → fixed-length features: [CLS] a [SEP] (b [SEP]) packing.

Sentence-pair packing follows BERT (google-research/bert `run_classifier.py`):

  [CLS] a_1 ... a_n [SEP] b_1 ... b_m [SEP] [PAD] ...
  segment_ids:  0 for [CLS], a and the first [SEP]; 1 for b and the second [SEP]
  input_mask:   1 for real tokens, 0 for padding

When the pair does not fit, one piece at a time is removed from the END of whichever segment
is currently longer ("longest first"), so a short sentence keeps all of its tokens and a
long one loses its tail.

`convert_pair_examples` returns the `Features` dict (numpy arrays [N, ...]) that
`data/feature_cache.py` caches.
"""

import dataclasses
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from recurrent_bert.data.feature_cache import Features

Label = Union[str, float]

_TOKENIZE_BATCH_SIZE = 2048


@dataclasses.dataclass(frozen=True)
class PairExample:
  """One classification/regression example of a sentence(-pair) task.

  Attributes:
    guid: unique, human-readable id ("train-12"), used in messages.
    text_a: first segment.
    text_b: second segment, or None for single-sentence tasks (CoLA, SST-2).
    label: a label name of the task's label list, a float for regression (STS-B), or
      None for unlabeled (test) examples.
    index: the id the leaderboard expects in a submission: the `index`/`id` column of a
      GLUE test file, `idx` of BoolQ, (paragraph, question, answer) idx of MultiRC.
    group: examples that are scored together (MultiRC: one question's answers).
  """

  guid: str
  text_a: str
  text_b: Optional[str]
  label: Optional[Label]
  index: Any = None
  group: Optional[str] = None


# ------------------------------------------------------------------------- tokenization


def tokenize_texts(tokenizer, texts: Sequence[str]) -> List[List[int]]:
  """Word-piece ids of each text (batched through the in-graph tokenizer).

  Args:
    tokenizer: a `BertWordpieceTokenizer`.
    texts: N Python strings.

  Returns:
    N lists of piece ids.
  """
  ids: List[List[int]] = []
  for begin in range(0, len(texts), _TOKENIZE_BATCH_SIZE):
    batch = list(texts[begin : begin + _TOKENIZE_BATCH_SIZE])
    pieces = tokenizer.tokenize_flat(tf.constant(batch, dtype=tf.string))
    ids.extend(pieces.to_list())
  return ids


def truncate_longest_first(ids_a: List[int], ids_b: List[int], max_total: int) -> None:
  """Removes pieces from the end of the longer list until both fit in `max_total`, in place.

  On a tie the second segment loses a piece, as in google-research/bert.
  """
  while len(ids_a) + len(ids_b) > max_total:
    longer = ids_a if len(ids_a) > len(ids_b) else ids_b
    longer.pop()


def pack_pair(
    ids_a: Sequence[int],
    ids_b: Optional[Sequence[int]],
    max_seq_length: int,
    cls_id: int,
    sep_id: int,
    pad_id: int,
) -> Tuple[List[int], List[int], List[int]]:
  """Packs one (truncated) segment pair as [CLS] a [SEP] (b [SEP]) and pads it.

  Args:
    ids_a, ids_b: piece ids; together they must already fit (see truncate_longest_first).
    max_seq_length: T.

  Returns:
    (input_ids, input_mask, segment_ids), each a list of length T.
  """
  input_ids = [cls_id, *ids_a, sep_id]
  segment_ids = [0] * len(input_ids)
  if ids_b is not None:
    input_ids += [*ids_b, sep_id]
    segment_ids += [1] * (len(ids_b) + 1)
  if len(input_ids) > max_seq_length:
    raise ValueError(
        f"packed length {len(input_ids)} exceeds max_seq_length "
        f"{max_seq_length}; truncate first"
    )
  padding = max_seq_length - len(input_ids)
  input_mask = [1] * len(input_ids) + [0] * padding
  return input_ids + [pad_id] * padding, input_mask, segment_ids + [0] * padding


def convert_pair_examples(
    examples: Sequence[PairExample],
    tokenizer,
    max_seq_length: int,
    label_list: Optional[Sequence[str]] = None,
) -> Features:
  """Tokenizes, truncates (longest first) and packs examples into model features.

  Args:
    examples: N `PairExample`s (single sentences when text_b is None).
    tokenizer: a `BertWordpieceTokenizer`.
    max_seq_length: T, including [CLS] and the [SEP]s.
    label_list: the task's label names (label id = position); None for regression.

  Returns:
    dict of numpy arrays:
      input_ids, input_mask, segment_ids: int32 [N, T]
      label_ids: int32 [N] (classification, -1 for unlabeled examples) or
                 float32 [N] (regression, NaN for unlabeled examples)
      example_index: int32 [N], the position of the example in `examples`
      num_truncated_tokens: int32 [N], pieces removed to fit T

  Raises:
    ValueError: max_seq_length too small, or a label not in label_list.
  """
  if max_seq_length < 3:
    raise ValueError(f"max_seq_length must be at least 3, got {max_seq_length}")
  num_examples = len(examples)
  ids_a = tokenize_texts(tokenizer, [e.text_a for e in examples])
  pair_positions = [i for i, e in enumerate(examples) if e.text_b is not None]
  ids_b: List[Optional[List[int]]] = [None] * num_examples
  for i, ids in zip(
      pair_positions, tokenize_texts(tokenizer, [examples[i].text_b for i in pair_positions])
  ):
    ids_b[i] = ids

  arrays = {
      name: np.zeros((num_examples, max_seq_length), np.int32)
      for name in ("input_ids", "input_mask", "segment_ids")
  }
  truncated = np.zeros(num_examples, np.int32)
  for i in range(num_examples):
    a, b = ids_a[i], ids_b[i]
    original = len(a) + (len(b) if b is not None else 0)
    if b is None:
      del a[max_seq_length - 2 :]
    else:
      truncate_longest_first(a, b, max_seq_length - 3)
    truncated[i] = original - len(a) - (len(b) if b is not None else 0)
    packed = pack_pair(a, b, max_seq_length, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
    for name, row in zip(("input_ids", "input_mask", "segment_ids"), packed):
      arrays[name][i] = row
  arrays["label_ids"] = label_ids(examples, label_list)
  arrays["example_index"] = np.arange(num_examples, dtype=np.int32)
  arrays["num_truncated_tokens"] = truncated
  return arrays


def label_ids(examples: Sequence[PairExample], label_list: Optional[Sequence[str]]) -> np.ndarray:
  """Label ids [N] int32 (-1 when unlabeled), or float32 targets [N] (NaN) for regression."""
  if label_list is None:
    return np.array([np.nan if e.label is None else float(e.label) for e in examples], np.float32)
  index_of = {name: i for i, name in enumerate(label_list)}
  ids = np.full(len(examples), -1, np.int32)
  for i, example in enumerate(examples):
    if example.label is None:
      continue
    if example.label not in index_of:
      raise ValueError(
          f"example {example.guid}: label {example.label!r} is not one of {list(label_list)}"
      )
    ids[i] = index_of[example.label]
  return ids
