"""The papers' claims, checked against the demo's measurements with intervals.

Every claim compares group means: the held-out MLM loss of a family's pretraining seeds,
the dev accuracy of its fine-tuning seeds at one learning rate, ... A claim's statistic is
a signed sum of such means, d = Σ c_i · mean(x_i). Two designs give its interval:

- *Paired* (`compare_paired`), when every group was measured at the same seeds and a seed
  fixes what the models share: in the demo a pretraining seed gives every model the same
  record order and masks, so seed k's difference d_k = Σ c_i · x_i[k] is the unit, and
  the interval is the one-sample t interval of the d_k (n - 1 degrees of freedom). What
  the seeds share cancels in d_k; only what differs between the models' runs (their
  initial weights, dropout) is left in its spread.
- *Welch* (`compare`), for independent groups (other seeds, other runs):

    se² = Σ c_i² s_i² / n_i,      df = se⁴ / Σ (c_i² s_i² / n_i)² / (n_i - 1)

  (Welch-Satterthwaite; for two groups the usual unequal-variance t test).

Either way the interval is d ± t(1 - α/2, df) · se, and the verdict reads it against the
sign the paper predicts for d: entirely on that side, *reproduced*; entirely on the other,
*not reproduced*; across 0, *inconclusive at this budget*. For an inconclusive claim,
`seeds_needed` gives the seeds per group at which the interval would exclude 0 with 80%
power if the measured effect and spread are the true ones. It is an estimate from a few
seeds, so it is itself noisy: the report says so.
"""

import dataclasses
import functools
import math
import statistics
from typing import Mapping, Optional, Sequence, Tuple

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive at this budget"

# Beyond this many seeds a budget is not worth stating: the difference is too small
# for the variance measured.
MAX_SEEDS = 1000

PAIRED = "paired"
WELCH = "Welch"


@dataclasses.dataclass
class Comparison:
  """A signed sum of group means, with its interval.

  Attributes:
    estimate: d = Σ c_i · mean_i.
    standard_error: of d (nan when a group has one value: no variance to measure).
    degrees_of_freedom: Welch-Satterthwaite's, or n - 1 paired (inf when the spread is 0).
    low: the interval's lower end.
    high: the interval's upper end.
    seeds: the fewest values of any group (the seeds measured per group).
    confidence: of the interval, e.g. 0.95.
    design: PAIRED (per-seed differences) or WELCH (independent groups).
  """

  estimate: float
  standard_error: float
  degrees_of_freedom: float
  low: float
  high: float
  seeds: int
  confidence: float
  design: str = WELCH


@functools.lru_cache(maxsize=4096)
def t_quantile(probability: float, degrees_of_freedom: float) -> float:
  """Student's t quantile; the normal one for infinite degrees of freedom (cached: the
  seed simulations ask the same few quantiles thousands of times)."""
  if math.isinf(degrees_of_freedom):
    return statistics.NormalDist().inv_cdf(probability)
  # SciPy here only: the demo's driver imports this module's names without it.
  from scipy import stats

  return float(stats.t.ppf(probability, degrees_of_freedom))


def compare(terms: Sequence[Tuple[float, Sequence[float]]], confidence: float = 0.95) -> Comparison:
  """Welch's interval for Σ c_i · mean(values_i) over independent groups.

  Args:
    terms: (c_i, values_i) pairs; each values_i holds one number per seed (n_i >= 1).
    confidence: the interval's coverage, e.g. 0.95.

  Returns:
    The comparison; its interval is [nan, nan] when a group has a single value.
  """
  if not terms or any(len(values) == 0 for _, values in terms):
    raise ValueError("every group needs at least one value")
  estimate = sum(c * statistics.fmean(values) for c, values in terms)
  seeds = min(len(values) for _, values in terms)
  if seeds < 2:
    return _with_interval(estimate, float("nan"), float("nan"), seeds, confidence, WELCH)
  parts = [(c * c * statistics.variance(values) / len(values), len(values)) for c, values in terms]
  variance = sum(v for v, _ in parts)
  df = variance**2 / sum(v * v / (n - 1) for v, n in parts) if variance else math.inf
  return _with_interval(estimate, math.sqrt(variance), df, seeds, confidence, WELCH)


