"""The official task metrics (SPEC §9), in numpy and plain Python.

Classification/regression (GLUE, SuperGLUE), as fractions in [0, 1] (correlations in
[-1, 1]):
  accuracy        mean(prediction == label)
  f1              binary F1 of the positive class 1 (MRPC, QQP)
  matthews_corr   Matthews correlation coefficient (CoLA), 0 when undefined
  pearson         Pearson correlation (STS-B)
  spearman        Spearman rank correlation, ties get their average rank (STS-B)
  f1a             MultiRC: binary F1 over all answer options
  exact_match     MultiRC: fraction of questions whose answer options are ALL right

SQuAD, in percent, as the official scorers print them:
  v1.1  exact_match / f1: normalise (lower-case, drop punctuation, drop the articles
        a/an/the, fold whitespace), EM = normalised strings equal, F1 = bag-of-tokens F1;
        each question scores its best gold answer; unanswered questions score 0.
  v2.0  the same per question, but gold answers that normalise to "" are dropped, a
        question without gold answers is a no-answer question (only "" is right), and an
        empty prediction or gold scores F1 = 1 only if both are empty. With no-answer
        odds (null_odds.json), a question is predicted unanswerable when its odds exceed
        the threshold; `best_*` report the best threshold found on the data.
"""

import collections
import re
import string
from typing import Dict, Hashable, List, Mapping, Optional, Sequence

import numpy as np

# ------------------------------------------------------------ classification/regression


def _as_labels(predictions, labels):
  predictions, labels = np.asarray(predictions), np.asarray(labels)
  if predictions.shape != labels.shape or predictions.ndim != 1:
    raise ValueError(
        f"predictions {predictions.shape} and labels {labels.shape} must be "
        f"1-D arrays of the same length"
    )
  if predictions.size == 0:
    raise ValueError("cannot compute a metric over zero examples")
  return predictions, labels


def accuracy(predictions: Sequence, labels: Sequence) -> float:
  """Fraction of exact matches. predictions, labels: [N] (ints or strings)."""
  predictions, labels = _as_labels(predictions, labels)
  return float(np.mean(predictions == labels))


def f1(predictions: Sequence[int], labels: Sequence[int], positive_label=1) -> float:
  """Binary F1 of `positive_label`: 2·TP / (2·TP + FP + FN); 0 if there are no positives."""
  predictions, labels = _as_labels(predictions, labels)
  predicted, actual = predictions == positive_label, labels == positive_label
  true_positives = np.sum(predicted & actual)
  denominator = np.sum(predicted) + np.sum(actual)
  return float(2 * true_positives / denominator) if denominator else 0.0


def matthews_corr(predictions: Sequence[int], labels: Sequence[int]) -> float:
  """Matthews correlation coefficient, multi-class form (binary for CoLA).

  With the confusion matrix C (rows = labels, columns = predictions), s = N, c = trace(C),
  t_k = row sums, p_k = column sums:
    MCC = (c·s − Σ p_k t_k) / sqrt((s² − Σ p_k²)(s² − Σ t_k²)),  0 when undefined.
  """
  predictions, labels = _as_labels(predictions, labels)
  classes = np.unique(np.concatenate([predictions, labels]))
  label_ids = np.searchsorted(classes, labels)
  prediction_ids = np.searchsorted(classes, predictions)
  confusion = np.zeros((len(classes), len(classes)), np.float64)
  np.add.at(confusion, (label_ids, prediction_ids), 1)
  total, correct = confusion.sum(), np.trace(confusion)
  true_counts, predicted_counts = confusion.sum(axis=1), confusion.sum(axis=0)
  numerator = correct * total - predicted_counts @ true_counts
  denominator = np.sqrt(
      (total**2 - predicted_counts @ predicted_counts) * (total**2 - true_counts @ true_counts)
  )
  return float(numerator / denominator) if denominator else 0.0


def pearson(predictions: Sequence[float], labels: Sequence[float]) -> float:
  """Pearson correlation of two [N] float arrays (NaN if either is constant)."""
  x, y = (np.asarray(a, np.float64) for a in _as_labels(predictions, labels))
  x, y = x - x.mean(), y - y.mean()
  denominator = np.sqrt((x @ x) * (y @ y))
  return float(x @ y / denominator) if denominator else float("nan")


