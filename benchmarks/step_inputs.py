"""What a benchmarked training step is given: a synthetic pretraining batch, and each
preset once per implementation of its recurrence that the flags name.

Shared by step_time.py (which times the step) and gpu/compiled_for_gpu.py (which compiles
it for a GPU without one). Import it once the Keras backend is set: it imports the package.
"""

import argparse
from typing import Dict, List, Optional, Tuple

import numpy as np

from recurrent_bert.config import BLSTM_IMPLEMENTATIONS
from recurrent_bert.config import SWISH_RNN_IMPLEMENTATIONS
from recurrent_bert.config import ModelConfig

# The recurrences' config fields, each timed once per implementation its flag names.
RECURRENCE_FIELDS = {
    "blstm_implementation": BLSTM_IMPLEMENTATIONS,
    "swish_rnn_implementation": SWISH_RNN_IMPLEMENTATIONS,
}


def make_batch(vocab_size, batch, length, predictions, seed=0) -> Dict[str, np.ndarray]:
  """A synthetic pretraining batch in the schema's names (data/schema.py), no padding.

  input_ids, input_mask, segment_ids int32 [B, T]; masked_lm_positions (distinct, sorted,
  never [CLS]), masked_lm_ids int32 [B, P]; masked_lm_weights float32 [B, P];
  next_sentence_labels int32 [B, 1].
  """
  rng = np.random.default_rng(seed)
  first = length // 2
  positions = rng.permuted(np.tile(np.arange(1, length), (batch, 1)), axis=1)[:, :predictions]
  return {
      "input_ids": rng.integers(5, vocab_size, (batch, length)).astype(np.int32),
      "input_mask": np.ones((batch, length), np.int32),
      "segment_ids": np.tile([0] * first + [1] * (length - first), (batch, 1)).astype(np.int32),
      "masked_lm_positions": np.sort(positions, axis=1).astype(np.int32),
      "masked_lm_ids": rng.integers(5, vocab_size, (batch, predictions)).astype(np.int32),
      "masked_lm_weights": np.ones((batch, predictions), np.float32),
      "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype(np.int32),
  }


def add_implementation_flags(parser: argparse.ArgumentParser, verb: str) -> None:
  """--blstm_implementations and --swish_rnn_implementations: each preset with that
  recurrence once per implementation named (`implementation_variants`)."""
  for field, choices in RECURRENCE_FIELDS.items():
    parser.add_argument(
        f"--{field}s",
        nargs="+",
        default=["auto"],
        help=f"{verb} presets with a {field.split('_implementation')[0]} once per "
        f"implementation (rows 'preset [name]', after the others'): {', '.join(choices)}",
    )


def unknown_implementation(args) -> Optional[str]:
  """The one-line complaint about an implementation the flags name that does not exist."""
  for field, choices in RECURRENCE_FIELDS.items():
    for impl in getattr(args, f"{field}s"):
      if impl not in choices:
        return f"--{field}s: {impl!r}: choose from {', '.join(choices)}"
  return None


def implementation_variants(name: str, config, args) -> List[Tuple[str, "ModelConfig"]]:
  """(label, config) per implementation `args` asks of the preset's recurrence
  (`--blstm_implementations`, `--swish_rnn_implementations`): "auto" is the preset as it
  is, under its own name; another is "name [implementation]"."""
  field = "blstm_implementation" if config.uses_blstm else None
  field = "swish_rnn_implementation" if config.mixer == "swishrnn" else field
  return [
      (name, config) if impl == "auto" else (f"{name} [{impl}]", config.replace(**{field: impl}))
      for impl in (getattr(args, f"{field}s") if field else ["auto"])
  ]
