"""The same tasks through tensorflow-datasets (`glue/*`, `super_glue/*`, `squad/*`,
`conll2003`).

Data must already be prepared in a TFDS data dir (`tfds build glue/mrpc --data_dir=...`
on a machine with network access, then copy the directory). Loading uses
download=False unless asked otherwise: offline, a download attempt spends minutes in
network retries before failing. A missing dataset raises an `InputError` that says how
to prepare it.

Examples come out as the file readers produce them (`PairExample`, `SquadExample`) with
the same label names, so features, metrics and prediction writers do not care where the
data came from. TFDS marks unlabeled (test) examples with label -1; they get label None.
Records are checked as the file readers check rows: an STS-B score that is not finite or
outside 0..5, or an idx that repeats an earlier record's, is an `InputError` naming the
record ("tfds:glue/stsb/train: record 12: ..."), or with `skip_bad_rows` is skipped and
listed in `SplitData.skipped`.

CoNLL-2003 comes as `conll.TaggedSentence`s with TFDS's IOB2 tag names. TFDS drops the
-DOCSTART- lines and stores sentences in its own order, so document boundaries are lost:
each sentence is its own document (document = record number), which gives document-level
features no wrong neighbours.
"""

import dataclasses
import math
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Sequence, Tuple

from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import InputError
from recurrent_bert.errors import at
from recurrent_bert.tasks import conll
from recurrent_bert.tasks import glue
from recurrent_bert.tasks import squad
from recurrent_bert.tasks.pair_features import PairExample
from recurrent_bert.tasks.registry import TaskSpec
from recurrent_bert.tasks.registry import get_task
from recurrent_bert.tasks.squad import SquadAnswer
from recurrent_bert.tasks.squad import SquadExample

# TFDS's label of an unlabeled (test) example.
_UNLABELED = -1

# Our split names → TFDS's.
_TFDS_SPLITS = {
    "train": "train",
    "dev": "validation",
    "test": "test",
    "dev_matched": "validation_matched",
    "dev_mismatched": "validation_mismatched",
    "test_matched": "test_matched",
    "test_mismatched": "test_mismatched",
}


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
SQUAD_TFDS_NAMES = {"1.1": "squad/v1.1", "2.0": "squad/v2.0"}
CONLL2003_TFDS_NAME = "conll2003"
# conll2003 names its dev split "dev", not "validation".
_CONLL2003_SPLITS = {"train": "train", "dev": "dev", "test": "test"}


def _text(value: Any) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _load_numpy(
    name: str,
    split: str,
    data_dir: Optional[str],
    download: bool,
    splits: Mapping[str, str] = _TFDS_SPLITS,
) -> Tuple[Iterator[Dict[str, Any]], Any]:
  """tfds.load as numpy dicts, with an actionable error when the data is not prepared.

  `splits` maps our split names to the dataset's.
  """
  import tensorflow_datasets as tfds

  if split not in splits:
    raise InputError(f"unknown split {split!r}; use one of {', '.join(splits)}")
  tfds_split = splits[split]
  try:
    dataset, info = tfds.load(
        name, split=tfds_split, data_dir=data_dir, download=download, with_info=True
    )
  except AssertionError as e:  # what TFDS raises for "no prepared data" (4.9)
    where = data_dir or "the default TFDS data dir (~/tensorflow_datasets or $TFDS_DATA_DIR)"
    raise InputError(
        f"TFDS dataset {name} (split {tfds_split}) is not prepared in {where}. Prepare it "
        f"on a machine with network access: `tfds build {name} "
        f"--data_dir={data_dir or '~/tensorflow_datasets'}` (some GLUE/SuperGLUE/SQuAD "
        f"sources need manual steps, see the TFDS catalog page of {name}), then copy the "
        f"directory here; or let TFDS download it (--tfds_download). TFDS said: {e}"
    ) from None
  return tfds.as_numpy(dataset), info