def average_ranks(values: Sequence[float]) -> np.ndarray:
  """1-based ranks [N]; tied values share the mean of the ranks they span."""
  values = np.asarray(values, np.float64)
  order = np.argsort(values, kind="stable")
  sorted_values = values[order]
  # Start of every run of equal values, and each element's run.
  run_starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
  run_ends = np.r_[run_starts[1:], len(values)]
  run_of_sorted = np.repeat(np.arange(len(run_starts)), run_ends - run_starts)
  run_rank = (run_starts + 1 + run_ends) / 2.0  # mean of ranks start+1 .. end
  ranks = np.empty(len(values), np.float64)
  ranks[order] = run_rank[run_of_sorted]
  return ranks


def spearman(predictions: Sequence[float], labels: Sequence[float]) -> float:
  """Spearman rank correlation: Pearson of the average ranks."""
  predictions, labels = _as_labels(predictions, labels)
  return pearson(average_ranks(predictions), average_ranks(labels))


def multirc_exact_match(
    predictions: Sequence[int], labels: Sequence[int], groups: Sequence[Hashable]
) -> float:
  """Fraction of questions (groups) whose answer options are all predicted right."""
  predictions, labels = _as_labels(predictions, labels)
  if len(groups) != len(labels):
    raise ValueError(f"{len(groups)} groups for {len(labels)} labels")
  all_right: Dict[Hashable, bool] = {}
  for group, right in zip(groups, (predictions == labels).tolist()):
    all_right[group] = all_right.get(group, True) and right
  return float(np.mean(list(all_right.values())))


def task_metrics(
    metric_names: Sequence[str],
    predictions: Sequence,
    labels: Sequence,
    groups: Optional[Sequence[Hashable]] = None,
) -> Dict[str, float]:
  """Computes a task's metrics (e.g. TaskSpec.metric_names) over one evaluation split.

  Args:
    metric_names: names from this module: accuracy, f1, matthews_corr, pearson, spearman,
      f1a, exact_match.
    predictions, labels: [N] label ids (classification) or floats (regression).
    groups: [N] question keys; needed by exact_match (MultiRC).

  Returns:
    name → value.
  """
  functions = {
      "accuracy": accuracy,
      "f1": f1,
      "f1a": f1,
      "matthews_corr": matthews_corr,
      "pearson": pearson,
      "spearman": spearman,
  }
  results = {}
  for name in metric_names:
    if name == "exact_match":
      if groups is None:
        raise ValueError("exact_match (MultiRC) needs the question group of each example")
      results[name] = multirc_exact_match(predictions, labels, groups)
    elif name in functions:
      results[name] = functions[name](predictions, labels)
    else:
      raise ValueError(
          f"unknown metric {name!r}; known: {', '.join(sorted([*functions, 'exact_match']))}"
      )
  return results


# ---------------------------------------------------------------------------- SQuAD

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
  """The official SQuAD normalisation: lower, drop punctuation, drop articles, fold spaces."""
  text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
  text = _ARTICLES.sub(" ", text)
  return " ".join(text.split())


def squad_exact_match(prediction: str, gold: str) -> float:
  """1.0 if the normalised strings are equal, else 0.0."""
  return float(normalize_answer(prediction) == normalize_answer(gold))


def squad_f1(prediction: str, gold: str, empty_matches_empty: bool = False) -> float:
  """Bag-of-normalised-tokens F1 of one prediction against one gold answer.

  Args:
    empty_matches_empty: v2.0 rule: if either side has no tokens, the score is 1.0 when
      both are empty and 0.0 otherwise (v1.1 scores any empty side 0.0).
  """
  prediction_tokens = normalize_answer(prediction).split()
  gold_tokens = normalize_answer(gold).split()
  if empty_matches_empty and (not prediction_tokens or not gold_tokens):
    return float(prediction_tokens == gold_tokens)
  common = collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)
  overlap = sum(common.values())
  if overlap == 0:
    return 0.0
  precision, recall = overlap / len(prediction_tokens), overlap / len(gold_tokens)
  return 2 * precision * recall / (precision + recall)


def squad_v1_scores(
    gold_answers: Mapping[str, Sequence[str]], predictions: Mapping[str, str]
) -> Dict[str, float]:
  """SQuAD v1.1 EM and F1 in percent.

  Args:
    gold_answers: question id → its gold answer texts (all of them, duplicates allowed).
    predictions: question id → predicted text; a missing id scores 0.

  Returns:
    {"exact_match": %, "f1": %, "total": number of questions}.
  """
  if not gold_answers:
    raise ValueError("no questions to score")
  exact, f1_total = 0.0, 0.0
  for qid, golds in gold_answers.items():
    if qid not in predictions:
      continue
    prediction = predictions[qid]
    exact += max(squad_exact_match(prediction, g) for g in golds)
    f1_total += max(squad_f1(prediction, g) for g in golds)
  total = len(gold_answers)
  return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1_total / total, "total": total}


