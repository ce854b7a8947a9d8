"""The papers' claims as the reports show them: the claims tables and section (markdown),
and a claim as results.json holds it.

`claims` measures and judges each claim; here is only how it reads.
"""

import dataclasses
import math
from typing import Sequence

from recurrent_bert.demo.claims import FINE_TUNING
from recurrent_bert.demo.claims import INCONCLUSIVE
from recurrent_bert.demo.claims import MAX_SEEDS
from recurrent_bert.demo.claims import NOT_REPRODUCED
from recurrent_bert.demo.claims import PRETRAINING
from recurrent_bert.demo.claims import REPRODUCED
from recurrent_bert.demo.claims import STABILITY_SOURCE
from recurrent_bert.demo.claims import Claim
from recurrent_bert.demo.claims import seeds_needed


def claims_table(items: Sequence[Claim]) -> str:
  """The report's claims table (markdown)."""
  lines = [
      "| paper | claim, for these models | measured (mean ± std over seeds) | difference "
      "[95% interval] | verdict | what would settle it |",
      "|---|---|---|---|---|---|",
  ]
  for claim in items:
    c = claim.comparison
    interval = (
        "no interval (1 seed)"
        if math.isnan(c.low)
        else f"[{c.low:+.3f}, {c.high:+.3f}] {c.design}, {c.seeds} seeds"
    )
    lines.append(
        f"| {claim.source} | {claim.statement} | {claim.evidence} | {c.estimate:+.3f} "
        f"{interval} | **{claim.verdict}**"
        + (f" (flagged runs: {claim.flagged})" if claim.flagged else "")
        + f" | {claim.budget() or '—'} |"
    )
  return "\n".join(lines)


def _tally(items: Sequence[Claim]) -> str:
  verdicts = [c.verdict for c in items]
  return ", ".join(f"{verdicts.count(v)} {v}" for v in (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE))


def claims_section(items: Sequence[Claim], settings: dict) -> list:
  """The report's claims, as markdown lines: the MLM claims with their verdicts, then
  the fine-tuning claims with what would settle them.

  Args:
    items: the claims (`paper_claims`).
    settings: the demo's settings as a dict ("pretrain_seeds", "finetune_seeds").
  """
  mlm = [c for c in items if c.stage == PRETRAINING]
  tuning = [c for c in items if c.stage == FINE_TUNING]
  lines = [
      f"**Held-out MLM loss** ({len(mlm)} claims: {_tally(mlm)}). Each recurrent model "
      "against its paper's baseline: TRANS-BLSTM against BERT-orig, SwishRNN-BERT against "
      "BERT-rab (the same relative attention bias, an FFN where SwishRNN has its "
      "recurrence). The difference is ours minus the baseline's at the last step. "
      f"Design: *paired* by pretraining seed ({len(settings['pretrain_seeds'])} seeds): "
      "seed k gives every model the same record order and masks, so seed k's difference "
      "is the unit and the interval is the t interval of those differences (n - 1 "
      "degrees of freedom); *Welch* where the models' seeds differ. The verdict reads the "
      "95% interval against the direction the paper claims.",
      "",
      claims_table(mlm) if mlm else "No recurrent model with a baseline among --models.",
  ]
  if tuning:
    seeds = len(settings["finetune_seeds"])
    lines += [
        "",
        f"**Fine-tuning** ({len(tuning)} claims: {_tally(tuning)}): stability across "
        "learning rates (SwishRNN Fig. 3) and downstream accuracy (the papers' tables), "
        f"against the same baselines, paired by fine-tuning seed ({seeds} seeds per model and "
        "learning rate), every run from its model's first pretraining seed's encoder: a "
        "verdict speaks of those pretrained models. *What would settle it* is the seeds "
        "per group at which the interval would exclude 0 with 80% power if the measured "
        "difference and spread were the true ones (an estimate from a few seeds, itself "
        "rough), at this machine's speed. The default, 4 seeds of 300 steps, is sized from 8 "
        "measured seeds: it decides the TRANS-BLSTM accuracy claim in 96% of simulated runs; "
        "SwishRNN-BERT's smaller accuracy gain and the stability claims (differences of "
        "differences of short runs) need about 15 seeds, more than a 30-minute CPU default "
        'affords (docs/demo.md, "Why these defaults").',
        "",
        claims_table(tuning),
    ]
    on_gpu = gpu_command([c for c in tuning if c.source == STABILITY_SOURCE], settings)
    if on_gpu:
      lines += ["", on_gpu]
  return lines


# One fine-tuning run of a tiny model under JAX on one H100, start-up and compilation
# included, several side by side: an estimate (not yet timed), from the H200 claims run, whose
# processes took about a minute to compile each wave of 4 mini pretraining runs.
GPU_SECONDS_PER_RUN = 40
GPU_JOBS = 4


def gpu_command(stability: Sequence[Claim], settings: dict) -> str:
  """The demo command that would settle the inconclusive stability claims on a GPU, with
  its estimated fine-tuning time; empty when none needs it or none can be sized."""
  needed = [seeds_needed(c.comparison) for c in stability if c.verdict == INCONCLUSIVE]
  needed = [n for n in needed if n is not None]
  if not needed:
    return ""
  seeds = max(needed)
  if seeds > MAX_SEEDS:
    return (
        "On a GPU: not even then; the measured stability differences are too small for their "
        f"spread (more than {MAX_SEEDS} seeds per learning rate)."
    )
  runs = len(settings["presets"]) * len(settings["finetune_learning_rates"]) * seeds
  minutes = runs * GPU_SECONDS_PER_RUN / GPU_JOBS / 60
  return (
      f"On a GPU, {seeds} fine-tuning seeds per learning rate would settle the stability "
      f'claims: `make demo DEMO_ARGS="--backend=jax --jobs={GPU_JOBS} '
      f'--finetune_seeds=1-{seeds}"` ({runs:,} fine-tuning runs, about {minutes:.0f} min on '
      f"one H100 at an estimated {GPU_SECONDS_PER_RUN} s a run, {GPU_JOBS} at a time; "
      "not yet timed on a card)."
  )


def as_dict(claim: Claim) -> dict:
  """A claim for results.json."""
  return {
      **{
          k: getattr(claim, k)
          for k in (
              "source",
              "statement",
              "evidence",
              "predicted_sign",
              "baseline",
              "stage",
              "flagged",
          )
      },
      **dataclasses.asdict(claim.comparison),
      "verdict": claim.verdict,
      "budget": claim.budget(),
      "seeds_needed": seeds_needed(claim.comparison),
  }