def _label_names(spec: TaskSpec, info) -> Callable[[int], Optional[str]]:
  """TFDS label id → our label name (None for -1, TFDS's "unlabeled")."""
  names = list(info.features["label"].names)
  ours = list(spec.label_list)
  # Tasks whose files use names (MNLI, QNLI, RTE, BoolQ) are matched by name, since TFDS
  # orders them differently; tasks whose files use 0/1 keep TFDS's ids as the names.
  by_name = sorted(n.lower() for n in names) == sorted(ours)

  def convert(label_id: int) -> Optional[str]:
    if label_id == _UNLABELED:
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
  records, info = _load_numpy(source.name, split, data_dir, download)
  result = SplitData(examples=[], source=f"tfds:{source.name}/{_TFDS_SPLITS[split]}")
  bad_rows = glue.BadRows(result, skip_bad_rows)
  label_of = None if spec.is_regression else _label_names(spec, info)
  first_record_of_index: Dict[Any, int] = {}
  for n, record in enumerate(records):
    place = at(result.source, record=n + 1)
    if spec.is_regression:
      score = float(record["label"])
      problem = None if score == _UNLABELED else _score_problem(spec, score)
      if problem is not None:
        bad_rows.refuse(place, problem)
        continue
      label = None if score == _UNLABELED else score
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
              text_a=_text(record["paragraph"]),
              text_b=f"{_text(record['question'])} {_text(record['answer'])}",
              label=label,
              index=index,
              group=f"{index[0]}-{index[1]}",
          )
      )
      continue
    result.examples.append(
        PairExample(
            guid=f"{spec.name}-{split}-{n}",
            text_a=_text(record[source.text_a]),
            text_b=None if source.text_b is None else _text(record[source.text_b]),
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


def load_tfds_squad(
    version: str, split: str, data_dir: Optional[str] = None, download: bool = False
) -> SplitData:
  """Loads SQuAD v1.1 or v2.0 ("train" or "dev") from TFDS as `SquadExample`s.

  Answers whose text is blank (no word for the tokenizer) or not at their answer_start in
  the context cannot be used for training targets; they are dropped and reported in
  `SplitData.skipped` (the official data has none; TFDS's mock data is random).
  """
  if version not in SQUAD_TFDS_NAMES:
    raise InputError(f"SQuAD version must be one of {', '.join(SQUAD_TFDS_NAMES)}, got {version!r}")
  name = SQUAD_TFDS_NAMES[version]
  records, _ = _load_numpy(name, split, data_dir, download)
  result = SplitData(examples=[], source=f"tfds:{name}/{_TFDS_SPLITS.get(split, split)}")
  blank = squad.blank_texts_of([_text(t) for r in records for t in r["answers"]["text"]])
  for record in records:
    qas_id, context = _text(record["id"]), _text(record["context"])
    answers = []
    for text, start in zip(record["answers"]["text"], record["answers"]["answer_start"]):
      text, start = _text(text), int(start)
      if text in blank:
        result.skipped.append(f"{result.source} question {qas_id}: answer {text!r} is blank")
        continue
      if start < 0 or context[start : start + len(text)] != text:
        result.skipped.append(
            f"{result.source} question {qas_id}: answer {text!r} is not at answer_start {start}"
        )
        continue
      answers.append(SquadAnswer(text, start))
    is_impossible = bool(record.get("is_impossible", False))
    result.examples.append(
        SquadExample(
            qas_id=qas_id,
            question=_text(record["question"]),
            context=context,
            answers=() if is_impossible else tuple(answers),
            is_impossible=is_impossible,
            title=_text(record.get("title", b"")),
        )
    )
  return result  # the caller reports `skipped` (TaskAdapter.examples), once


def load_tfds_conll2003(
    split: str,
    data_dir: Optional[str] = None,
    download: bool = False,
    label_list: Optional[Sequence[str]] = None,
    skip_bad_rows: bool = False,
) -> SplitData:
  """Loads CoNLL-2003 ("train", "dev" or "test") from TFDS as `conll.TaggedSentence`s.

  Args:
    split: "train", "dev" or "test".
    data_dir: TFDS data dir; None = TFDS's default.
    download: let TFDS download and prepare missing data (needs network).
    label_list: the allowed tags (None: any well-formed tag); TFDS's are
      `conll.CONLL2003_TAGS` (IOB2).
    skip_bad_rows: skip bad records (listed in `SplitData.skipped`) instead of refusing them.

  Returns:
    SplitData of TaggedSentences; guid "tfds:conll2003/<split>:<record number>", document
    the record number (module docstring). Empty records (TFDS writes one after a file's
    final blank line) are passed over.

  Raises:
    InputError: unknown split, data not prepared (with how to prepare it), a record with a
      tag not in `label_list` or an empty word unless skipped, or no sentence.
  """
  labels = None if label_list is None else conll.check_label_list(label_list)
  records, info = _load_numpy(CONLL2003_TFDS_NAME, split, data_dir, download, _CONLL2003_SPLITS)
  tag_names = list(info.features["ner"].feature.names)
  result = SplitData(examples=[], source=f"tfds:{CONLL2003_TFDS_NAME}/{_CONLL2003_SPLITS[split]}")
  bad_rows = glue.BadRows(result, skip_bad_rows)
  for n, record in enumerate(records):
    words = tuple(_text(word) for word in record["tokens"])
    tags = tuple(tag_names[int(tag_id)] for tag_id in record["ner"])
    if not words:
      continue
    problems = ["empty word" for word in words if not word]
    problems += [conll.tag_problem(tag, labels) for tag in tags]
    if len(tags) != len(words):
      problems.append(f"{len(words)} tokens but {len(tags)} ner tags")
    problem = next((p for p in problems if p is not None), None)
    if problem is not None:
      bad_rows.refuse(at(result.source, record=n + 1), problem)
      continue
    result.examples.append(
        conll.TaggedSentence(words, tags, document=n, guid=f"{result.source}:{n + 1}")
    )
  bad_rows.check_not_empty()
  return result


# Multiple-choice sets in TFDS: our task name -> TFDS name. TFDS has no SWAG builder;
# HellaSwag (SWAG's successor: a context and four endings) has one.
CHOICE_TFDS_NAMES = {"hellaswag": "hellaswag"}


def load_tfds_choices(
    task: str,
    split: str,
    data_dir: Optional[str] = None,
    download: bool = False,
    skip_bad_rows: bool = False,
) -> SplitData:
  """Loads a multiple-choice split ("train", "dev", "test") from TFDS as `ChoiceExample`s.

  A record's `context` is the first segment and each of its `endings` a second one; the
  guid is the record's number in the split (HellaSwag has no unique id field), label -1
  (TFDS's unlabeled test examples) becomes None. Records are checked as the JSONL reader
  checks lines: the same number of endings C >= 2 in every record, a label in [0, C), no
  empty context or ending; a bad record is an `InputError` naming it ("tfds:hellaswag/
  validation: record 3: ...") or with `skip_bad_rows` is skipped and listed.
  """
  from recurrent_bert.tasks.swag import ChoiceExample

  if task not in CHOICE_TFDS_NAMES:
    raise InputError(f"no TFDS source for {task!r}; TFDS has {', '.join(CHOICE_TFDS_NAMES)}")
  name = CHOICE_TFDS_NAMES[task]
  records, _ = _load_numpy(name, split, data_dir, download)
  result = SplitData(examples=[], source=f"tfds:{name}/{_TFDS_SPLITS[split]}")
  bad_rows = glue.BadRows(result, skip_bad_rows)
  num_choices = None
  for n, record in enumerate(records):
    context = _text(record["context"])
    endings = tuple(_text(e) for e in record["endings"])
    label = int(record["label"])
    problem = None
    if len(endings) < 2 or len(endings) != (num_choices or len(endings)):
      problem = f"{len(endings)} endings; every record needs the same number >= 2"
      if num_choices:
        problem += f" ({num_choices}, as the first)"
    elif label != _UNLABELED and not 0 <= label < len(endings):
      problem = f"label {label} is not one of 0..{len(endings) - 1}"
    elif not context.strip() or not all(e.strip() for e in endings):
      problem = "empty context or ending"
    if problem is not None:
      bad_rows.refuse(at(result.source, record=n + 1), problem)
      continue
    num_choices = len(endings)
    result.examples.append(
        ChoiceExample(str(n), context, endings, None if label == _UNLABELED else label)
    )
  bad_rows.check_not_empty()
  return result