def _best_threshold(
    per_question: Dict[str, float],
    has_answer: Dict[str, bool],
    predictions: Mapping[str, str],
    null_odds: Mapping[str, float],
):
  """The no-answer threshold maximising a total score, and that score in percent.

  Predicting "unanswerable" for every question scores one per no-answer question. Moving
  the threshold down past a question's odds switches that question to its span
  prediction, which changes the total by (its score − 1) if it has no answer and by its
  score if it has one; the best prefix of questions sorted by odds gives the optimum.
  """
  total = float(sum(1 for q in per_question if not has_answer[q]))
  best_total, best_threshold = total, 0.0
  for qid in sorted(per_question, key=lambda q: null_odds[q]):
    if has_answer[qid]:
      total += per_question[qid]
    elif predictions[qid]:
      total -= 1.0  # a span where there is none
    if total > best_total:
      best_total, best_threshold = total, float(null_odds[qid])
  return 100.0 * best_total / len(per_question), best_threshold


def squad_v2_scores(
    gold_answers: Mapping[str, Sequence[str]],
    predictions: Mapping[str, str],
    null_odds: Optional[Mapping[str, float]] = None,
    null_threshold: float = 1.0,
) -> Dict[str, float]:
  """SQuAD v2.0 EM and F1 in percent, with no-answer handling.

  Args:
    gold_answers: question id → gold answer texts; [] for unanswerable questions.
    predictions: question id → predicted text, "" meaning "no answer". Every question
      must have one (the official scorer requires it).
    null_odds: question id → no-answer odds (higher = more likely unanswerable); None
      means 0 for every question.
    null_threshold: a question is predicted unanswerable when its odds exceed this.

  Returns:
    exact_match, f1 (%), total; HasAns_/NoAns_ exact_match, f1 and total over the
    answerable / unanswerable questions (when there are any); with null_odds also
    best_exact_match, best_exact_match_threshold, best_f1, best_f1_threshold.
  """
  missing = [qid for qid in gold_answers if qid not in predictions]
  if missing:
    raise ValueError(f"{len(missing)} question(s) have no prediction, e.g. {missing[0]!r}")
  if not gold_answers:
    raise ValueError("no questions to score")
  odds = {qid: 0.0 for qid in gold_answers} if null_odds is None else null_odds
  exact_raw, f1_raw, has_answer = {}, {}, {}
  for qid, golds in gold_answers.items():
    # As the official scorer: "answerable" means the question lists answers at all, but
    # answers that normalise to "" are not scored (an all-empty list scores like "").
    has_answer[qid] = bool(golds)
    kept = [g for g in golds if normalize_answer(g)] or [""]
    prediction = predictions[qid]
    exact_raw[qid] = max(squad_exact_match(prediction, g) for g in kept)
    f1_raw[qid] = max(squad_f1(prediction, g, empty_matches_empty=True) for g in kept)

  def thresholded(raw):
    return {
        qid: (float(not has_answer[qid]) if odds[qid] > null_threshold else score)
        for qid, score in raw.items()
    }

  exact, f1_scores = thresholded(exact_raw), thresholded(f1_raw)

  def summary(qids, prefix=""):
    return {
        f"{prefix}exact_match": 100.0 * sum(exact[q] for q in qids) / len(qids),
        f"{prefix}f1": 100.0 * sum(f1_scores[q] for q in qids) / len(qids),
        f"{prefix}total": len(qids),
    }

  results = summary(list(gold_answers))
  answerable = [q for q in gold_answers if has_answer[q]]
  unanswerable = [q for q in gold_answers if not has_answer[q]]
  if answerable:
    results.update(summary(answerable, "HasAns_"))
  if unanswerable:
    results.update(summary(unanswerable, "NoAns_"))
  if null_odds is not None:
    results["best_exact_match"], results["best_exact_match_threshold"] = _best_threshold(
        exact_raw, has_answer, predictions, odds
    )
    results["best_f1"], results["best_f1_threshold"] = _best_threshold(
        f1_raw, has_answer, predictions, odds
    )
  return results


def squad_gold_answers(examples) -> Dict[str, List[str]]:
  """question id → gold texts, from `squad.SquadExample`s (unanswerable → [])."""
  return {e.qas_id: ([] if e.is_impossible else [a.text for a in e.answers]) for e in examples}
