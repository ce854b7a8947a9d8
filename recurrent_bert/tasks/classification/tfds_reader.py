"""GLUE and SuperGLUE (BoolQ, MultiRC) through tensorflow-datasets (`glue/*`, `super_glue/*`).

Examples come out as `glue.read_glue` / `superglue.read_superglue` make them (`PairExample`,
the same label names); TFDS marks unlabeled (test) examples with label -1, which become
label None. An STS-B score that is not finite or outside 0..5, or an idx that repeats an
earlier record's, is a bad record (tasks/tfds_source.py says what happens to one).
"""

import dataclasses
import math
from typing import Any, Callable, Dict, Optional

from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import at
from recurrent_bert.tasks import tfds_source
from recurrent_bert.tasks.classification.registry import TaskSpec
from recurrent_bert.tasks.classification.registry import get_task
from recurrent_bert.tasks.pair_features import PairExample
from recurrent_bert.tasks.text_rows import BadRows


@dataclasses.dataclass(frozen=True)
class _TfdsSource:
  name: str  # TFDS name, e.g. "glue/mnli"
  text_a: str  # feature holding the first segment
  text_b: Optional[str] = None  # feature holding the second segment


TFDS_SOURCES: Dict[str, _TfdsSource] = {
    "cola": _TfdsSource("glue/cola", "sentence"),
    "sst2": _TfdsSource("glue/sst2", "sentence"),
    "mrpc": _TfdsSource("glue/mrpc", "sentence1", "sentence2"),
    "stsb": _TfdsSource("glue/stsb", "sentence1", "sentence2"),
    "qqp": _TfdsSource("glue/qqp", "question1", "question2"),
    "mnli": _TfdsSource("glue/mnli", "premise", "hypothesis"),
    "qnli": _TfdsSource("glue/qnli", "question", "sentence"),
    "rte": _TfdsSource("glue/rte", "sentence1", "sentence2"),
    "wnli": _TfdsSource("glue/wnli", "sentence1", "sentence2"),
    "boolq": _TfdsSource("super_glue/boolq", "question", "passage"),
    # text_b of MultiRC is built from question and answer (see superglue.py).
    "multirc": _TfdsSource("super_glue/multirc", "paragraph"),
}


def _label_names(spec: TaskSpec, info) -> Callable[[int], Optional[str]]:
  """TFDS label id → our label name (None for -1, TFDS's "unlabeled")."""
  names = list(info.features["label"].names)
  ours = list(spec.label_list)
  # Tasks whose files use names (MNLI, QNLI, RTE, BoolQ) are matched by name, since TFDS
  # orders them differently; tasks whose files use 0/1 keep TFDS's ids as the names.
  by_name = sorted(n.lower() for n in names) == sorted(ours)

  def convert(label_id: int) -> Optional[str]:
    if label_id == tfds_source.UNLABELED:
      return None
    return names[label_id].lower() if by_name else ours[label_id]

  return convert


def load_tfds_task(
    task: str,
    split: str,
    data_dir: Optional[str] = None,
    download: bool = False,
    skip_bad_rows: bool = False,
) -> SplitData:
  """Loads a GLUE or SuperGLUE (BoolQ, MultiRC) split from TFDS.

  Args:
    task: a task name of `registry.get_task` ("mnli", "boolq", ...).
    split: "train", "dev", "test" (MNLI: "dev_matched", "test_mismatched", ...).
    data_dir: TFDS data dir; None = TFDS's default.
    download: let TFDS download and prepare missing data (needs network).
    skip_bad_rows: skip bad records (listed in `SplitData.skipped`) instead of refusing them.

  Returns:
    SplitData of `PairExample`s, as `glue.read_glue` / `superglue.read_superglue` make
    them; `index` is TFDS's idx (the leaderboard index).

  Raises:
    InputError: unknown task or split, data not prepared (with how to prepare it), a bad
      record (module docstring) unless skipped, or no example.
  """
  spec = get_task(task)
  source = TFDS_SOURCES[spec.name]
  records, info = tfds_source.load_numpy(source.name, split, data_dir, download)
  result = SplitData(examples=[], source=f"tfds:{source.name}/{tfds_source.TFDS_SPLITS[split]}")
  bad_rows = BadRows(result, skip_bad_rows)
  label_of = None if spec.is_regression else _label_names(spec, info)
  first_record_of_index: Dict[Any, int] = {}
  for n, record in enumerate(records):
    place = at(result.source, record=n + 1)
    if spec.is_regression:
      score = float(record["label"])
      problem = None if score == tfds_source.UNLABELED else _score_problem(spec, score)
      if problem is not None:
        bad_rows.refuse(place, problem)
        continue
      label = None if score == tfds_source.UNLABELED else score
    else:
      label = label_of(record["label"])
    if spec.name == "multirc":
      idx = record["idx"]
      index = (int(idx["paragraph"]), int(idx["question"]), int(idx["answer"]))
    else:
      index = int(record["idx"])
    if index in first_record_of_index:
      bad_rows.refuse(
          place, f"idx {index} repeats record {first_record_of_index[index]}; ids must be unique"
      )
      continue
    first_record_of_index[index] = n + 1
    if spec.name == "multirc":
      result.examples.append(
          PairExample(
              guid=f"multirc-{split}-{index[0]}-{index[1]}-{index[2]}",
              text_a=tfds_source.text(record["paragraph"]),
              text_b=f"{tfds_source.text(record['question'])} {tfds_source.text(record['answer'])}",
              label=label,
              index=index,
              group=f"{index[0]}-{index[1]}",
          )
      )
      continue
    result.examples.append(
        PairExample(
            guid=f"{spec.name}-{split}-{n}",
            text_a=tfds_source.text(record[source.text_a]),
            text_b=None if source.text_b is None else tfds_source.text(record[source.text_b]),
            label=label,
            index=index,
        )
    )
  bad_rows.check_not_empty()
  return result


def _score_problem(spec: TaskSpec, score: float) -> Optional[str]:
  """Why a regression label is unusable (not finite, outside the task's range), or None."""
  low, high = spec.score_range or (-math.inf, math.inf)
  if math.isfinite(score) and low <= score <= high:
    return None
  return f"score {score} is not a number from {low:g} to {high:g}"
