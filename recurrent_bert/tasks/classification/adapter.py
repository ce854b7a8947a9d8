"""Sentence(-pair) classification and regression for the fine-tuning loop.

Covers GLUE, SuperGLUE BoolQ/MultiRC and custom TSV tasks, read from their folders or from
TFDS. `task_source` decides where a task's examples come from; `ClassificationAdapter`
packs them as [CLS] a [SEP] (b [SEP]) (pair_features.py), trains a classifier (softmax
cross-entropy over the label list) or, for a task without labels (STS-B), a regressor
(squared error of one output), scores dev splits with the task's official metrics and
writes test predictions as leaderboard submission files.
"""

import dataclasses
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from recurrent_bert import model_dir as layout
from recurrent_bert.data import feature_cache
from recurrent_bert.data import tokenization
from recurrent_bert.data.feature_cache import Features
from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import InputError
from recurrent_bert.model_dir import TaskInfo
from recurrent_bert.tasks import metrics
from recurrent_bert.tasks import pair_features
from recurrent_bert.tasks.classification import custom_task
from recurrent_bert.tasks.classification import glue
from recurrent_bert.tasks.classification import submission
from recurrent_bert.tasks.classification import superglue
from recurrent_bert.tasks.classification import tfds_reader
from recurrent_bert.tasks.classification.registry import TaskSpec
from recurrent_bert.tasks.classification.registry import canonical_task_name
from recurrent_bert.tasks.classification.registry import get_task
from recurrent_bert.tasks.pair_features import PairExample
from recurrent_bert.training import objectives
from recurrent_bert.training.task_adapter import TaskAdapter


@dataclasses.dataclass(frozen=True)
class TaskSource:
  """Where the examples of a classification task come from.

  Attributes:
    spec: the task.
    read_split: split name -> `SplitData` of `PairExample`s.
    predict_splits: the test splits that exist, the default prediction files.
  """

  spec: TaskSpec
  read_split: Callable[[str], SplitData]
  predict_splits: Tuple[str, ...]


def is_custom_task(task: str) -> bool:
  """Whether `task` names the custom TSV task rather than a benchmark task."""
  return canonical_task_name(task) == custom_task.TASK_NAME


def _custom_source(
    data_dir: str,
    label_list: Optional[Sequence[str]],
    trained_label_list: Optional[Sequence[str]],
    skip_bad_rows: bool,
) -> TaskSource:
  # Stripped before the comparison below: " pos" is the trained label "pos".
  labels = list(custom_task.check_label_list(label_list, "--label_list")) if label_list else None
  if trained_label_list:
    trained = list(trained_label_list)
    if labels and labels != trained:
      raise InputError(
          f"label list {','.join(labels)} differs from the labels "
          f"{','.join(trained)} the model was trained with"
      )
    labels = trained
  spec = custom_task.task_spec(labels or custom_task.infer_label_list(data_dir, skip_bad_rows))
  has_test = layout.exists(os.path.join(data_dir, spec.files["test"]))

  def read_split(split: str) -> SplitData:
    return custom_task.read_custom(data_dir, split, spec.label_list, skip_bad_rows)

  return TaskSource(spec, read_split, ("test",) if has_test else ())


def task_source(
    task: str,
    data_dir: Optional[str] = None,
    *,
    use_tfds: bool = False,
    tfds_data_dir: Optional[str] = None,
    tfds_download: bool = False,
    label_list: Optional[Sequence[str]] = None,
    trained_label_list: Optional[Sequence[str]] = None,
    skip_bad_rows: bool = False,
) -> TaskSource:
  """Picks the reader of a task: GLUE or SuperGLUE folder, TFDS, or a custom TSV folder.

  Args:
    task: a registry task name ("mrpc", "MNLI", "boolq", ...) or "custom".
    data_dir: the task's folder (glue_data/MRPC, superglue/BoolQ, a custom task's TSVs).
    use_tfds: read the task from tensorflow-datasets instead of `data_dir`.
    tfds_data_dir: TFDS data dir; None = TFDS's default.
    tfds_download: let TFDS download missing data.
    label_list: custom task: the label names (default: sorted train labels).
    trained_label_list: custom task: the labels of the model being continued, which
      win over the default and must equal `label_list` when both are given.
    skip_bad_rows: the readers skip bad rows (listed in each `SplitData.skipped`)
      instead of refusing the file at the first.

  Returns:
    The TaskSource; its predict splits are the test splits found (all of them for TFDS).

  Raises:
    InputError: unknown task, no data_dir, a custom task from TFDS, or a label list that
      contradicts the trained model's.
  """
  if is_custom_task(task) and use_tfds:
    raise InputError("the custom task is read from its TSV folder, not from TFDS")
  if data_dir is None and not use_tfds:
    raise InputError(f"task {task}: give its folder or read it from TFDS")
  if is_custom_task(task):
    return _custom_source(data_dir, label_list, trained_label_list, skip_bad_rows)
  spec = get_task(task)
  if use_tfds:

    def read_from_tfds(split: str) -> SplitData:
      return tfds_reader.load_tfds_task(
          spec.name, split, tfds_data_dir, tfds_download, skip_bad_rows
      )

    return TaskSource(spec, read_from_tfds, tuple(spec.leaderboard_files))
  if spec.benchmark == "superglue":

    def read_split(split: str) -> SplitData:
      return superglue.read_superglue(data_dir, spec.name, split, skip_bad_rows)

  else:

    def read_split(split: str) -> SplitData:
      return glue.read_glue(data_dir, spec.name, split, skip_bad_rows)

  present = tuple(
      split
      for split in spec.leaderboard_files
      if layout.exists(os.path.join(data_dir, spec.files[split]))
  )
  return TaskSource(spec, read_split, present)


