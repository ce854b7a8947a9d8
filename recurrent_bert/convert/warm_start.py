"""Warm start: a model of any family initialised from a BERT-orig model of the same sizes.

Contract: weights are matched by our variable path alone, which names a weight's role,
not the model it sits in; every shared weight is copied, the rest is reported.
"""

import dataclasses
from typing import List

from recurrent_bert.convert.mapping import CheckpointMappingError
from recurrent_bert.convert.mapping import assign_pairs


@dataclasses.dataclass
class WarmStartReport:
  """What `warm_start` did, by our variable paths.

  Attributes:
    copied: target weights that received the source weight of the same path.
    new: target weights the source has no counterpart for (e.g. BLSTM, SwishRNN,
      relative attention bias): they keep their fresh initialisation.
    unused: source weights the target has no place for (e.g. the FFN of a
      TRANS-BLSTM-1 or SwishRNN block).
  """

  copied: List[str]
  new: List[str]
  unused: List[str]


_MAX_NAMED_MISMATCHES = 8  # enough to see the pattern; a wrong size fails every layer


def warm_start(target, source) -> WarmStartReport:
  """Copies every weight `target` shares with `source` (same variable path).

  Our variable paths name the role of a weight, not the model it sits in
  ("block_3/attention/query/kernel", "block_3/output_layer_norm/gamma",
  "mlm_head/transform/kernel"), so a BERT-orig model and any variant of the same sizes
  share embeddings, attention, FFN (where the variant keeps one), LayerNorms, pooler and
  heads.

  Args:
    target: an `Encoder` or a model with heads of any family (e.g. a `Pretrainer`).
    source: an `Encoder` or a model with heads (usually the imported BERT `Pretrainer`).
  Returns:
    WarmStartReport.
  Raises:
    CheckpointMappingError: a shared weight differs in shape; lists every such weight,
      nothing is assigned.
  """
  source_weights = {v.path: v for v in source.weights}
  target_weights = {v.path: v for v in target.weights}
  shared = [p for p in target_weights if p in source_weights]
  mismatched = [
      f"{p}: target {tuple(target_weights[p].shape)}, source {tuple(source_weights[p].shape)}"
      for p in shared
      if tuple(target_weights[p].shape) != tuple(source_weights[p].shape)
  ]
  if mismatched:
    shown = "; ".join(mismatched[:_MAX_NAMED_MISMATCHES])
    more = len(mismatched) - _MAX_NAMED_MISMATCHES
    raise CheckpointMappingError(
        f"warm start: shape mismatch for {len(mismatched)} shared weight(s): {shown}"
        + (f"; and {more} more" if more > 0 else "")
        + " (the target config needs the source's sizes)"
    )
  assign_pairs([(target_weights[p], source_weights[p].numpy()) for p in shared])
  return WarmStartReport(
      copied=shared,
      new=[p for p in target_weights if p not in source_weights],
      unused=[p for p in source_weights if p not in target_weights],
  )
