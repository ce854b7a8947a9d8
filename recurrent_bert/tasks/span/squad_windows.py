"""SQuAD examples cut into windowed feature rows, one or more per example.

Windows (google-research/bert `run_squad.py`): the question is cut to max_query_length
pieces; the context pieces are covered by windows of max_seq_length − |question| − 3
pieces starting doc_stride apart; each feature is [CLS] question [SEP] window [SEP]. A
context piece seen by several windows is scored only in the window where it has the most
context on both sides (`token_is_max_context`).

Each row keeps its context pieces' character spans (`squad_alignment`), so that
`squad_postprocessing` maps predicted pieces back to the original text.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from recurrent_bert.data.feature_cache import Features
from recurrent_bert.tasks.pair_features import pack_pair
from recurrent_bert.tasks.pair_features import tokenize_texts
from recurrent_bert.tasks.span.squad import SquadAnswer
from recurrent_bert.tasks.span.squad import SquadExample
from recurrent_bert.tasks.span.squad_alignment import ContextPieces
from recurrent_bert.tasks.span.squad_alignment import context_pieces
from recurrent_bert.tasks.windows import best_window_of_pieces
from recurrent_bert.tasks.windows import window_starts


def answer_piece_span(pieces: ContextPieces, answer: SquadAnswer) -> Optional[Tuple[int, int]]:
  """The smallest piece span [first, last] covering the answer's characters, or None."""
  char_end = answer.char_start + len(answer.text)
  first = int(np.searchsorted(pieces.char_end, answer.char_start, side="right"))
  last = int(np.searchsorted(pieces.char_start, char_end, side="left")) - 1
  return (first, last) if first <= last else None


def squad_features(
    examples: Sequence[SquadExample],
    tokenizer,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
) -> Features:
  """Converts examples into windowed features (one example → one or more rows).

  Args:
    examples: E `SquadExample`s.
    tokenizer: a `tokenizer_interface.Tokenizer` (WordPiece or SentencePiece).
    max_seq_length: T.
    doc_stride: distance, in pieces, between the starts of consecutive windows.
    max_query_length: questions are cut to this many pieces.

  Returns:
    dict of numpy arrays, N = number of windows:
      input_ids, input_mask, segment_ids: int32 [N, T]
      start_positions, end_positions: int32 [N]; the first answer's first/last piece in
        the row, 0 ([CLS]) when the window does not contain it, the question is
        unanswerable, or the example has no answers
      example_index: int32 [N], position of the row's example in `examples`
      token_char_start, token_char_end: int32 [N, T]; context char span of each context
        piece, -1 for [CLS], question, [SEP] and padding
      token_is_max_context: int32 [N, T]; 1 where this row is the piece's best window
  """
  rows: Dict[str, List[Any]] = {
      name: []
      for name in (
          "input_ids",
          "input_mask",
          "segment_ids",
          "start_positions",
          "end_positions",
          "example_index",
          "token_char_start",
          "token_char_end",
          "token_is_max_context",
      )
  }
  unique_contexts = list(dict.fromkeys(e.context for e in examples))
  pieces_of = dict(zip(unique_contexts, context_pieces(unique_contexts, tokenizer)))
  questions = tokenize_texts(tokenizer, [e.question for e in examples])

  for example_index, (example, question_ids) in enumerate(zip(examples, questions)):
    question_ids = question_ids[:max_query_length]
    max_window = max_seq_length - len(question_ids) - 3
    if max_window <= 0:
      raise ValueError(
          f"max_seq_length {max_seq_length} leaves no room for the context "
          f"after a {len(question_ids)}-piece question"
      )
    pieces = pieces_of[example.context]
    answer_span = None
    if example.answers and not example.is_impossible:
      answer_span = answer_piece_span(pieces, example.answers[0])
    starts = window_starts(len(pieces.ids), max_window, doc_stride)
    lengths = [min(max_window, len(pieces.ids) - s) for s in starts]
    best_window = best_window_of_pieces(starts, lengths, len(pieces.ids))
    context_offset = len(question_ids) + 2  # [CLS] question [SEP]
    for w, (start, length) in enumerate(zip(starts, lengths)):
      window = slice(start, start + length)
      input_ids, input_mask, segment_ids = pack_pair(
          question_ids,
          pieces.ids[window].tolist(),
          max_seq_length,
          tokenizer.cls_id,
          tokenizer.sep_id,
          tokenizer.pad_id,
      )
      char_start = np.full(max_seq_length, -1, np.int32)
      char_end = np.full(max_seq_length, -1, np.int32)
      max_context = np.zeros(max_seq_length, np.int32)
      inside = slice(context_offset, context_offset + length)
      char_start[inside] = pieces.char_start[window]
      char_end[inside] = pieces.char_end[window]
      max_context[inside] = best_window[window] == w
      start_position = end_position = 0
      if answer_span is not None and answer_span[0] >= start and answer_span[1] < start + length:
        start_position = answer_span[0] - start + context_offset
        end_position = answer_span[1] - start + context_offset
      for name, value in (
          ("input_ids", input_ids),
          ("input_mask", input_mask),
          ("segment_ids", segment_ids),
          ("start_positions", start_position),
          ("end_positions", end_position),
          ("example_index", example_index),
          ("token_char_start", char_start),
          ("token_char_end", char_end),
          ("token_is_max_context", max_context),
      ):
        rows[name].append(value)
  return {
      name: (
          np.array(values, np.int32)
          if values
          else np.zeros(
              (0,)
              if name in ("start_positions", "end_positions", "example_index")
              else (0, max_seq_length),
              np.int32,
          )
      )
      for name, values in rows.items()
  }