def _with_interval(
    estimate: float, se: float, df: float, seeds: int, confidence: float, design: str
) -> Comparison:
  """d ± t(1 - α/2, df) · se; [nan, nan] for an unknown se, [d, d] for se = 0."""
  if math.isnan(se):
    nan = float("nan")
    return Comparison(estimate, nan, nan, nan, nan, seeds, confidence, design)
  if se == 0:
    return Comparison(estimate, 0.0, math.inf, estimate, estimate, seeds, confidence, design)
  half = t_quantile(0.5 + confidence / 2, df) * se
  return Comparison(estimate, se, df, estimate - half, estimate + half, seeds, confidence, design)


def compare_paired(
    terms: Sequence[Tuple[float, Mapping[int, float]]], confidence: float = 0.95
) -> Comparison:
  """The paired t interval of Σ c_i · x_i[k] over the seeds k every group has.

  Args:
    terms: (c_i, {seed: value}) pairs.
    confidence: the interval's coverage, e.g. 0.95.

  Returns:
    The comparison of the per-seed differences (design PAIRED); [nan, nan] below 2 seeds.

  Raises:
    ValueError: the groups share no seed.
  """
  seeds = sorted(set.intersection(*(set(values) for _, values in terms))) if terms else []
  if not seeds:
    raise ValueError("paired groups need at least one seed in common")
  differences = [sum(c * values[k] for c, values in terms) for k in seeds]
  estimate, n = statistics.fmean(differences), len(differences)
  se = statistics.stdev(differences) / math.sqrt(n) if n >= 2 else float("nan")
  return _with_interval(estimate, se, n - 1, n, confidence, PAIRED)


def compare_seeds(
    terms: Sequence[Tuple[float, Optional[Sequence[int]], Sequence[float]]],
    confidence: float = 0.95,
) -> Comparison:
  """Paired when every group was measured at the same seeds (two or more), else Welch.

  Args:
    terms: (c_i, seeds_i, values_i), values_i[j] measured at seeds_i[j]; seeds_i None
      when not recorded (the groups are then taken as independent).
    confidence: the interval's coverage.
  """
  seed_sets = [None if seeds is None else tuple(sorted(seeds)) for _, seeds, _ in terms]
  if None not in seed_sets and len(set(seed_sets)) == 1 and len(seed_sets[0]) >= 2:
    return compare_paired([(c, dict(zip(seeds, values))) for c, seeds, values in terms], confidence)
  return compare([(c, values) for c, _, values in terms], confidence)


def verdict(comparison: Comparison, predicted_sign: int) -> str:
  """REPRODUCED, NOT_REPRODUCED or INCONCLUSIVE for a claim that d has `predicted_sign`."""
  if math.isnan(comparison.low):
    return INCONCLUSIVE
  low, high = sorted((predicted_sign * comparison.low, predicted_sign * comparison.high))
  if low > 0:
    return REPRODUCED
  if high < 0:
    return NOT_REPRODUCED
  return INCONCLUSIVE


def seeds_needed(comparison: Comparison, power: float = 0.8) -> Optional[int]:
  """Seeds per group for the interval to exclude 0 with `power`, at the measured effect.

  The smallest n with (t(1 - α/2, df_n) + t(power, df_n)) · se_n <= |d|, where se_n =
  se · √(n₀/n) and df_n = df · (n - 1)/(n₀ - 1) scale from the n₀ seeds measured (the
  t-based power of Welch's test; the normal one, t → z, promises too much at a few seeds).

  Returns:
    n; None when it cannot be estimated (one seed per group, or d = 0 exactly);
    MAX_SEEDS + 1 when more than MAX_SEEDS would be needed.
  """
  se, d, n0 = comparison.standard_error, abs(comparison.estimate), comparison.seeds
  if math.isnan(se) or d == 0:
    return None
  for n in range(n0, MAX_SEEDS + 1):
    df = comparison.degrees_of_freedom * (n - 1) / (n0 - 1)
    margin = t_quantile(0.5 + comparison.confidence / 2, df) + t_quantile(power, df)
    if margin * se * math.sqrt(n0 / n) <= d:
      return n
  return MAX_SEEDS + 1


