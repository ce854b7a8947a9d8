"""SQuAD span decoding inside the graph: the best span, its answer text, v2.0's "no answer".

SQuAD limitation: `answer_question` reads ONE window per question,
`[CLS] question [SEP] context [SEP]` with the question cut to `max_query_length` pieces and
the context cut to what is left of `max_seq_length`; answers past the cut cannot be found
(`context_truncated` flags those rows). For long contexts, use the windowed numpy
pipeline (`tasks/span/squad_windows.py`: doc_stride windows, `tasks/span/squad_postprocessing.py`).
The span is the best `start_logit + end_logit` with start <= end < start +
max_answer_length over the context pieces; a piece maps to the characters of the
basic-tokenizer word it came from, so answers are exact substrings of the original
context (as in `tasks/span/squad_alignment.py`). With a SentencePiece model a piece maps to
its own characters (`tokenization.pieces_with_offsets`), and a lone "▁" piece (no
character) neither starts nor ends the span.

SQuAD v2.0 "no answer": null_score_diff is `postprocess_squad`'s null odds of the window,
null score minus best span score; a row is answered "no answer" when it exceeds the
threshold, and then `answer` is "" and start_char = end_char = 0 (so answer ==
context[start_char:end_char] still holds); `score` stays the best span's. A row with no
context piece has no span: no_answer whatever the threshold, null_score_diff 1e9 (as in
`postprocess_squad`). The span search here is exhaustive, where `postprocess_squad` pairs
only its n_best_size best starts and ends: the two agree whenever that best span is among
them (always when n_best_size >= the context pieces).

`best_spans` is the graph twin of `postprocess_squad`, which is the spec: see "Twins, and
which is the spec" in serving/text_inputs.py.
"""

from typing import Dict

import tensorflow as tf

from recurrent_bert.serving.text_inputs import char_offsets

# null_score_diff of a row without a span (no context piece): "no answer" under any
# sensible threshold, finite so that JSON clients can read it (`postprocess_squad`'s value).
NO_SPAN_NULL_SCORE_DIFF = 1e9


def best_spans(start_logits, end_logits, first, length, max_answer_length, can_bound=None):
  """The best span start <= end < start + max_answer_length inside [first, first+length).

  Args:
    start_logits, end_logits: float [B, T].
    first, length: int [B], where the context pieces sit in each row.
    can_bound: bool [B, T] or None (all): positions that may start or end a span.
  Returns:
    (start, end, score): int32 [B] positions and float32 [B] start + end logit; rows with
    no context get start = end = first and score -inf.
  """
  steps = tf.shape(start_logits)[1]
  positions = tf.range(steps)[None, :]
  first, length = tf.cast(first, tf.int32)[:, None], tf.cast(length, tf.int32)[:, None]
  in_context = (positions >= first) & (positions < first + length)  # [B, T]
  if can_bound is not None:
    in_context &= can_bound
  offsets = positions[0][None, :] - positions[0][:, None]  # [T, T]: end - start
  allowed = (
      in_context[:, :, None]
      & in_context[:, None, :]
      & ((offsets >= 0) & (offsets < max_answer_length))[None]
  )
  scores = start_logits[:, :, None] + end_logits[:, None, :]
  scores = tf.where(allowed, scores, float("-inf"))
  best = tf.argmax(tf.reshape(scores, [tf.shape(scores)[0], -1]), axis=1, output_type=tf.int32)
  score = tf.reduce_max(scores, axis=[1, 2])
  has_span = tf.reduce_any(in_context, axis=1)
  start = tf.where(has_span, best // steps, first[:, 0])
  end = tf.where(has_span, best % steps, first[:, 0])
  return start, end, score


def boundable_positions(
    byte_start: tf.RaggedTensor, byte_end: tf.RaggedTensor, first: tf.Tensor, logits: tf.Tensor
) -> tf.Tensor:
  """best_spans' `can_bound`: the row positions whose context piece covers a character.

  Args:
    byte_start, byte_end: int64 RaggedTensors [B, (P)], each context piece's bytes.
    first: int64 [B], the row position of each row's first context piece.
    logits: float [B, T], the span logits (only T is read).
  Returns:
    bool [B, T]; positions outside the context read some piece, so best_spans' own
    context bounds must still apply.
  """
  # Pieces that cover a character (not SentencePiece's lone "▁"), at their row positions.
  covers = (byte_end > byte_start).to_tensor(default_value=False)  # [B, P]
  piece_of = tf.range(tf.shape(logits)[1], dtype=tf.int64)[None, :] - first[:, None]
  piece_of = tf.clip_by_value(
      piece_of, 0, tf.maximum(tf.cast(tf.shape(covers)[1], tf.int64) - 1, 0)
  )
  covers = tf.pad(covers, [[0, 0], [0, 1]])  # rows without context: a dummy column
  return tf.gather(covers, piece_of, batch_dims=1)


def no_answer_outputs(
    start_logits, end_logits, score, has_span, null_score_diff_threshold
) -> Dict[str, tf.Tensor]:
  """SQuAD v2.0's null_score, null_score_diff and no_answer (module docstring).

  Args:
    start_logits, end_logits: float32 [B, T]; position 0 is [CLS].
    score: float32 [B], the best span's score (best_spans).
    has_span: bool [B], rows with a span at all.
    null_score_diff_threshold: float32 scalar or [B].
  Returns:
    dict of float32 [B] null_score, null_score_diff and bool [B] no_answer.
  """
  null_score = start_logits[:, 0] + end_logits[:, 0]  # [CLS]
  null_score_diff = tf.where(has_span, null_score - score, NO_SPAN_NULL_SCORE_DIFF)
  # A row without a span answers "no answer" whatever the threshold.
  no_answer = ~has_span | (null_score_diff > null_score_diff_threshold)
  return {"null_score": null_score, "null_score_diff": null_score_diff, "no_answer": no_answer}


def answer_text(context, byte_start, byte_end, start, end, first, has_span) -> Dict[str, tf.Tensor]:
  """The answer substring of each context and its character offsets.

  Args:
    context: string [B].
    byte_start, byte_end: int64 RaggedTensors [B, (P)], each context piece's bytes.
    start, end: int32 [B], the span's row positions (best_spans).
    first: int64 [B], the row position of each row's first context piece.
    has_span: bool [B]; rows without one answer "" at character 0.
  Returns:
    dict of string [B] answer, int32 [B] start_char and end_char
    (answer == context[start_char:end_char]).
  """
  piece_start = tf.where(has_span, start - tf.cast(first, tf.int32), 0)
  piece_end = tf.where(has_span, end - tf.cast(first, tf.int32), 0)
  # Rows without context get a dummy piece column so the gathers stay in range.
  starts = tf.pad(byte_start.to_tensor(), [[0, 0], [0, 1]])
  ends = tf.pad(byte_end.to_tensor(), [[0, 0], [0, 1]])
  answer_byte_start = tf.where(has_span, tf.gather(starts, piece_start, batch_dims=1), 0)
  answer_byte_end = tf.where(has_span, tf.gather(ends, piece_end, batch_dims=1), 0)
  answer = tf.strings.substr(
      context, answer_byte_start, answer_byte_end - answer_byte_start, unit="BYTE"
  )
  return {
      "answer": answer,
      "start_char": char_offsets(context, answer_byte_start),
      "end_char": char_offsets(context, answer_byte_end),
  }