def _softmax(logits: np.ndarray) -> np.ndarray:
  """Row-wise softmax of logits [N, K]."""
  exp = np.exp(logits - logits.max(-1, keepdims=True))
  return exp / exp.sum(-1, keepdims=True)


class ClassificationAdapter(TaskAdapter):
  """A sentence(-pair) classification or regression task, for the `Finetuner`.

  Features are those of `pair_features.convert_pair_examples`; the model's "logits" are
  [N, K] over the spec's K labels, or [N, 1] scores of a regression task.

  Args:
    spec: the task (label list, metrics, leaderboard files).
    read_split: split name -> `SplitData` of `PairExample`s (e.g. `TaskSource.read_split`).
    tokenizer: a `BertWordpieceTokenizer`; its vocabulary file and casing key the caches.
    max_seq_length: T of the packed features.
    cache_dir: where the feature caches go.
    predict_splits: the splits written as prediction files.

  Attributes:
    skipped_rows: {file (or TFDS source): rows skipped} of every split read so far.
  """

  def __init__(
      self,
      spec: TaskSpec,
      read_split: Callable[[str], SplitData],
      tokenizer,
      max_seq_length: int,
      cache_dir: str,
      predict_splits: Sequence[str] = (),
  ):
    super().__init__(
        cache_dir,
        [
            feature_cache.file_fingerprint(tokenizer.vocab_file),
            tokenizer.do_lower_case,
            tokenization.WORD_BOUNDARY_RULES,  # how text splits into words
            max_seq_length,
            spec.label_list,
        ],
    )
    self.spec = spec
    self._read_split = read_split
    self._tokenizer = tokenizer
    self._max_seq_length = max_seq_length
    self.info = TaskInfo(
        task=spec.name,
        kind="regressor" if spec.is_regression else "classifier",
        label_names=tuple(spec.label_list or ()),
        do_lower_case=tokenizer.do_lower_case,
        max_seq_length=max_seq_length,
        main_metric=spec.main_metric,
    )
    self.objective = (
        objectives.RegressionObjective()
        if spec.is_regression
        else objectives.ClassificationObjective()
    )
    self.output_keys = ("logits",)
    self.eval_splits = tuple(spec.eval_splits)
    self.predict_splits = tuple(predict_splits)
    self.skipped_rows: Dict[str, int] = {}

  def read_split(self, split: str) -> SplitData:
    data = self._read_split(split)
    self.skipped_rows[data.source] = len(data.skipped)
    return data

  def convert(self, examples: Sequence[PairExample]) -> Features:
    return pair_features.convert_pair_examples(
        examples, self._tokenizer, self._max_seq_length, self.spec.label_list
    )

  def prepare(self, splits: Sequence[str]) -> None:
    """Converts `splits`; the model serves text pairs if any of their examples is a pair."""
    super().prepare(splits)
    text_pair = any(e.text_b is not None for split in splits for e in self.examples(split))
    self.info = dataclasses.replace(self.info, text_pair=text_pair)

  def _predictions(self, logits: np.ndarray) -> np.ndarray:
    """Label ids [N] from logits [N, K], or the scores [N] of logits [N, 1] (regression)."""
    return logits[:, 0] if self.spec.is_regression else logits.argmax(axis=-1)

  def evaluate(self, split: str, outputs: Dict[str, np.ndarray]) -> Dict[str, float]:
    examples = self.examples(split)
    labels = pair_features.label_ids(examples, self.spec.label_list)
    # MultiRC's exact match scores each question's answers together.
    groups = [e.group for e in examples] if "exact_match" in self.spec.metric_names else None
    results = metrics.task_metrics(
        self.spec.metric_names, self._predictions(outputs["logits"]), labels, groups
    )
    results["num_examples"] = len(examples)
    return results

  def write_predictions(
      self, split: str, outputs: Dict[str, np.ndarray], output_dir: str
  ) -> List[str]:
    examples = self.examples(split)
    predicted = self._predictions(outputs["logits"])
    if self.spec.benchmark == custom_task.TASK_NAME:
      return [
          custom_task.write_predictions(
              output_dir,
              split,
              examples,
              self.spec.label_list,
              predicted,
              _softmax(outputs["logits"]),
          )
      ]
    if self.spec.benchmark == "superglue":
      return [
          submission.write_superglue_submission(output_dir, self.spec.name, examples, predicted)
      ]
    return [
        submission.write_glue_submission(output_dir, self.spec.name, split, examples, predicted)
    ]
