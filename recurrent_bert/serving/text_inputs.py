"""Text to model inputs inside the graph: the signatures' input specs, truncation, packing.

Packing is google-research/bert's: `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, pairs cut
longest first (a tie cuts the second text) to fit `max_seq_length`. T is the longest packed
row of the batch (at most `max_seq_length`); shorter rows are right-padded, and
`input_mask` says which positions are real.

Twins, and which is the spec: serving must pack and decode inside the graph, training
reads numpy features, so two pieces exist twice. The numpy side is the spec and the graph
side is held to it on the same inputs: `truncate_pair` and the packing here against
`tasks/pair_features.py` (`truncate_longest_first`, `pack_pair`; tests/support/export_checks.py
serves exported models on rows that pipeline packed), `best_spans` (serving/spans.py) against
`tasks/span/squad_postprocessing.py` (`postprocess_squad`; tests/end_to_end/test_export_tasks.py).
Change the spec first, then its twin here.
"""

from typing import Dict, Optional

import tensorflow as tf


def string_inputs(*names):
  """Input signature of string [batch] arguments (named as the signature's inputs)."""
  return [tf.TensorSpec([None], tf.string, name=name) for name in names]


IDS_SIGNATURE = [
    tf.TensorSpec([None, None], tf.int32, name=name)
    for name in ("input_ids", "input_mask", "segment_ids")
]


def keep_first(ids: tf.RaggedTensor, counts: tf.Tensor) -> tf.RaggedTensor:
  """The first counts[b] (or `counts`, a scalar) items of each row b of a [B, (n)] ragged."""
  lengths = ids.row_lengths()
  keep = tf.minimum(lengths, tf.cast(counts, lengths.dtype))  # also broadcasts a scalar
  return tf.ragged.boolean_mask(ids, tf.ragged.range(lengths) < keep[:, None])


def truncate_pair(ids_a: tf.RaggedTensor, ids_b: Optional[tf.RaggedTensor], max_pieces: int):
  """Cuts (a, b) to at most `max_pieces` pieces together, longest first.

  Closed form of google-research/bert's loop "pop from the longer, the second on a tie":
  a keeps min(len_a, max(budget - len_b, ceil(budget / 2))), b keeps the rest.

  Args:
    ids_a, ids_b: int RaggedTensors [B, (pieces)]; ids_b may be None.
    max_pieces: the budget.
  Returns:
    (ids_a, ids_b) truncated, same types.
  """
  len_a = ids_a.row_lengths()
  if ids_b is None:
    return keep_first(ids_a, tf.minimum(len_a, max_pieces)), None
  len_b = ids_b.row_lengths()
  keep_a = tf.minimum(len_a, tf.maximum(max_pieces - len_b, (max_pieces + 1) // 2))
  keep_b = tf.minimum(len_b, max_pieces - keep_a)
  return keep_first(ids_a, keep_a), keep_first(ids_b, keep_b)


def pack_inputs(
    ids_a: tf.RaggedTensor,
    ids_b: Optional[tf.RaggedTensor],
    max_seq_length: int,
    cls_id: int,
    sep_id: int,
    pad_id: int,
) -> Dict[str, tf.Tensor]:
  """Truncates and packs [CLS] a [SEP] (b [SEP]) into right-padded model inputs.

  Args:
    ids_a, ids_b: int RaggedTensors [B, (pieces)]; ids_b may be None.
    max_seq_length: longest packed row, special tokens included.
  Returns:
    dict of int32 [B, T] input_ids, input_mask, segment_ids; T = the longest packed row.
  """
  special = 3 if ids_b is not None else 2
  ids_a, ids_b = truncate_pair(ids_a, ids_b, max_seq_length - special)
  ids_a = tf.cast(ids_a, tf.int32)
  batch = ids_a.nrows()

  def column(value):
    return tf.RaggedTensor.from_tensor(tf.fill(tf.stack([batch, 1]), value))

  pieces = [column(cls_id), ids_a, column(sep_id)]
  segments = [column(0), tf.zeros_like(ids_a), column(0)]
  if ids_b is not None:
    ids_b = tf.cast(ids_b, tf.int32)
    pieces += [ids_b, column(sep_id)]
    segments += [tf.ones_like(ids_b), column(1)]
  input_ids = tf.concat(pieces, axis=1)
  return {
      "input_ids": input_ids.to_tensor(default_value=pad_id),
      "input_mask": tf.ones_like(input_ids).to_tensor(default_value=0),
      "segment_ids": tf.concat(segments, axis=1).to_tensor(default_value=0),
  }


def char_offsets(texts: tf.Tensor, byte_offsets: tf.Tensor) -> tf.Tensor:
  """Character (UTF-8) offsets of byte offsets into texts, for clients that index by character.

  Args:
    texts: string tensor.
    byte_offsets: int tensor of texts' shape, each a byte offset into its text.
  Returns:
    int32 tensor of that shape: the characters before each byte offset.
  """
  prefix = tf.strings.substr(texts, tf.zeros_like(byte_offsets), byte_offsets, unit="BYTE")
  return tf.strings.length(prefix, unit="UTF8_CHAR")
