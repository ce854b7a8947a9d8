"""Is a pretraining run's result a result? The unigram plateau and the still-falling flag.

A masked LM first learns how often each piece is the one to predict, and can sit there
for a long time: every mask predicted from the pieces' frequencies alone, whatever the
context. Its held-out loss is then that of the unigram model,

    U = -(1/N) Σ_j log p(v_j),   p(v) = (c(v) + α) / (C + α·V),

over the N masked positions j (weight > 0) of the held-out records an evaluation reads,
v_j the original piece at j, c(v) how often v is a masked piece of the training records
(C in all, V distinct pieces of both; α = 1/2 keeps a piece the training records never
masked finite). A run whose held-out loss at its last evaluation is within
`UNIGRAM_MARGIN` of U has not shown that it uses the context at all.

A run can also stop while its loss is still falling fast: a comparison with such a run is
a comparison of how fast the models leave a plateau (what the papers' loss curves show),
not of where they end. `FALLING_RATE` is the line: the fall between the last two held-out
evaluations, scaled to 10% of the run's steps.

Reads the records without TensorFlow (`tfrecord_frames`, `example_decoder`), so the
`--pretraining_only` report of a JAX run needs none.
"""

import collections
import dataclasses
import glob
import math
from typing import Dict, Mapping, Sequence, Tuple

from recurrent_bert.data import example_decoder
from recurrent_bert.data import tfrecord_frames

# Nats: a held-out MLM loss above U - UNIGRAM_MARGIN is on the unigram plateau. The demo's
# tiny models are 0.1 below U a hundred steps after they leave it, and end 0.25 to 1.0
# below (docs/demo.md, "Plateaus").
UNIGRAM_MARGIN = 0.1
# Nats per 10% of the run's steps, between the last two held-out evaluations.
FALLING_RATE = 0.05
# Add-α smoothing of the unigram model, and the training records its counts read: the
# demo's U is 6.471 from 5,000 records, 6.422 from 20,000, 6.404 from all 67,000. 20,000
# keep the report quick where crcmod is pure Python (the GPU machine); U is then a little
# high (+0.02 nats here), which flags a little less.
SMOOTHING = 0.5
MAX_TRAIN_RECORDS = 20_000

ON_PLATEAU = "on the unigram plateau"
ABOVE_PLATEAU = "above the unigram plateau"  # not even the pieces' frequencies learned
STILL_FALLING = "still falling"


def masked_piece_counts(files: Sequence[str], max_records: int) -> collections.Counter:
  """{piece id: masked positions of weight > 0} over the first `max_records` records.

  Args:
    files: TFRecord files, read in sorted order (as the evaluation reads the held-out ones).
    max_records: records to read (0: all of them).
  """
  counts = collections.Counter()
  read = 0
  for path in sorted(files):
    for _, _, data in tfrecord_frames.read_frames(path):
      if max_records and read >= max_records:
        return counts
      example = example_decoder.decode_example(data)
      ids = example["masked_lm_ids"][1]
      weights = example["masked_lm_weights"][1]
      counts.update(int(i) for i, w in zip(ids, weights) if w > 0)
      read += 1
  return counts


def unigram_loss(held_out: Mapping[int, int], training: Mapping[int, int]) -> float:
  """U (nats) of the held-out masked pieces under the training ones' smoothed frequencies.

  Args:
    held_out: {piece: masked positions} of the held-out records.
    training: {piece: masked positions} of the training records.

  Returns:
    U; nan when the held-out records mask nothing.
  """
  n = sum(held_out.values())
  if not n:
    return float("nan")
  total = sum(training.values())
  distinct = len(set(held_out) | set(training))
  denominator = total + SMOOTHING * distinct
  return (
      -sum(
          count * math.log((training.get(piece, 0) + SMOOTHING) / denominator)
          for piece, count in held_out.items()
      )
      / n
  )


