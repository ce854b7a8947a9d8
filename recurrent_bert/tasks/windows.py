"""Windows over a piece sequence longer than the model's input, and the max-context rule.

SQuAD contexts (span/squad_windows.py) and tagged documents (tagging/tagging_features.py)
are cut the same way (google-research/bert `run_squad.py`): windows of a fixed number of
pieces starting doc_stride apart, the last one reaching the end; a piece seen by several
windows is scored in the one where it has the most context on both sides.
"""

from typing import List, Sequence

import numpy as np


def window_starts(num_pieces: int, window_length: int, doc_stride: int) -> List[int]:
  """Start offsets of the windows covering num_pieces pieces (the last one reaches the end)."""
  starts, start = [], 0
  while True:
    starts.append(start)
    if start + window_length >= num_pieces:
      return starts
    start += min(window_length, doc_stride)


def best_window_of_pieces(
    starts: Sequence[int], lengths: Sequence[int], num_pieces: int
) -> np.ndarray:
  """int [num_pieces]: the window in which each context piece has the most context.

  A piece's context in a window is min(pieces left of it, pieces right of it) plus a small
  bonus for longer windows (google-research/bert's rule); ties go to the earlier window.
  """
  starts = np.asarray(starts)[:, None]
  lengths = np.asarray(lengths)[:, None]
  pieces = np.arange(num_pieces)[None, :]
  left, right = pieces - starts, starts + lengths - 1 - pieces
  scores = np.where((left >= 0) & (right >= 0), np.minimum(left, right) + 0.01 * lengths, -np.inf)
  return np.argmax(scores, axis=0)  # the first maximum: the earlier window