@dataclasses.dataclass
class Claim:
  """One claim of a paper with the demo's evidence.

  Attributes:
    source: where the paper makes it, e.g. "SwishRNN Fig. 4".
    statement: what it says, for these models, e.g. "SwishRNN-BERT reaches a lower
      held-out MLM loss than BERT-orig after 600 steps".
    evidence: the measured numbers behind it, in words.
    comparison: d and its interval.
    predicted_sign: the sign of d the claim predicts (-1: lower, +1: higher).
    seed_seconds: what one more seed of every group costs here, in seconds (for the
      budget of an inconclusive claim).
    unit: what a seed is in this claim, e.g. "pretraining seeds per model".
    baseline: the preset the claim compares against (its paper's baseline, when the run
      has it).
    stage: PRETRAINING (an MLM claim) or FINE_TUNING.
    flagged: the pretraining runs behind the claim that `plateau` flags, in words
      ("BERT-orig seeds 1, 2 still falling"); empty when none is.
  """

  source: str
  statement: str
  evidence: str
  comparison: Comparison
  predicted_sign: int
  seed_seconds: float
  unit: str
  baseline: str = ""
  stage: str = "pretraining"
  flagged: str = ""

  @property
  def verdict(self) -> str:
    return verdict(self.comparison, self.predicted_sign)

  def budget(self) -> str:
    """What would settle an inconclusive claim; empty for the others."""
    if self.verdict != INCONCLUSIVE:
      return ""
    if self.comparison.seeds < 2:
      return f"at least 2 {self.unit} to measure the variance at all"
    needed = seeds_needed(self.comparison)
    if needed is None:
      return "no budget: the measured difference is exactly 0"
    if needed > MAX_SEEDS:
      return (
          f"more than {MAX_SEEDS} {self.unit}: the difference is too small for the "
          "variance measured, indistinguishable from none at any practical budget"
      )
    hours = needed * self.seed_seconds / 3600
    return (
        f"about {needed} {self.unit} (now {self.comparison.seeds}), ≈ "
        + (f"{hours:.1f} h" if hours >= 1 else f"{hours * 60:.0f} min")
        + " of these runs on this machine"
    )


# -- the papers' claims, built from the report's rows ---------------------------------

PRETRAINING = "pretraining"
FINE_TUNING = "fine-tuning"

# The families with recurrence, and where each paper claims what for them.
RECURRENT_FAMILIES = (
    "trans_blstm_small_1",
    "trans_blstm_small_2",
    "trans_blstm_1",
    "trans_blstm_2",
    "swishrnn",
)
_MLM_SOURCE = {"swishrnn": "SwishRNN Fig. 4"}
STABILITY_SOURCE = "SwishRNN Fig. 3"
_TABLES_SOURCE = {"swishrnn": "SwishRNN Table 1"}
# Each paper's baseline: SwishRNN-BERT is compared with BERT-rab (the same T5 relative
# attention bias, an FFN where SwishRNN has its recurrence), TRANS-BLSTM with BERT-orig.
PAPER_BASELINE = {"swishrnn": "bert_rab"}
BASELINE_FAMILIES = ("bert", "bert_rab")


def paper_baseline(family: str) -> str:
  """The baseline family a recurrent family's paper compares it with."""
  return PAPER_BASELINE.get(family, "bert")