def unigram_plateau(train_pattern: str, eval_pattern: str, eval_records: int) -> Tuple[float, int]:
  """(U in nats, held-out masked positions counted) of a run's records.

  Args:
    train_pattern: the training records (glob); the first MAX_TRAIN_RECORDS are counted.
    eval_pattern: the held-out records (glob).
    eval_records: records an evaluation reads (0: all).
  """
  held_out = masked_piece_counts(glob.glob(eval_pattern), eval_records)
  training = masked_piece_counts(glob.glob(train_pattern), MAX_TRAIN_RECORDS)
  return unigram_loss(held_out, training), sum(held_out.values())


def held_out_unigram(inputs: Dict) -> Tuple[float, int]:
  """`unigram_plateau` from the reports' inputs ("train_data", "eval_data": the records'
  glob patterns; the eval_data stage's result says how many records an evaluation reads)."""
  read = inputs["results"].get("eval_data", {}).get("read_per_evaluation", 0)
  return unigram_plateau(inputs["train_data"], inputs["eval_data"], read)


@dataclasses.dataclass
class RunFlag:
  """What the last held-out evaluations of one run say about it.

  Attributes:
    last_loss: held-out MLM loss at the last evaluation.
    above_unigram: U - last_loss: how far below the unigram plateau the run ended (nats;
      > UNIGRAM_MARGIN to count as off it).
    drop_per_tenth: the fall of the held-out loss between the last two evaluations, per
      10% of the run's steps (nats; nan with a single evaluation).
  """

  last_loss: float
  above_unigram: float
  drop_per_tenth: float

  @property
  def on_plateau(self) -> bool:
    return self.above_unigram <= UNIGRAM_MARGIN

  @property
  def still_falling(self) -> bool:
    return self.drop_per_tenth > FALLING_RATE

  @property
  def label(self) -> str:
    """ABOVE_PLATEAU, ON_PLATEAU, STILL_FALLING, or "" for a run that settled below it."""
    if self.above_unigram < -UNIGRAM_MARGIN:
      return ABOVE_PLATEAU
    if self.on_plateau:
      return ON_PLATEAU
    return STILL_FALLING if self.still_falling else ""


def flag_run(eval_curve: Mapping[int, float], total_steps: int, unigram: float) -> RunFlag:
  """The flag of one run from its held-out curve {step: MLM loss}.

  Args:
    eval_curve: held-out MLM loss per evaluated step (at least one).
    total_steps: the run's training steps (sets what 10% of the run is).
    unigram: U of the held-out records, nats.
  """
  steps = sorted(eval_curve)
  last = eval_curve[steps[-1]]
  drop = float("nan")
  if len(steps) >= 2:
    previous = steps[-2]
    drop = (eval_curve[previous] - last) / (steps[-1] - previous) * 0.1 * total_steps
  return RunFlag(last_loss=last, above_unigram=unigram - last, drop_per_tenth=drop)


def flag_rows(rows: Sequence[Dict], unigram: float) -> None:
  """Adds "plateau_flags" (one label per pretraining seed, "" when settled) to each row.

  Rows need "pretrain_seeds", "eval_curves" ({seed: {step: loss}}) and "pretrain_steps".
  """
  for row in rows:
    flags = []
    for seed in row["pretrain_seeds"]:
      curve = {int(k): v for k, v in row["eval_curves"].get(seed, {}).items()}
      flags.append(flag_run(curve, row["pretrain_steps"], unigram).label if curve else "")
    row["plateau_flags"] = flags


def describe_rule(unigram: float, masked: int) -> str:
  """The rule, with this run's U, for the report."""
  return (
      f"The unigram plateau is U = {unigram:.3f} nats: the held-out MLM loss of a model that "
      "predicts every mask from how often each piece is masked in the training records, "
      f"whatever the context ({masked:,} masked positions of the held-out records each "
      f"evaluation reads). A run is flagged *{ON_PLATEAU}* when its held-out MLM loss at "
      f"the last evaluation is within {UNIGRAM_MARGIN:g} nats of U (*{ABOVE_PLATEAU}* when "
      f"more than {UNIGRAM_MARGIN:g} above it), and *{STILL_FALLING}* "
      f"when its held-out loss fell by more than {FALLING_RATE:g} nats per 10% of the "
      "run's steps between the last two evaluations: a verdict involving a flagged run "
      "measures how fast the models leave a plateau (the papers' loss curves), not where "
      "they end."
  )
