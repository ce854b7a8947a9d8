"""What the fine-tuning task gives without a pretrained encoder: the floors of the report.

Two classifiers on the same train / dev / test passages as the fine-tuning runs:
- *majority class*: always the commonest train label (chance, on a balanced task);
- *bag of words*: multinomial logistic regression on word counts (scikit-learn), its
  inverse regularisation C chosen on dev accuracy from `C_GRID`, then scored on test.

A fine-tuned encoder that does not beat the bag of words has not shown that its
pretraining taught it anything this task can use.
"""

import collections
import os
from typing import Dict, List, Sequence, Tuple

from recurrent_bert.demo import origin_task

C_GRID = (0.1, 1.0, 10.0)


def _split(task_dir: str, split: str) -> Tuple[List[str], List[str]]:
  """(passages, labels) of a split of the task folder (test labels from their own file)."""
  rows = origin_task.read_tsv(os.path.join(task_dir, f"{split}.tsv"))
  if split == "test":
    truth = origin_task.read_labels(os.path.join(task_dir, "test_labels.tsv"))
    return [r["sentence"] for r in rows], [truth[r["index"]] for r in rows]
  return [r["sentence"] for r in rows], [r["label"] for r in rows]


def _accuracy(predicted: Sequence[str], truth: Sequence[str]) -> float:
  return sum(p == t for p, t in zip(predicted, truth)) / len(truth)


def task_floors(task_dir: str) -> Dict[str, Dict]:
  """The floors of the task in `task_dir` (train.tsv, dev.tsv, test.tsv, test_labels.tsv).

  Returns:
    {"majority": {"label", "dev", "test"}, "bag_of_words": {"C", "dev", "test",
    "features"}}: accuracies in [0, 1].
  """
  # scikit-learn only here: the demo's driver imports the report's modules' names.
  from sklearn.feature_extraction.text import CountVectorizer
  from sklearn.linear_model import LogisticRegression

  train, dev, test = (_split(task_dir, split) for split in ("train", "dev", "test"))
  majority = collections.Counter(train[1]).most_common(1)[0][0]
  floors = {
      "majority": {
          "label": majority,
          "dev": _accuracy([majority] * len(dev[1]), dev[1]),
          "test": _accuracy([majority] * len(test[1]), test[1]),
      }
  }
  vectorizer = CountVectorizer(lowercase=True)
  features = vectorizer.fit_transform(train[0])
  best = None
  for c in C_GRID:
    model = LogisticRegression(C=c, max_iter=2000).fit(features, train[1])
    dev_accuracy = _accuracy(model.predict(vectorizer.transform(dev[0])), dev[1])
    if best is None or dev_accuracy > best[1]:
      best = (c, dev_accuracy, model)
  c, dev_accuracy, model = best
  floors["bag_of_words"] = {
      "C": c,
      "dev": dev_accuracy,
      "test": _accuracy(model.predict(vectorizer.transform(test[0])), test[1]),
      "features": features.shape[1],
  }
  return floors


def describe(floors: Dict[str, Dict]) -> str:
  """The floors in a sentence, for the report."""
  majority, words = floors["majority"], floors["bag_of_words"]
  return (
      f"majority class ({majority['label']}) dev {majority['dev']:.3f} / test "
      f"{majority['test']:.3f}; bag-of-words logistic regression ({words['features']:,} "
      f"words of the train passages, C = {words['C']:g} chosen on dev) dev "
      f"{words['dev']:.3f} / test {words['test']:.3f}"
  )
