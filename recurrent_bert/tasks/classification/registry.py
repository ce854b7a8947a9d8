"""The registry of the benchmark tasks: what each GLUE and SuperGLUE task is (`TaskSpec`).

A `TaskSpec` names a task's label list, metrics, official files and leaderboard files;
readers (glue.py, superglue.py, tfds_reader.py), the custom task, the submission writers
and the adapter look tasks up here by name (`get_task`).
"""

import dataclasses
from typing import Dict, Optional, Tuple

from recurrent_bert.errors import InputError


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """One registry entry: what readers, metrics and adapters need to know about a task.

  Attributes:
    name: registry key ("cola", "mnli", "boolq", ...).
    dir_name: the folder of the official distribution ("CoLA", "MNLI", "BoolQ").
    label_list: label names, label id = position; None for regression (STS-B).
    metric_names: metrics reported on the dev split(s), names as in `metrics.py`.
    main_metric: the metric used for model selection (the paper's metric).
    files: split name → file name inside the task folder.
    eval_splits: the labeled evaluation splits ("dev"; MNLI: matched and mismatched).
    leaderboard_files: test split → submission file name.
    benchmark: "glue" or "superglue".
    score_range: regression only: the (lowest, highest) score a labeled example may have.
  """

  name: str
  dir_name: str
  label_list: Optional[Tuple[str, ...]]
  metric_names: Tuple[str, ...]
  main_metric: str
  files: Dict[str, str]
  eval_splits: Tuple[str, ...]
  leaderboard_files: Dict[str, str]
  benchmark: str = "glue"
  score_range: Optional[Tuple[float, float]] = None

  @property
  def is_regression(self) -> bool:
    return self.label_list is None

  @property
  def num_labels(self) -> int:
    """Output units of the classifier head: the number of labels, 1 for regression."""
    return 1 if self.label_list is None else len(self.label_list)

  @property
  def splits(self) -> Tuple[str, ...]:
    return tuple(self.files)


def _standard_files() -> Dict[str, str]:
  return {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}


_BINARY = ("0", "1")
_ENTAILMENT = ("entailment", "not_entailment")

GLUE_TASKS: Dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            "cola",
            "CoLA",
            _BINARY,
            ("matthews_corr", "accuracy"),
            "matthews_corr",
            _standard_files(),
            ("dev",),
            {"test": "CoLA.tsv"},
        ),
        TaskSpec(
            "sst2",
            "SST-2",
            _BINARY,
            ("accuracy",),
            "accuracy",
            _standard_files(),
            ("dev",),
            {"test": "SST-2.tsv"},
        ),
        TaskSpec(
            "mrpc",
            "MRPC",
            _BINARY,
            ("f1", "accuracy"),
            "f1",
            _standard_files(),
            ("dev",),
            {"test": "MRPC.tsv"},
        ),
        TaskSpec(
            "stsb",
            "STS-B",
            None,
            ("pearson", "spearman"),
            "spearman",
            _standard_files(),
            ("dev",),
            {"test": "STS-B.tsv"},
            score_range=(0.0, 5.0),  # the annotators' similarity scale
        ),
        TaskSpec(
            "qqp",
            "QQP",
            _BINARY,
            ("f1", "accuracy"),
            "f1",
            _standard_files(),
            ("dev",),
            {"test": "QQP.tsv"},
        ),
        TaskSpec(
            "mnli",
            "MNLI",
            ("contradiction", "entailment", "neutral"),
            ("accuracy",),
            "accuracy",
            {
                "train": "train.tsv",
                "dev_matched": "dev_matched.tsv",
                "dev_mismatched": "dev_mismatched.tsv",
                "test_matched": "test_matched.tsv",
                "test_mismatched": "test_mismatched.tsv",
            },
            ("dev_matched", "dev_mismatched"),
            {"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"},
        ),
        TaskSpec(
            "qnli",
            "QNLI",
            _ENTAILMENT,
            ("accuracy",),
            "accuracy",
            _standard_files(),
            ("dev",),
            {"test": "QNLI.tsv"},
        ),
        TaskSpec(
            "rte",
            "RTE",
            _ENTAILMENT,
            ("accuracy",),
            "accuracy",
            _standard_files(),
            ("dev",),
            {"test": "RTE.tsv"},
        ),
        TaskSpec(
            "wnli",
            "WNLI",
            _BINARY,
            ("accuracy",),
            "accuracy",
            _standard_files(),
            ("dev",),
            {"test": "WNLI.tsv"},
        ),
    )
}


_JSONL_FILES = {"train": "train.jsonl", "dev": "val.jsonl", "test": "test.jsonl"}

SUPERGLUE_TASKS: Dict[str, TaskSpec] = {
    "boolq": TaskSpec(
        "boolq",
        "BoolQ",
        ("false", "true"),
        ("accuracy",),
        "accuracy",
        dict(_JSONL_FILES),
        ("dev",),
        {"test": "BoolQ.jsonl"},
        benchmark="superglue",
    ),
    "multirc": TaskSpec(
        "multirc",
        "MultiRC",
        ("0", "1"),
        ("f1a", "exact_match"),
        "f1a",
        dict(_JSONL_FILES),
        ("dev",),
        {"test": "MultiRC.jsonl"},
        benchmark="superglue",
    ),
}


# Every task `get_task` knows, by canonical name.
TASKS: Dict[str, TaskSpec] = {**GLUE_TASKS, **SUPERGLUE_TASKS}


def canonical_task_name(name: str) -> str:
  """ "SST-2", "sst_2", "STS-B" → "sst2", "stsb"."""
  return name.strip().lower().replace("-", "").replace("_", "")


def get_task(name: str) -> TaskSpec:
  """The TaskSpec of a GLUE or SuperGLUE task (case, '-' and '_' are ignored)."""
  key = canonical_task_name(name)
  if key not in TASKS:
    raise InputError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
  return TASKS[key]
