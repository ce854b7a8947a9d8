"""The claims' statistics against SciPy's Welch and paired t tests, t tables and simulation."""

import json
import math
import os

import numpy as np
import pytest
from scipy import stats

from recurrent_bert.demo import claims
from recurrent_bert.demo import settings


@pytest.mark.parametrize(
    "df, quantile", [(1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (math.inf, 1.960)]
)
def test_t_quantile_matches_the_table(df, quantile):
  assert claims.t_quantile(0.975, df) == pytest.approx(quantile, abs=1e-3)


def test_two_groups_give_welchs_t_test_interval():
  rng = np.random.default_rng(0)
  for n_a, n_b in [(2, 2), (3, 5), (8, 4)]:
    a, b = rng.normal(1.0, 0.3, n_a), rng.normal(0.7, 0.9, n_b)
    got = claims.compare([(1.0, list(a)), (-1.0, list(b))])
    reference = stats.ttest_ind(a, b, equal_var=False)
    low, high = reference.confidence_interval(0.95)
    assert got.estimate == pytest.approx(a.mean() - b.mean())
    assert got.degrees_of_freedom == pytest.approx(reference.df)
    assert (got.low, got.high) == pytest.approx((low, high))


def test_paired_groups_give_the_paired_t_test_interval():
  rng = np.random.default_rng(3)
  for n in (2, 3, 6):
    shared = rng.normal(0, 0.5, n)  # what seed k gives both runs
    a, b = shared + rng.normal(5.8, 0.05, n), shared + rng.normal(6.0, 0.02, n)
    got = claims.compare_paired([(1.0, dict(enumerate(a))), (-1.0, dict(enumerate(b)))])
    reference = stats.ttest_rel(a, b)
    assert got.design == claims.PAIRED and got.degrees_of_freedom == n - 1 == reference.df
    assert (got.low, got.high) == pytest.approx(tuple(reference.confidence_interval(0.95)))
  # Only the seeds both groups have are paired.
  got = claims.compare_paired([(1.0, {1: 2.0, 2: 3.0, 7: 9.0}), (-1.0, {1: 1.0, 2: 1.5})])
  assert got.seeds == 2 and got.estimate == pytest.approx(1.25)
  with pytest.raises(ValueError):
    claims.compare_paired([(1.0, {1: 2.0}), (-1.0, {2: 1.0})])


def test_compare_seeds_pairs_only_groups_measured_at_the_same_seeds():
  same = claims.compare_seeds(
      [(1.0, [1, 2, 3], [1.0, 1.2, 1.1]), (-1.0, [3, 1, 2], [0.9, 0.8, 1.0])]
  )
  assert same.design == claims.PAIRED
  assert same.estimate == pytest.approx(np.mean([1.0 - 0.8, 1.2 - 1.0, 1.1 - 0.9]))
  other = claims.compare_seeds([(1.0, [1, 2], [1.0, 1.2]), (-1.0, [1, 3], [0.9, 0.8])])
  assert other.design == claims.WELCH


def test_paired_interval_covers_the_truth_95_percent_of_the_time():
  # A seed's record order moves both models' losses (shared), each run also has its own
  # noise: the design the demo's pretraining seeds have.
  rng = np.random.default_rng(4)
  truth, trials, covered = -0.2, 4000, 0
  for _ in range(trials):
    shared = rng.normal(0.0, 0.3, 3)
    ours, theirs = shared + rng.normal(5.8, 0.05, 3), shared + rng.normal(6.0, 0.08, 3)
    result = claims.compare_paired([(1, dict(enumerate(ours))), (-1, dict(enumerate(theirs)))])
    covered += result.low <= truth <= result.high
  assert 0.93 <= covered / trials <= 0.97


def test_four_group_interval_covers_the_truth_95_percent_of_the_time():
  # (a_best - a_worst) - (b_best - b_worst): the stability claim's statistic.
  rng = np.random.default_rng(1)
  means, sds, coefficients = [0.8, 0.6, 0.7, 0.3], [0.02, 0.05, 0.03, 0.08], [1, -1, -1, 1]
  truth = sum(c * m for c, m in zip(coefficients, means))
  trials, covered = 4000, 0
  for _ in range(trials):
    terms = [(c, list(rng.normal(m, s, 4))) for c, m, s in zip(coefficients, means, sds)]
    result = claims.compare(terms)
    covered += result.low <= truth <= result.high
  assert 0.93 <= covered / trials <= 0.97


def test_seeds_needed_gives_the_power_asked_for():
  rng = np.random.default_rng(2)
  pilot = claims.compare([(1, [5.00, 5.03]), (-1, [5.02, 4.99])])
  assert claims.verdict(pilot, -1) == claims.INCONCLUSIVE
  # If the truth is an effect of 0.02 with a spread of 0.02 per seed, measured on 2 seeds:
  effect, sd = 0.02, 0.02
  measured = claims.Comparison(effect, sd, 2.0, 0, 0, 2, 0.95)
  n = claims.seeds_needed(measured, power=0.8)
  assert 5 <= n <= 40

  def power(seeds):
    hits = 0
    for _ in range(1500):
      x, y = rng.normal(effect, sd, seeds), rng.normal(0.0, sd, seeds)
      result = claims.compare([(1, list(x)), (-1, list(y))])
      hits += claims.verdict(result, +1) == claims.REPRODUCED
    return hits / 1500

  assert 0.74 <= power(n) <= 0.9
  assert power(max(2, n // 2)) < 0.7


def test_verdicts_read_the_interval_against_the_predicted_sign():
  lower = claims.compare([(1, [1.0, 1.1, 1.05]), (-1, [2.0, 2.1, 2.05])])  # d ≈ -1
  assert claims.verdict(lower, -1) == claims.REPRODUCED
  assert claims.verdict(lower, +1) == claims.NOT_REPRODUCED
  straddles = claims.compare([(1, [1.0, 2.0]), (-1, [1.4, 1.5])])
  assert claims.verdict(straddles, -1) == claims.INCONCLUSIVE


def test_one_seed_and_zero_spread():
  one = claims.compare([(1, [1.0]), (-1, [2.0, 2.2])])
  assert math.isnan(one.low) and claims.verdict(one, -1) == claims.INCONCLUSIVE
  claim = claims.Claim("src", "s", "e", one, -1, 60.0, "seeds per model")
  assert "at least 2 seeds per model" in claim.budget()
  exact = claims.compare([(1, [1.0, 1.0]), (-1, [2.0, 2.0])])
  assert (exact.low, exact.high) == (-1.0, -1.0) and claims.verdict(exact, -1) == claims.REPRODUCED
  with pytest.raises(ValueError):
    claims.compare([(1, [])])


def test_budget_of_an_inconclusive_claim_counts_seeds_and_time():
  comparison = claims.compare([(1, [5.00, 5.03]), (-1, [5.02, 4.99])])
  needed = claims.seeds_needed(comparison)
  claim = claims.Claim("src", "s", "e", comparison, -1, 120.0, "pretraining seeds per model")
  assert f"about {needed} pretraining seeds per model (now 2)" in claim.budget()
  tiny = claims.compare([(1, [5.0, 5.2]), (-1, [5.0, 5.2000001])])
  assert "more than 1000" in claims.Claim("s", "s", "e", tiny, -1, 1.0, "seeds").budget()


def _row(family, eval_losses, dev_by_lr, test_by_lr, seeds=None):
  by_lr = {lr: {"dev": dev, "test": test_by_lr[lr]} for lr, dev in dev_by_lr.items()}
  if seeds:
    for entry in by_lr.values():
      entry["seeds"] = list(seeds[: len(entry["dev"])])
  best = max(by_lr, key=lambda lr: np.mean(by_lr[lr]["dev"]))
  return {
      "preset": f"{family}_tiny",
      "model": family.upper(),
      "family": family,
      "pretrain_seeds": list(range(1, len(eval_losses) + 1)),
      "eval_mlm_loss": eval_losses,
      "by_learning_rate": by_lr,
      "best_learning_rate": best,
  }


BERT = _row(
    "bert",
    [6.0, 6.1],
    {1e-4: [0.5, 0.6], 1e-3: [0.8, 0.7], 1e-2: [0.3, 0.25]},
    {1e-4: [0.5, 0.5], 1e-3: [0.75, 0.7], 1e-2: [0.3, 0.3]},
)
RAB = _row(
    "bert_rab",
    [5.9, 6.05],
    {1e-4: [0.6, 0.6], 1e-3: [0.7, 0.72]},
    {1e-4: [0.6, 0.62], 1e-3: [0.7, 0.71]},
)
SWISH = _row(
    "swishrnn",
    [5.2, 5.3],
    {1e-4: [0.7, 0.72], 1e-3: [0.8, 0.82], 1e-2: [0.75, 0.7]},
    {1e-4: [0.7, 0.7], 1e-3: [0.8, 0.85], 1e-2: [0.7, 0.7]},
)
SECONDS = {"bert_tiny": 100.0, "bert_rab_tiny": 110.0, "swishrnn_tiny": 120.0}


def test_swishrnn_is_judged_against_bert_rab_paired_by_seed():
  got = claims.paper_claims([BERT, RAB, SWISH], SECONDS, 20.0)
  assert [c.source for c in got] == ["SwishRNN Fig. 4", "SwishRNN Fig. 3", "SwishRNN Table 1"]
  assert {c.baseline for c in got} == {"bert_rab_tiny"}
  assert [c.stage for c in got] == [claims.PRETRAINING, claims.FINE_TUNING, claims.FINE_TUNING]
  mlm, stability, downstream = got
  assert "BERT_RAB (its paper's baseline)" in mlm.statement and mlm.seed_seconds == 230.0
  # Seeds 1 and 2 of both: the paired interval, SciPy's ttest_rel.
  paired = stats.ttest_rel([5.2, 5.3], [5.9, 6.05]).confidence_interval()
  assert mlm.comparison.design == claims.PAIRED
  assert (mlm.comparison.low, mlm.comparison.high) == pytest.approx(tuple(paired))
  # Stability: (0.81 - 0.71) - (0.71 - 0.6), lower is stabler; no fine-tuning seeds
  # recorded, so the four groups are independent (Welch).
  assert stability.comparison.estimate == pytest.approx((0.81 - 0.71) - (0.71 - 0.6))
  assert stability.predicted_sign == -1 and stability.seed_seconds == 5 * 20.0
  assert stability.comparison.design == claims.WELCH
  # Downstream: test accuracy at each model's best dev learning rate (1e-3 for both).
  assert downstream.comparison.estimate == pytest.approx(0.825 - 0.705)
  assert downstream.predicted_sign == 1


def test_without_its_paper_baseline_a_model_is_judged_against_the_other_one():
  got = claims.paper_claims([BERT, SWISH], SECONDS, 20.0)
  assert {c.baseline for c in got} == {"bert_tiny"}
  assert all("not its paper's baseline: add bert_rab" in c.statement for c in got)
  trans = dict(BERT, preset="trans_blstm_small_2_tiny", family="trans_blstm_small_2")
  assert [
      c.baseline for c in claims.mlm_claims([RAB, trans], SECONDS | {trans["preset"]: 1.0})
  ] == ["bert_rab_tiny"]
  # No recurrent model, no claim; one learning rate, no stability claim.
  assert claims.paper_claims([BERT, RAB], SECONDS, 20.0) == []
  one_lr = dict(
      SWISH, by_learning_rate={1e-3: SWISH["by_learning_rate"][1e-3]}, best_learning_rate=1e-3
  )
  assert [c.source for c in claims.paper_claims([RAB, one_lr], SECONDS, 20.0)] == [
      "SwishRNN Fig. 4",
      "SwishRNN Table 1",
  ]


def test_fine_tuning_runs_pair_by_their_recorded_seeds():
  seeds = [1, 2, 3]
  rab = _row("bert_rab", [6.0], {1e-3: [0.70, 0.74, 0.71]}, {1e-3: [0.70, 0.75, 0.72]}, seeds)
  swish = _row("swishrnn", [5.9], {1e-3: [0.72, 0.77, 0.73]}, {1e-3: [0.71, 0.77, 0.75]}, seeds)
  (downstream,) = [
      c for c in claims.paper_claims([rab, swish], SECONDS, 20.0) if c.stage == claims.FINE_TUNING
  ]
  reference = stats.ttest_rel([0.71, 0.77, 0.75], [0.70, 0.75, 0.72]).confidence_interval()
  assert downstream.comparison.design == claims.PAIRED
  assert (downstream.comparison.low, downstream.comparison.high) == pytest.approx(tuple(reference))


# The held-out MLM losses of `make demo`'s models at its default settings, per model and
# pretraining seed, 4 seeds (README, "Why these defaults"; 2 idle cores, built-in corpus).
MEASURED_FILE = os.path.join(os.path.dirname(__file__), "measured_mlm_losses.json")


def _measured(ours, base):
  """The measured per-seed losses of two presets, as compare_seeds terms."""
  with open(MEASURED_FILE, encoding="utf-8") as f:
    measured = json.load(f)["eval_mlm_loss"]
  seeds = sorted(set(measured[ours]) & set(measured[base]), key=int)
  return [
      (1.0, seeds, [measured[ours][k] for k in seeds]),
      (-1.0, seeds, [measured[base][k] for k in seeds]),
  ]


def _decided_fraction(differences, num_seeds, predicted_sign, trials=2000):
  """The fraction of demo runs of `num_seeds` paired seeds that end in a verdict, if the
  truth is the measured one: per-seed differences drawn with the measured mean and spread,
  judged by the demo's own paired interval and verdict."""
  rng = np.random.default_rng(5)
  seeds = list(range(1, num_seeds + 1))
  decided = 0
  for _ in range(trials):
    drawn = rng.normal(np.mean(differences), np.std(differences, ddof=1), num_seeds)
    result = claims.compare_seeds([(1.0, seeds, list(drawn)), (-1.0, seeds, [0.0] * num_seeds)])
    assert result.design == claims.PAIRED
    decided += claims.verdict(result, predicted_sign) != claims.INCONCLUSIVE
  return decided / trials


def _simulated_verdicts(terms, num_seeds):
  """`_decided_fraction` of an MLM claim's measured terms (lower loss predicted)."""
  (_, _, ours), (_, _, base) = terms
  return _decided_fraction(np.subtract(ours, base), num_seeds, predicted_sign=-1)


@pytest.mark.parametrize(
    "ours, base",
    [("trans_blstm_small_2_tiny", "bert_tiny"), ("swishrnn_tiny", "bert_rab_tiny")],
)
def test_the_default_seeds_settle_each_mlm_claim_at_the_measured_difference(ours, base):
  terms = _measured(ours, base)
  assert _simulated_verdicts(terms, len(settings.DEFAULT_PRETRAIN_SEEDS)) >= 0.8


# The dev and test accuracy of `make demo`'s fine-tuning runs, per preset, learning rate and
# fine-tuning seed, measured with 8 seeds at each fine-tuning length tried (docs/demo.md,
# "Why these defaults"; 2 idle cores, built-in corpus, each model's seed-1 encoder).
MEASURED_FINETUNE_FILE = os.path.join(os.path.dirname(__file__), "measured_finetune_accuracy.json")


def _finetune_runs(steps):
  with open(MEASURED_FINETUNE_FILE, encoding="utf-8") as f:
    return json.load(f)["runs"][str(steps)]


def _by_dev(runs):
  """A preset's learning rates, best mean dev accuracy first."""
  return sorted(runs, key=lambda lr: -np.mean([r["dev"] for r in runs[lr].values()]))


def finetune_differences(steps, ours, base):
  """Per fine-tuning seed: (downstream, stability) differences, ours minus the baseline's.

  Downstream: test accuracy, each model at its best learning rate by mean dev accuracy.
  Stability: (best - worst learning rate's dev accuracy), ours minus the baseline's.
  """
  measured = _finetune_runs(steps)
  downstream, stability = [], []
  seeds = sorted(set(measured[ours][_by_dev(measured[ours])[0]]), key=int)
  for k in seeds:
    best_o, *_, worst_o = (measured[ours][lr][k] for lr in _by_dev(measured[ours]))
    best_b, *_, worst_b = (measured[base][lr][k] for lr in _by_dev(measured[base]))
    downstream.append(best_o["test"] - best_b["test"])
    stability.append((best_o["dev"] - worst_o["dev"]) - (best_b["dev"] - worst_b["dev"]))
  return downstream, stability


PAIRS = [("trans_blstm_small_2_tiny", "bert_tiny"), ("swishrnn_tiny", "bert_rab_tiny")]
# docs/demo.md: the fine-tuning seeds (300 steps, both learning rates) at which every one of
# the four fine-tuning claims is decided in at least 80% of simulated runs.
SEEDS_TO_SETTLE_ALL = 15


def test_the_default_finetune_seeds_settle_trans_blstms_accuracy_claim():
  downstream, _ = finetune_differences(settings.DEFAULT_FINETUNE_STEPS, *PAIRS[0])
  seeds = len(settings.DEFAULT_FINETUNE_SEEDS)
  assert _decided_fraction(downstream, seeds, predicted_sign=+1) >= 0.9


@pytest.mark.parametrize("ours, base", PAIRS)
def test_the_documented_seeds_settle_every_finetuning_claim(ours, base):
  downstream, stability = finetune_differences(settings.DEFAULT_FINETUNE_STEPS, ours, base)
  assert _decided_fraction(downstream, SEEDS_TO_SETTLE_ALL, +1) >= 0.8
  assert _decided_fraction(stability, SEEDS_TO_SETTLE_ALL, -1) >= 0.8


def test_at_the_old_fine_tuning_length_no_seed_count_settles_swishrnns_accuracy_claim():
  # 100 steps: SwishRNN-BERT and BERT-rab fine-tuned to the same accuracy within 0.001, so
  # more seeds would not have decided it; TRANS-BLSTM's was decided with 3.
  swish, _ = finetune_differences(100, "swishrnn_tiny", "bert_rab_tiny")
  trans, _ = finetune_differences(100, "trans_blstm_small_2_tiny", "bert_tiny")
  assert abs(np.mean(swish)) < 0.005 and _decided_fraction(swish, 16, +1) < 0.2
  assert _decided_fraction(trans, 3, +1) >= 0.8


def test_inconclusive_stability_claims_get_the_gpu_command_that_would_settle_them():
  from recurrent_bert.demo import claims_report

  comparison = claims.compare_seeds(
      [(1.0, [1, 2, 3], [0.1, -0.05, 0.02]), (-1.0, [1, 2, 3], [0] * 3)]
  )
  claim = claims.Claim(claims.STABILITY_SOURCE, "s", "e", comparison, -1, 60.0, "seeds")
  assert claim.verdict == claims.INCONCLUSIVE
  needed = claims.seeds_needed(comparison)
  settings = {"presets": ["a", "b"], "finetune_learning_rates": [1e-3, 3e-3]}
  line = claims_report.gpu_command([claim], settings)
  assert f'--backend=jax --jobs=4 --finetune_seeds=1-{needed}"' in line
  assert f"({2 * 2 * needed:,} fine-tuning runs" in line
  decided = claims.compare_seeds(
      [(1.0, [1, 2, 3], [-0.3, -0.31, -0.32]), (-1.0, [1, 2, 3], [0] * 3)]
  )
  settled = claims.Claim(claims.STABILITY_SOURCE, "s", "e", decided, -1, 60.0, "seeds")
  assert claims_report.gpu_command([settled], settings) == ""
