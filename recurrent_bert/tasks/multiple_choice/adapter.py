"""Multiple choice (SWAG, BERT §4.4) for the fine-tuning loop.

`choice_source` says where a task's `ChoiceExample`s come from (the SWAG folder, JSONL
files, or HellaSwag from TFDS, which has no SWAG builder); `MultipleChoiceAdapter` packs every
choice as `[CLS] context [SEP] ending [SEP]` (pair_features.py, truncated longest first),
trains `models.MultipleChoice` with a softmax cross-entropy over the C choice scores,
scores dev splits by accuracy and writes predictions/<split>_predictions.jsonl: one
{"id", "prediction" (the chosen ending's index), "probabilities" [C]} per example, in
file order. (The SWAG leaderboard took a model in a docker image rather than a file
format, so test predictions use the same JSONL.)
"""

import dataclasses
import json
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from recurrent_bert import model_dir as layout
from recurrent_bert.data import feature_cache
from recurrent_bert.data import tokenization
from recurrent_bert.data.feature_cache import Features
from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import InputError
from recurrent_bert.io_utils import atomic_write_text
from recurrent_bert.model_dir import TaskInfo
from recurrent_bert.tasks import pair_features
from recurrent_bert.tasks.multiple_choice import swag
from recurrent_bert.tasks.multiple_choice import tfds_reader
from recurrent_bert.tasks.multiple_choice.swag import ChoiceExample
from recurrent_bert.tasks.pair_features import PairExample
from recurrent_bert.training import objectives
from recurrent_bert.training.task_adapter import TaskAdapter

TASKS = ("swag", "jsonl", "hellaswag")
_INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")


@dataclasses.dataclass(frozen=True)
class ChoiceSource:
  """Where the examples of a multiple-choice task come from.

  Attributes:
    task: "swag" or "jsonl".
    read_split: split name ("train", "dev", "test") -> `SplitData` of `ChoiceExample`s.
    eval_splits: the labeled splits scored ("dev" when there is one).
    predict_splits: the splits written as prediction files.
  """

  task: str
  read_split: Callable[[str], SplitData]
  eval_splits: Tuple[str, ...]
  predict_splits: Tuple[str, ...]


def choice_source(
    task: str,
    *,
    data_dir: Optional[str] = None,
    files: Optional[Mapping[str, str]] = None,
    use_tfds: bool = False,
    tfds_data_dir: Optional[str] = None,
    tfds_download: bool = False,
    skip_bad_rows: bool = False,
) -> ChoiceSource:
  """The reader of a multiple-choice task.

  Args:
    task: "swag" (the official folder `data_dir`), "jsonl" (`files`) or "hellaswag"
      (TFDS only).
    data_dir: SWAG's folder of train.csv, val.csv (dev) and test.csv.
    files: JSONL: {split: path} for the splits given ("train", "dev", "test").
    use_tfds: read the task from tensorflow-datasets (`tfds_reader.load_tfds_choices`).
    tfds_data_dir, tfds_download: TFDS's data dir (None: its default); let it download.
    skip_bad_rows: the readers skip bad rows (listed in `SplitData.skipped`).

  Returns:
    The ChoiceSource: dev is scored and predicted when present, test predicted.

  Raises:
    InputError: unknown task, or no data to read.
  """
  if task not in TASKS:
    raise InputError(f"--task={task}: choose one of {', '.join(TASKS)}")
  if use_tfds != (task == "hellaswag"):
    raise InputError(
        "TFDS has hellaswag (and no SWAG builder)" if use_tfds else f"{task} is read from TFDS"
    )
  if use_tfds:

    def read_from_tfds(split: str) -> SplitData:
      return tfds_reader.load_tfds_choices(task, split, tfds_data_dir, tfds_download, skip_bad_rows)

    return ChoiceSource(task, read_from_tfds, ("dev",), ("dev", "test"))
  if task == "swag":
    if not data_dir:
      raise InputError("--task=swag reads its folder: give --data_dir (or --tfds)")

    def read_split(split: str) -> SplitData:
      return swag.read_swag(data_dir, split, skip_bad_rows)

    present = {
        split
        for split, name in swag.SWAG_FILES.items()
        if layout.exists(os.path.join(data_dir, name))
    }
  else:
    files = dict(files or {})
    if not files:
      raise InputError("--task=jsonl reads --train_file, --eval_file and/or --predict_file")

    def read_split(split: str) -> SplitData:
      if split not in files:
        raise InputError(f"no file given for the {split} split")
      return swag.read_choice_jsonl(files[split], skip_bad_rows)

    present = set(files)
  return ChoiceSource(
      task,
      read_split,
      ("dev",) if "dev" in present else (),
      tuple(s for s in ("dev", "test") if s in present),
  )