def mean_and_spread(values: Sequence[float], digits: int = 3) -> str:
  mean = statistics.fmean(values)
  if len(values) < 2:
    return f"{mean:.{digits}f} (1 seed)"
  return f"{mean:.{digits}f} ± {statistics.stdev(values):.{digits}f} (n={len(values)})"


def paper_claims(rows: Sequence[dict], pretrain_seconds: dict, finetune_run_seconds: float) -> list:
  """The claims the demo can check, for the recurrent models among `rows`.

  Args:
    rows: the report's rows, one per model: "preset", "model" (display name), "family",
      "pretrain_seeds", "eval_mlm_loss" (held-out MLM loss at the last step, one per
      pretraining seed), "by_learning_rate" ({lr: {"dev": [...], "test": [...],
      "seeds": [...]}}, one value per fine-tuning seed; "seeds" may be absent, then the
      groups are taken as independent), "best_learning_rate" (by mean dev accuracy).
    pretrain_seconds: {preset: wall seconds of one pretraining run (mean over seeds)}.
    finetune_run_seconds: wall seconds per fine-tuning run, as the sweep ran them.

  Returns:
    [Claim]: the MLM claims, then the stability and downstream ones, per recurrent model.
  """
  stability, downstream = [], []
  for row, base in claim_pairs(rows):
    if len(row["by_learning_rate"]) >= 2 and len(base["by_learning_rate"]) >= 2:
      stability.append(_stability_claim(row, base, finetune_run_seconds))
    downstream.append(_downstream_claim(row, base, finetune_run_seconds))
  return mlm_claims(rows, pretrain_seconds) + stability + downstream


def claim_pairs(rows: Sequence[dict]) -> list:
  """(recurrent row, its baseline row): the paper's baseline, else the other one."""
  by_family = {row["family"]: row for row in rows}
  pairs = []
  for row in rows:
    if row["family"] not in RECURRENT_FAMILIES:
      continue
    own = paper_baseline(row["family"])
    candidates = [own] + [f for f in BASELINE_FAMILIES if f != own]
    base = next((by_family[f] for f in candidates if f in by_family), None)
    if base is not None:
      pairs.append((row, base))
  return pairs


def _against(row: dict, base: dict) -> str:
  """The baseline's name in a statement, flagged when it is not the paper's."""
  wanted = paper_baseline(row["family"])
  if base["family"] == wanted:
    return f"{base['model']} (its paper's baseline)"
  return f"{base['model']} (not its paper's baseline: add {wanted} to --models)"


def flagged_runs(models: Sequence[dict], first_seed_only: bool = False) -> str:
  """The flagged pretraining runs of `models` in words, e.g. "BERT-orig seeds 1, 2 still
  falling; SwishRNN-BERT seed 3 on the unigram plateau" (rows' "plateau_flags", one label
  per pretraining seed, "" for a settled run; rows without them flag nothing).

  Args:
    models: the rows a claim compares.
    first_seed_only: only the first pretraining seed's run (the encoder fine-tuning starts
      from).
  """
  parts = []
  for row in models:
    by_label = {}
    runs = list(zip(row["pretrain_seeds"], row.get("plateau_flags") or []))
    for seed, label in runs[:1] if first_seed_only else runs:
      if label:
        by_label.setdefault(label, []).append(str(seed))
    for label, seeds in by_label.items():
      parts.append(f"{row['model']} seed{'s' * (len(seeds) > 1)} {', '.join(seeds)} {label}")
  return "; ".join(parts)


def mlm_claims(rows: Sequence[dict], pretrain_seconds: dict) -> list:
  """The held-out MLM claims alone (rows need "preset", "model", "family",
  "pretrain_seeds" and "eval_mlm_loss"), each recurrent model against its paper's
  baseline, paired by pretraining seed."""
  return [_mlm_claim(row, base, pretrain_seconds) for row, base in claim_pairs(rows)]


