"""The papers' claims, checked against the demo's measurements with intervals.

Every claim compares group means: the held-out MLM loss of a family's pretraining seeds,
the dev accuracy of its fine-tuning seeds at one learning rate, ... A claim's statistic is
a signed sum of such means, d = Σ c_i · mean(x_i), whose groups are independent (other
seeds, other runs). Its standard error and degrees of freedom are Welch's
(Welch-Satterthwaite, which for two groups is the usual unequal-variance t test):

  se² = Σ c_i² s_i² / n_i,      df = se⁴ / Σ (c_i² s_i² / n_i)² / (n_i - 1)

and the interval is d ± t(1 - α/2, df) · se. The verdict reads the interval against the
sign the paper predicts for d: entirely on that side, *reproduced*; entirely on the other,
*not reproduced*; across 0, *inconclusive at this budget*. For an inconclusive claim,
`seeds_needed` gives the seeds per group at which the interval would exclude 0 with 80%
power if the measured effect and spread are the true ones. It is an estimate from a few
seeds, so it is itself noisy: the report says so.
"""

import dataclasses
import math
import statistics
from typing import Optional, Sequence, Tuple

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive at this budget"

# Beyond this many seeds a budget is not worth stating: the difference is too small
# for the variance measured.
MAX_SEEDS = 1000


@dataclasses.dataclass
class Comparison:
  """A signed sum of independent group means, with its Welch interval.

  Attributes:
    estimate: d = Σ c_i · mean_i.
    standard_error: of d (nan when a group has one value: no variance to measure).
    degrees_of_freedom: Welch-Satterthwaite's (inf when every group's spread is 0).
    low: the interval's lower end.
    high: the interval's upper end.
    seeds: the fewest values of any group (the seeds measured per group).
    confidence: of the interval, e.g. 0.95.
  """

  estimate: float
  standard_error: float
  degrees_of_freedom: float
  low: float
  high: float
  seeds: int
  confidence: float