def convert_choice_examples(
    examples: Sequence[ChoiceExample], tokenizer, max_seq_length: int
) -> Features:
  """Packs each choice as [CLS] context [SEP] ending [SEP] (longest first truncation).

  Args:
    examples: N examples with C endings each (the same C for all).
    tokenizer: a `BertWordpieceTokenizer`.
    max_seq_length: T.

  Returns:
    dict of numpy arrays:
      input_ids, input_mask, segment_ids: int32 [N, C, T]
      label_ids: int32 [N] (-1 for unlabeled examples)
      example_index: int32 [N]
      num_truncated_tokens: int32 [N], pieces removed from all C choices together

  Raises:
    ValueError: examples with different numbers of endings.
  """
  counts = {len(e.endings) for e in examples}
  if len(counts) > 1:
    raise ValueError(f"examples have different numbers of endings: {sorted(counts)}")
  num_choices = counts.pop() if counts else 0
  pairs = [
      PairExample(f"{e.guid}-{c}", e.context, ending, None)
      for e in examples
      for c, ending in enumerate(e.endings)
  ]
  packed = pair_features.convert_pair_examples(pairs, tokenizer, max_seq_length)
  shape = (len(examples), num_choices, max_seq_length)
  features = {name: packed[name].reshape(shape) for name in _INPUT_NAMES}
  features["label_ids"] = np.array([-1 if e.label is None else e.label for e in examples], np.int32)
  features["example_index"] = np.arange(len(examples), dtype=np.int32)
  features["num_truncated_tokens"] = (
      packed["num_truncated_tokens"].reshape(shape[:2]).sum(axis=1).astype(np.int32)
  )
  return features


def softmax(logits: np.ndarray) -> np.ndarray:
  """Row-wise softmax of logits [N, C] (float64)."""
  logits = np.asarray(logits, np.float64)
  exp = np.exp(logits - logits.max(-1, keepdims=True))
  return exp / exp.sum(-1, keepdims=True)


def write_choice_predictions(
    output_dir: str, split: str, examples: Sequence[ChoiceExample], logits: np.ndarray
) -> str:
  """Writes <split>_predictions.jsonl ({"id", "prediction", "probabilities"} per example)."""
  if len(examples) != len(logits):
    raise ValueError(f"{len(logits)} predictions for {len(examples)} examples")
  probabilities = softmax(logits)
  lines = [
      json.dumps(
          {
              "id": example.guid,
              "prediction": int(p.argmax()),
              "probabilities": [round(float(x), 6) for x in p],
          },
          ensure_ascii=False,
      )
      for example, p in zip(examples, probabilities)
  ]
  path = os.path.join(output_dir, f"{split}_predictions.jsonl")
  atomic_write_text(path, "".join(line + "\n" for line in lines))
  return path


class MultipleChoiceAdapter(TaskAdapter):
  """A multiple-choice task, for the `Finetuner`.

  Features are those of `convert_choice_examples`; the model's "logits" are [N, C].

  Args:
    source: the `ChoiceSource`.
    tokenizer: a `BertWordpieceTokenizer`; its vocabulary file and casing key the caches.
    max_seq_length: T of the packed choices.
    cache_dir: where the feature caches go.
    predict_splits: the splits written as prediction files (default: the source's).

  Attributes:
    skipped_rows: {file (or TFDS source): rows skipped} of every split read so far.
  """

  def __init__(
      self,
      source: ChoiceSource,
      tokenizer,
      max_seq_length: int,
      cache_dir: str,
      predict_splits: Optional[Sequence[str]] = None,
  ):
    super().__init__(
        cache_dir,
        [
            feature_cache.file_fingerprint(tokenizer.vocab_file),
            tokenizer.do_lower_case,
            tokenization.WORD_BOUNDARY_RULES,
            max_seq_length,
            "multiple_choice",
        ],
    )
    self._source = source
    self._tokenizer = tokenizer
    self._max_seq_length = max_seq_length
    self.info = TaskInfo(
        task=source.task,
        kind="multiple_choice",
        do_lower_case=tokenizer.do_lower_case,
        max_seq_length=max_seq_length,
        main_metric="accuracy",
    )
    # logits [B, C] are scored like a classifier's over C classes.
    self.objective = objectives.ClassificationObjective()
    self.output_keys = ("logits",)
    self.eval_splits = tuple(source.eval_splits)
    self.predict_splits = tuple(source.predict_splits if predict_splits is None else predict_splits)
    self.skipped_rows: Dict[str, int] = {}

  def read_split(self, split: str) -> SplitData:
    data = self._source.read_split(split)
    self.skipped_rows[data.source] = len(data.skipped)
    return data

  def convert(self, examples: Sequence[ChoiceExample]) -> Features:
    return convert_choice_examples(examples, self._tokenizer, self._max_seq_length)

  def evaluate(self, split: str, outputs: Dict[str, np.ndarray]) -> Dict[str, float]:
    examples = self.examples(split)
    if any(e.label is None for e in examples):
      raise InputError(f"{self._source.task} {split}: unlabeled examples cannot be scored")
    labels = np.array([e.label for e in examples])
    predicted = outputs["logits"].argmax(axis=-1)
    return {"accuracy": float(np.mean(predicted == labels)), "num_examples": len(examples)}

  def write_predictions(
      self, split: str, outputs: Dict[str, np.ndarray], output_dir: str
  ) -> List[str]:
    return [write_choice_predictions(output_dir, split, self.examples(split), outputs["logits"])]