def _mlm_claim(row: dict, base: dict, pretrain_seconds: dict) -> Claim:
  ours, theirs = row["eval_mlm_loss"], base["eval_mlm_loss"]
  comparison = compare_seeds(
      [(1.0, row["pretrain_seeds"], ours), (-1.0, base["pretrain_seeds"], theirs)]
  )
  return Claim(
      source=_MLM_SOURCE.get(row["family"], "TRANS-BLSTM Fig. 3"),
      statement=f"{row['model']} reaches a lower MLM loss than {_against(row, base)} at "
      "equal steps (held-out records, last step)",
      evidence=f"{mean_and_spread(ours)} vs {mean_and_spread(theirs)}",
      comparison=comparison,
      predicted_sign=-1,
      seed_seconds=pretrain_seconds[row["preset"]] + pretrain_seconds[base["preset"]],
      unit="pretraining seeds per model",
      baseline=base["preset"],
      stage=PRETRAINING,
      flagged=flagged_runs((row, base)),
  )


def _runs(
    row: dict, learning_rate: float, split: str
) -> Tuple[Optional[Sequence[int]], Sequence[float]]:
  """(seeds, values) of a model's fine-tuning runs at a learning rate (seeds None when
  the row does not record them)."""
  entry = row["by_learning_rate"][learning_rate]
  return entry.get("seeds"), entry[split]


def _lr_range(row: dict) -> Tuple[float, float]:
  """(best, worst) learning rate by mean dev accuracy (the worst of the others)."""
  means = {lr: statistics.fmean(v["dev"]) for lr, v in row["by_learning_rate"].items()}
  best = row["best_learning_rate"]
  return best, min((lr for lr in means if lr != best), key=means.get)


def _stability_claim(row: dict, base: dict, run_seconds: float) -> Claim:
  terms, spans = [], []
  for sign, model in ((1.0, row), (-1.0, base)):
    best, worst = _lr_range(model)
    terms += [(sign, *_runs(model, best, "dev")), (-sign, *_runs(model, worst, "dev"))]
    dev = model["by_learning_rate"]
    spans.append(
        f"{model['model']} {statistics.fmean(dev[best]['dev']):.3f} at {best:g} → "
        f"{statistics.fmean(dev[worst]['dev']):.3f} at {worst:g}"
    )
  runs = len(row["by_learning_rate"]) + len(base["by_learning_rate"])
  return Claim(
      source=STABILITY_SOURCE,
      statement=f"{row['model']}'s fine-tuning accuracy varies less across learning rates "
      f"than that of {_against(row, base)} (best minus worst learning rate, mean dev "
      "accuracy)",
      evidence="; ".join(spans),
      comparison=compare_seeds(terms),
      predicted_sign=-1,
      seed_seconds=runs * run_seconds,
      unit="fine-tuning seeds per learning rate",
      baseline=base["preset"],
      stage=FINE_TUNING,
      flagged=flagged_runs((row, base), first_seed_only=True),
  )


def _downstream_claim(row: dict, base: dict, run_seconds: float) -> Claim:
  ours = _runs(row, row["best_learning_rate"], "test")
  theirs = _runs(base, base["best_learning_rate"], "test")
  return Claim(
      source=_TABLES_SOURCE.get(row["family"], "TRANS-BLSTM Tables 2-4"),
      statement=f"{row['model']} fine-tunes to a higher test accuracy than "
      f"{_against(row, base)} (each at its best learning rate by dev accuracy)",
      evidence=f"{mean_and_spread(ours[1])} at {row['best_learning_rate']:g} vs "
      f"{mean_and_spread(theirs[1])} at {base['best_learning_rate']:g}",
      comparison=compare_seeds([(1.0, *ours), (-1.0, *theirs)]),
      predicted_sign=1,
      seed_seconds=2 * run_seconds,
      unit="fine-tuning seeds per model",
      baseline=base["preset"],
      stage=FINE_TUNING,
      flagged=flagged_runs((row, base), first_seed_only=True),
  )
