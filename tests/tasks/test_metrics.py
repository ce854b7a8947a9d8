"""Task metrics against independent references.

Classification/regression metrics are compared with scikit-learn and scipy on random
data; SQuAD and MultiRC metrics with examples worked by hand from the official
definitions (the arithmetic is in the comments).
"""

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as sk_metrics

from recurrent_bert.tasks import metrics


@pytest.mark.parametrize("seed", range(5))
def test_classification_metrics_match_sklearn(seed):
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 2, size=200)
  # Correlated with the labels, so the scores are not all near zero.
  predictions = np.where(rng.random(200) < 0.7, labels, rng.integers(0, 2, size=200))
  assert metrics.accuracy(predictions, labels) == pytest.approx(
      sk_metrics.accuracy_score(labels, predictions)
  )
  assert metrics.f1(predictions, labels) == pytest.approx(sk_metrics.f1_score(labels, predictions))
  assert metrics.matthews_corr(predictions, labels) == pytest.approx(
      sk_metrics.matthews_corrcoef(labels, predictions)
  )


def test_matthews_multiclass_and_degenerate_cases_match_sklearn():
  rng = np.random.default_rng(7)
  labels, predictions = rng.integers(0, 3, size=100), rng.integers(0, 3, size=100)
  assert metrics.matthews_corr(predictions, labels) == pytest.approx(
      sk_metrics.matthews_corrcoef(labels, predictions)
  )
  constant = np.ones(10, int)
  mixed = np.array([0, 1] * 5)
  # A constant prediction makes MCC undefined; sklearn (and GLUE) report 0.
  assert (
      metrics.matthews_corr(constant, mixed)
      == pytest.approx(sk_metrics.matthews_corrcoef(mixed, constant))
      == 0.0
  )


def test_f1_without_positives_is_zero_like_sklearn():
  zeros = np.zeros(6, int)
  assert metrics.f1(zeros, zeros) == sk_metrics.f1_score(zeros, zeros, zero_division=0)


@pytest.mark.parametrize("seed", range(5))
def test_correlations_match_scipy(seed):
  rng = np.random.default_rng(seed)
  labels = rng.uniform(0, 5, size=150)
  predictions = labels + rng.normal(0, 1.5, size=150)
  assert metrics.pearson(predictions, labels) == pytest.approx(
      stats.pearsonr(predictions, labels)[0]
  )
  assert metrics.spearman(predictions, labels) == pytest.approx(
      stats.spearmanr(predictions, labels)[0]
  )


def test_spearman_with_ties_matches_scipy():
  rng = np.random.default_rng(3)
  # STS-B gold scores come in steps of 0.2: many ties.
  labels = rng.integers(0, 26, size=300) / 5.0
  predictions = np.round(labels + rng.normal(0, 1, size=300), 1)
  np.testing.assert_allclose(metrics.average_ranks(labels), stats.rankdata(labels))
  assert metrics.spearman(predictions, labels) == pytest.approx(
      stats.spearmanr(predictions, labels)[0]
  )


def test_multirc_f1a_and_exact_match_by_hand():
  # Question A: answers (label, prediction) = (1,1) (0,0) (1,0) -> not all right.
  # Question B: (0,0) (1,1)                                   -> all right.
  # Question C: (0,1)                                         -> not all right.
  groups = ["A", "A", "A", "B", "B", "C"]
  labels = [1, 0, 1, 0, 1, 0]
  predictions = [1, 0, 0, 0, 1, 1]
  # Over all options: TP = 2, FP = 1 (C), FN = 1 (A's third) -> F1a = 4 / (4 + 2).
  result = metrics.task_metrics(("f1a", "exact_match"), predictions, labels, groups)
  assert result["f1a"] == pytest.approx(4 / 6)
  assert result["exact_match"] == pytest.approx(1 / 3)
  with pytest.raises(ValueError, match="group"):
    metrics.task_metrics(("exact_match",), predictions, labels)


def test_task_metrics_rejects_unknown_names_and_mismatched_lengths():
  with pytest.raises(ValueError, match="unknown metric"):
    metrics.task_metrics(("bleu",), [1], [1])
  with pytest.raises(ValueError, match="same length"):
    metrics.accuracy([1, 0], [1])


# ---------------------------------------------------------------------------- SQuAD