def t_quantile(probability: float, degrees_of_freedom: float) -> float:
  """Student's t quantile; the normal one for infinite degrees of freedom."""
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
    nan = float("nan")
    return Comparison(estimate, nan, nan, nan, nan, seeds, confidence)
  parts = [(c * c * statistics.variance(values) / len(values), len(values)) for c, values in terms]
  variance = sum(v for v, _ in parts)
  if variance == 0:
    return Comparison(estimate, 0.0, math.inf, estimate, estimate, seeds, confidence)
  df = variance**2 / sum(v * v / (n - 1) for v, n in parts)
  se = math.sqrt(variance)
  half = t_quantile(0.5 + confidence / 2, df) * se
  return Comparison(estimate, se, df, estimate - half, estimate + half, seeds, confidence)


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
  """

  source: str
  statement: str
  evidence: str
  comparison: Comparison
  predicted_sign: int
  seed_seconds: float
  unit: str

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

# The families with recurrence, and where each paper claims what for them.
RECURRENT_FAMILIES = (
    "trans_blstm_small_1",
    "trans_blstm_small_2",
    "trans_blstm_1",
    "trans_blstm_2",
    "swishrnn",
)
_MLM_SOURCE = {"swishrnn": "SwishRNN Fig. 4"}
_TABLES_SOURCE = {"swishrnn": "SwishRNN Table 1"}


def mean_and_spread(values: Sequence[float], digits: int = 3) -> str:
  mean = statistics.fmean(values)
  if len(values) < 2:
    return f"{mean:.{digits}f} (1 seed)"
  return f"{mean:.{digits}f} ± {statistics.stdev(values):.{digits}f} (n={len(values)})"


def paper_claims(rows: Sequence[dict], pretrain_seconds: dict, finetune_run_seconds: float) -> list:
  """The claims the demo can check, for the recurrent models among `rows`.

  Args:
    rows: the report's rows, one per model: "preset", "model" (display name), "family",
      "eval_mlm_loss" (held-out MLM loss at the last step, one per pretraining seed),
      "by_learning_rate" ({lr: {"dev": [...], "test": [...]}}, one value per fine-tuning
      seed), "best_learning_rate" (by mean dev accuracy).
    pretrain_seconds: {preset: wall seconds of one pretraining run (mean over seeds)}.
    finetune_run_seconds: wall seconds per fine-tuning run, as the sweep ran them.

  Returns:
    [Claim], in the order: MLM loss, stability, downstream, per recurrent model.
  """
  baselines = _baselines(rows)
  stability, downstream = [], []
  for row in rows:
    if row["family"] not in RECURRENT_FAMILIES:
      continue
    base = baselines[0] if baselines else None
    if base is None:
      continue
    if len(row["by_learning_rate"]) >= 2:
      stability.append(_stability_claim(row, base, finetune_run_seconds))
    downstream.append(_downstream_claim(row, base, finetune_run_seconds))
  return mlm_claims(rows, pretrain_seconds) + stability + downstream


def _baselines(rows: Sequence[dict]) -> list:
  by_family = {row["family"]: row for row in rows}
  return [by_family[f] for f in ("bert", "bert_rab") if f in by_family]


def mlm_claims(rows: Sequence[dict], pretrain_seconds: dict) -> list:
  """The held-out MLM claims alone (rows need "preset", "model", "family" and
  "eval_mlm_loss"): each recurrent model against its paper's baseline, SwishRNN against
  BERT-rab (it shares the relative bias) and BERT-orig, TRANS-BLSTM against BERT-orig."""
  found = []
  for row in rows:
    if row["family"] not in RECURRENT_FAMILIES:
      continue
    for base in _baselines(rows):
      if base["family"] == "bert_rab" and row["family"] != "swishrnn":
        continue
      found.append(_mlm_claim(row, base, pretrain_seconds))
  return found


def _mlm_claim(row: dict, base: dict, pretrain_seconds: dict) -> Claim:
  ours, theirs = row["eval_mlm_loss"], base["eval_mlm_loss"]
  return Claim(
      source=_MLM_SOURCE.get(row["family"], "TRANS-BLSTM Fig. 3"),
      statement=f"{row['model']} reaches a lower MLM loss than {base['model']} at equal "
      "steps (held-out records, last step)",
      evidence=f"{mean_and_spread(ours)} vs {mean_and_spread(theirs)}",
      comparison=compare([(1.0, ours), (-1.0, theirs)]),
      predicted_sign=-1,
      seed_seconds=pretrain_seconds[row["preset"]] + pretrain_seconds[base["preset"]],
      unit="pretraining seeds per model",
  )


def _lr_range(row: dict) -> Tuple[float, float]:
  """(best, worst) learning rate by mean dev accuracy (the worst of the others)."""
  means = {lr: statistics.fmean(v["dev"]) for lr, v in row["by_learning_rate"].items()}
  best = row["best_learning_rate"]
  return best, min((lr for lr in means if lr != best), key=means.get)


def _stability_claim(row: dict, base: dict, run_seconds: float) -> Claim:
  terms, spans = [], []
  for sign, model in ((1.0, row), (-1.0, base)):
    best, worst = _lr_range(model)
    dev = model["by_learning_rate"]
    terms += [(sign, dev[best]["dev"]), (-sign, dev[worst]["dev"])]
    spans.append(
        f"{model['model']} {statistics.fmean(dev[best]['dev']):.3f} at {best:g} → "
        f"{statistics.fmean(dev[worst]['dev']):.3f} at {worst:g}"
    )
  runs = len(row["by_learning_rate"]) + len(base["by_learning_rate"])
  return Claim(
      source="SwishRNN Fig. 3",
      statement=f"{row['model']}'s fine-tuning accuracy varies less across learning rates "
      f"than {base['model']}'s (best minus worst learning rate, mean dev accuracy)",
      evidence="; ".join(spans),
      comparison=compare(terms),
      predicted_sign=-1,
      seed_seconds=runs * run_seconds,
      unit="fine-tuning seeds per learning rate",
  )


def _downstream_claim(row: dict, base: dict, run_seconds: float) -> Claim:
  ours = row["by_learning_rate"][row["best_learning_rate"]]["test"]
  theirs = base["by_learning_rate"][base["best_learning_rate"]]["test"]
  return Claim(
      source=_TABLES_SOURCE.get(row["family"], "TRANS-BLSTM Tables 2-4"),
      statement=f"{row['model']} fine-tunes to a higher test accuracy than {base['model']} "
      "(each at its best learning rate by dev accuracy)",
      evidence=f"{mean_and_spread(ours)} at {row['best_learning_rate']:g} vs "
      f"{mean_and_spread(theirs)} at {base['best_learning_rate']:g}",
      comparison=compare([(1.0, ours), (-1.0, theirs)]),
      predicted_sign=1,
      seed_seconds=2 * run_seconds,
      unit="fine-tuning seeds per model",
  )


def claims_table(items: Sequence[Claim]) -> str:
  """The report's claims table (markdown)."""
  lines = [
      "| paper | claim, for these models | measured (mean ± std over seeds) | difference "
      "[95% interval] | verdict | what would settle it |",
      "|---|---|---|---|---|---|",
  ]
  for claim in items:
    c = claim.comparison
    interval = "no interval (1 seed)" if math.isnan(c.low) else f"[{c.low:+.3f}, {c.high:+.3f}]"
    lines.append(
        f"| {claim.source} | {claim.statement} | {claim.evidence} | {c.estimate:+.3f} "
        f"{interval} | **{claim.verdict}** | {claim.budget() or '—'} |"
    )
  return "\n".join(lines)


def as_dict(claim: Claim) -> dict:
  """A claim for results.json."""
  return {
      **{k: getattr(claim, k) for k in ("source", "statement", "evidence", "predicted_sign")},
      **dataclasses.asdict(claim.comparison),
      "verdict": claim.verdict,
      "budget": claim.budget(),
      "seeds_needed": seeds_needed(claim.comparison),
  }
