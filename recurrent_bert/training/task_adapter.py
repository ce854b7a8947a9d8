"""What the `Finetuner` asks of a fine-tuning task (the adapters: recurrent_bert/tasks/)."""

import os
from typing import Dict, List, Sequence

import numpy as np

from recurrent_bert.data import feature_cache
from recurrent_bert.errors import InputError
from recurrent_bert.model_dir import TaskInfo


class TaskAdapter:
  """What the `Finetuner` asks of a fine-tuning task (adapters: recurrent_bert/tasks/).

  Subclasses set the attributes and implement read_split, convert, evaluate and
  write_predictions; examples are read once and their features cached as TFRecords
  (rebuilt when the examples, vocabulary or settings change).

  Attributes:
    info: the TaskInfo.
    objective: a training/objectives.py objective.
    output_keys: model outputs kept by prediction.
    eval_splits: labeled splits scored by `evaluate` (the first picks the best).
    predict_splits: splits written as prediction files.
  """

  info: TaskInfo
  objective = None
  output_keys: Sequence[str] = ()
  eval_splits: Sequence[str] = ()
  predict_splits: Sequence[str] = ()

  def __init__(self, cache_dir: str, conversion_key):
    """Sets where the feature caches go.

    Args:
      cache_dir: the directory of the feature caches.
      conversion_key: JSON-able settings of `convert` (vocabulary hash, casing, lengths);
        a cache made with other settings is rebuilt.
    """
    self._cache_dir = cache_dir
    self._conversion_key = conversion_key
    self._examples: Dict[str, list] = {}
    self._caches: Dict[str, str] = {}

  def read_split(self, split: str):
    """The split's `SplitData`."""
    raise NotImplementedError

  def convert(self, examples) -> Dict[str, np.ndarray]:
    """Examples -> feature arrays [N, ...] (N rows; SQuAD: one per window)."""
    raise NotImplementedError

  def evaluate(self, split: str, outputs: Dict[str, np.ndarray]) -> Dict[str, float]:
    """Metrics of one labeled split from the model outputs [N, ...] of its features."""
    raise NotImplementedError

  def write_predictions(
      self, split: str, outputs: Dict[str, np.ndarray], output_dir: str
  ) -> List[str]:
    """Writes the split's prediction files; returns their paths."""
    raise NotImplementedError

  def splits_read_by(self, mode: str) -> List[str]:
    """The splits a `Finetuner` mode reads, each once, in reading order.

    `train` reads the evaluation splits too, though it does not score them: bad labeled
    data then stops the command before training, not at the `eval` run that follows.

    Raises:
      InputError: the mode has nothing to read (no evaluation or prediction split).
    """
    needed = {
        "train": ["train", *self.eval_splits],
        "eval": list(self.eval_splits),
        "predict": list(self.predict_splits),
        "train_and_eval": ["train", *self.eval_splits, *self.predict_splits],
    }[mode]
    if not needed or (mode == "eval" and not self.eval_splits):
      raise InputError(f"--mode={mode}: no data for it (no dev split given or found)")
    return list(dict.fromkeys(needed))

  def prepare(self, splits: Sequence[str]) -> None:
    """Reads and converts `splits` now, so that bad data fails before a model is built."""
    for split in splits:
      self.feature_cache(split)

  def examples(self, split: str) -> list:
    """The split's examples, read on first use."""
    if split not in self._examples:
      data = self.read_split(split)
      data.report_skipped()
      if not data.examples:
        raise ValueError(f"{data.source}: no examples")
      self._examples[split] = data.examples
    return self._examples[split]

  def features(self, split: str) -> Dict[str, np.ndarray]:
    """The split's feature arrays [N, ...]."""
    return feature_cache.read_feature_cache(self.feature_cache(split))

  def feature_cache(self, split: str) -> str:
    """Path of the split's feature cache, built on first use."""
    if split not in self._caches:
      examples = self.examples(split)
      path = os.path.join(self._cache_dir, f"{self.info.task}_{split}.tfrecord")
      key = feature_cache.fingerprint([repr(e) for e in examples], self._conversion_key)
      feature_cache.cached_features(path, key, lambda: self.convert(examples))
      self._caches[split] = path
    return self._caches[split]

  def num_examples(self, split: str) -> int:
    """Feature rows of the split (what an epoch iterates over)."""
    return feature_cache.read_cache_metadata(self.feature_cache(split))["num_records"]