@pytest.mark.parametrize(
    "text, normalized",
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an   apple,\ta  day ", "apple day"),
        ("theatre and another", "theatre and another"),  # articles only as whole words
        ("A", ""),
        ("Rock-'n'-Roll", "rocknroll"),
        ("Zürich's “old town”", "zürichs “old town”"),  # only ASCII punctuation is removed
    ],
)
def test_normalize_answer_follows_the_official_definition(text, normalized):
  assert metrics.normalize_answer(text) == normalized


def test_squad_v1_scores_by_hand():
  gold = {
      "q1": ["Denver Broncos", "The Denver Broncos"],
      "q2": ["Santa Clara, California", "Levi's Stadium"],
      "q3": ["gold"],
      "q4": ["February 7, 2016"],  # no prediction: scores 0
  }
  predictions = {
      "q1": "the Denver Broncos.",  # EM 1, F1 1
      # vs "santa clara california": tokens {levis, stadium, in, santa, clara}: overlap 2,
      # P = 2/5, R = 2/3 -> F1 = 2·(2/5)(2/3)/(2/5 + 2/3) = 0.5; vs "levis stadium":
      # overlap 2, P = 2/5, R = 1 -> F1 = 4/7; max = 4/7. EM 0.
      "q2": "Levi's Stadium in Santa Clara",
      "q3": "silver",  # 0, 0
  }
  result = metrics.squad_v1_scores(gold, predictions)
  assert result["total"] == 4
  assert result["exact_match"] == pytest.approx(100 * 1 / 4)
  assert result["f1"] == pytest.approx(100 * (1 + 4 / 7) / 4)


def test_squad_v2_scores_no_answer_handling_and_best_threshold_by_hand():
  gold = {
      "a": ["Paris"],  # answerable
      "b": ["the French", "French"],  # answerable
      "c": [],  # unanswerable
      "d": [],  # unanswerable
  }
  predictions = {"a": "Paris", "b": "French language", "c": "", "d": "London"}
  null_odds = {"a": -2.0, "b": 0.5, "c": 3.0, "d": 1.0}
  # Raw scores (no threshold): a EM 1 F1 1; b EM 0, F1 vs "french": P 1/2 R 1 -> 2/3;
  # c: "" vs no answer -> 1, 1; d: "London" vs no answer -> 0, 0.
  # Threshold 1.0 (default): questions with odds > 1.0 (c) are predicted unanswerable:
  # c scores 1 (it is unanswerable). Others keep raw scores.
  result = metrics.squad_v2_scores(gold, predictions, null_odds)
  assert result["exact_match"] == pytest.approx(100 * (1 + 0 + 1 + 0) / 4)
  assert result["f1"] == pytest.approx(100 * (1 + 2 / 3 + 1 + 0) / 4)
  assert result["HasAns_exact_match"] == pytest.approx(100 * 1 / 2)
  assert result["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
  assert result["NoAns_exact_match"] == pytest.approx(100 * 1 / 2)
  assert result["HasAns_total"] == 2 and result["NoAns_total"] == 2
  # Best threshold for EM. Everything unanswerable scores 2 (c, d). Walking by odds:
  #   a (-2.0): +1 -> 3 (best, thresh -2.0); b (0.5): +0 -> 3; d (1.0): -1 -> 2;
  #   c (3.0): +0 -> 2.  Best 3/4 at threshold -2.0.
  assert result["best_exact_match"] == pytest.approx(75.0)
  assert result["best_exact_match_threshold"] == -2.0
  # For F1: a +1 -> 3 (thresh -2.0); b +2/3 -> 3.667 (thresh 0.5); d -1; c 0.
  assert result["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 4)
  assert result["best_f1_threshold"] == 0.5


def test_squad_v2_without_odds_and_empty_prediction_rules():
  # Without odds every question keeps its raw score; an empty prediction for an
  # answerable question scores 0, an answer that normalises to "" is not a gold answer.
  gold = {"x": ["Paris"], "y": [], "z": ["The", "a"]}
  predictions = {"x": "", "y": "", "z": ""}
  result = metrics.squad_v2_scores(gold, predictions)
  # x: 0; y: 1; z: answers list is non-empty (answerable) but all normalise to "" ->
  # scored against "" -> 1.
  assert result["exact_match"] == pytest.approx(100 * 2 / 3)
  assert result["f1"] == pytest.approx(100 * 2 / 3)
  assert "best_f1" not in result
  with pytest.raises(ValueError, match="no prediction"):
    metrics.squad_v2_scores(gold, {"x": "Paris"})
