"""The claims' statistics against SciPy's Welch test, t tables and simulation."""

import math

import numpy as np
import pytest
from scipy import stats

from recurrent_bert.demo import claims


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


def _row(family, eval_losses, dev_by_lr, test_by_lr):
  by_lr = {lr: {"dev": dev, "test": test_by_lr[lr]} for lr, dev in dev_by_lr.items()}
  best = max(by_lr, key=lambda lr: np.mean(by_lr[lr]["dev"]))
  return {
      "preset": f"{family}_tiny",
      "model": family.upper(),
      "family": family,
      "eval_mlm_loss": eval_losses,
      "by_learning_rate": by_lr,
      "best_learning_rate": best,
  }


def test_paper_claims_for_each_recurrent_model_against_its_baselines():
  bert = _row(
      "bert",
      [6.0, 6.1],
      {1e-4: [0.5, 0.6], 1e-3: [0.8, 0.7], 1e-2: [0.3, 0.25]},
      {1e-4: [0.5, 0.5], 1e-3: [0.75, 0.7], 1e-2: [0.3, 0.3]},
  )
  rab = _row("bert_rab", [5.9, 6.0], {1e-3: [0.7, 0.7]}, {1e-3: [0.7, 0.71]})
  swish = _row(
      "swishrnn",
      [5.2, 5.25],
      {1e-4: [0.7, 0.72], 1e-3: [0.8, 0.82], 1e-2: [0.75, 0.7]},
      {1e-4: [0.7, 0.7], 1e-3: [0.8, 0.85], 1e-2: [0.7, 0.7]},
  )
  seconds = {"bert_tiny": 100.0, "bert_rab_tiny": 110.0, "swishrnn_tiny": 120.0}
  got = claims.paper_claims([bert, rab, swish], seconds, 20.0)
  assert [c.source for c in got] == [
      "SwishRNN Fig. 4",
      "SwishRNN Fig. 4",
      "SwishRNN Fig. 3",
      "SwishRNN Table 1",
  ]
  vs_bert, vs_rab, stability, downstream = got
  assert "BERT_RAB" in vs_rab.statement and vs_bert.seed_seconds == 220.0
  welch = stats.ttest_ind([5.2, 5.25], [6.0, 6.1], equal_var=False).confidence_interval()
  assert (vs_bert.comparison.low, vs_bert.comparison.high) == pytest.approx(tuple(welch))
  assert vs_bert.verdict == claims.REPRODUCED
  # Stability: (0.81 - 0.71) - (0.75 - 0.275), lower is stabler.
  assert stability.comparison.estimate == pytest.approx((0.81 - 0.71) - (0.75 - 0.275))
  assert stability.predicted_sign == -1 and stability.seed_seconds == 6 * 20.0
  # Downstream: test accuracy at each model's best dev learning rate (1e-3 for both).
  assert downstream.comparison.estimate == pytest.approx(0.825 - 0.725)
  assert downstream.predicted_sign == 1
  # No recurrent model, no claim; one learning rate, no stability claim.
  assert claims.paper_claims([bert, rab], seconds, 20.0) == []
  one_lr = dict(
      swish, by_learning_rate={1e-3: swish["by_learning_rate"][1e-3]}, best_learning_rate=1e-3
  )
  assert [c.source for c in claims.paper_claims([bert, one_lr], seconds, 20.0)] == [
      "SwishRNN Fig. 4",
      "SwishRNN Table 1",
  ]
