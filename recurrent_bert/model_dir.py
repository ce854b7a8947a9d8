"""The model_dir contract: every file name the package writes, and their small readers.

One module spells these names; everything else imports them. It imports no TensorFlow
(reports and the demo read run folders without it): paths with a scheme (gs://, ram://)
are opened through `tf.io.gfile`, imported on first use; local paths with `open`.

A pretraining model_dir (`python -m recurrent_bert.pretrain`):

  model_config.json       the encoder's ModelConfig            written at start
  vocab.txt               copy of --vocab_file (a SentencePiece model: sentencepiece.model)
  tokenizer.json          {"type", "vocab_file", "do_lower_case"}   written at start
  checkpoint, ckpt-N.*    training checkpoints (model by variable path, optimizer, step);
                          a run under JAX writes ckpt-N.state/ folders instead
                          (model.weights.h5 + state.npz: `saving/training_state.py`)
  train/                  TensorBoard events
  metrics.jsonl           one JSON line per step: {"step", "loss", ...}; with held-out
                          evaluation also {"step", "eval/mlm_loss", ...} after the
                          checkpoint of each evaluated step
  eval/, eval_results.json  held-out evaluation (--eval_input_files): TensorBoard events,
                          and the latest results {"global_step", "checkpoint", "eval": {...}}
  encoder/                the final export: encoder.index / .data-* (not under JAX),
                          encoder.weights.h5 (the same weights, readable without
                          TensorFlow: `weights_file`), model_config.json, vocab.txt,
                          tokenizer.json, export_info.json

A converted model dir (`rbert-convert-checkpoint`): model_config.json, vocab.txt,
tokenizer.json, pretrainer.index / .data-* (encoder + MLM/NSP heads), pretrainer.weights.h5
(the same weights for every backend), encoder/ (as above), conversion_report.json (its
"new" lists what the import initialised: such a head is never exported as trained).

A fine-tuning model_dir (`finetune_glue`, `finetune_squad`): model_config.json,
task_info.json, vocab.txt (or sentencepiece.model), tokenizer.json, training checkpoints,
best/ (the best checkpoint with model.weights.h5 (the whole task model's weights, readable
without TensorFlow: `weights_file`), model_config.json, task_info.json, vocab.txt,
tokenizer.json, best_metrics.json), train/ and eval/ (TensorBoard), metrics.jsonl,
eval_results.json, predictions/, features/ (TFRecord caches), skipped_rows.json
(--skip_bad_rows), .scratch/ (per-worker scratch space).

A SavedModel export (`python -m recurrent_bert.export`): saved_model.pb, variables/,
assets/vocab.txt.

A sweep dir (`rbert-sweep`): results.csv, summary.md, summary.csv, lr_sweep.png and
runs/<model>/<task>/lr<rate>_seed<seed>/ (fine-tuning model_dirs).

Every directory above except the SavedModel is accepted wherever a model is expected
(`--init_checkpoint`, `export --model_dir`, sweeps), on every backend: `saving.open_model`
is the one reader (`saving/locate.py` says how each is read). A .weights.h5 file is read
wherever one holds the weights (no TensorFlow needed); TensorFlow's training checkpoints
(ckpt-N) have none, so their heads need TensorFlow.
"""

import dataclasses
import json
import os
import re
from typing import Any, Optional, Sequence

MODEL_CONFIG_FILE = "model_config.json"
VOCAB_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"
CHECKPOINT_STATE_FILE = "checkpoint"
# The JAX loop's training checkpoints (`saving/training_state.py`), beside or instead of
# TensorFlow's ckpt-N files.
PORTABLE_CHECKPOINT_FORMAT = "ckpt-{step}.state"
PORTABLE_CHECKPOINT_NAME = re.compile(r"^ckpt-(\d+)\.state$")  # group 1: the step
# In each: the step, the optimizer's and the dropout generators' state (model.weights.h5
# beside it holds the weights); a folder without it is incomplete.
PORTABLE_STATE_FILE = "state.npz"
METRICS_LOG_FILE = "metrics.jsonl"
# Keys of evaluation rows in metrics.jsonl start with this.
EVAL_METRICS_PREFIX = "eval/"
TRAIN_EVENTS_DIR = "train"
EVAL_EVENTS_DIR = "eval"
# Encoder export inside a pretraining or converted dir.
EXPORT_DIR = "encoder"
EXPORT_PREFIX = "encoder"
EXPORT_INFO_FILE = "export_info.json"
# The portable weights (HDF5 by variable path, `weights_file`): the encoder export's, and
# the whole task model's in a fine-tuning best/.
EXPORT_WEIGHTS_FILE = "encoder.weights.h5"
MODEL_WEIGHTS_FILE = "model.weights.h5"
# Converted dirs.
PRETRAINER_PREFIX = "pretrainer"
PRETRAINER_WEIGHTS_FILE = "pretrainer.weights.h5"  # the same weights, for every backend
CONVERSION_REPORT_FILE = "conversion_report.json"
# Fine-tuning dirs.
TASK_INFO_FILE = "task_info.json"
BEST_DIR = "best"
BEST_METRICS_FILE = "best_metrics.json"
EVAL_RESULTS_FILE = "eval_results.json"
PREDICTIONS_DIR = "predictions"
# {file (or TFDS source): rows skipped} of a --skip_bad_rows run.
SKIPPED_ROWS_FILE = "skipped_rows.json"
FEATURES_DIR = "features"
SCRATCH_DIR = ".scratch"
# SavedModel exports.
SAVED_MODEL_FILE = "saved_model.pb"
# Sweep dirs.
SWEEP_RESULTS_FILE = "results.csv"
SWEEP_SUMMARY_MD = "summary.md"
SWEEP_SUMMARY_CSV = "summary.csv"
SWEEP_PLOT = "lr_sweep.png"
SWEEP_RUNS_DIR = "runs"

WORDPIECE = "wordpiece"
SENTENCEPIECE = "sentencepiece"
# Where a model dir keeps a SentencePiece model (in place of vocab.txt; tokenizer.json names it).
SENTENCEPIECE_MODEL_FILE = "sentencepiece.model"


def has_scheme(path) -> bool:
  """True for gs://, ram://, hdfs://...: paths only TensorFlow's file systems reach."""
  return "://" in os.fspath(path)


def gfile():
  """tf.io.gfile, imported on first use (this module must load without TensorFlow)."""
  import tensorflow as tf

  return tf.io.gfile


def exists(path: str) -> bool:
  return gfile().exists(path) if has_scheme(path) else os.path.exists(path)


def isdir(path: str) -> bool:
  return gfile().isdir(path) if has_scheme(path) else os.path.isdir(path)


def listdir(path: str) -> list:
  return gfile().listdir(path) if has_scheme(path) else os.listdir(path)


def isfile(path: str) -> bool:
  if has_scheme(path):
    return gfile().exists(path) and not gfile().isdir(path)
  return os.path.isfile(path)


def read_text(path: str) -> str:
  if has_scheme(path):
    with gfile().GFile(path, "r") as f:
      return f.read()
  with open(path, encoding="utf-8") as f:
    return f.read()


def read_json(path: str) -> Any:
  """The parsed JSON file; ValueError naming the file when it is not JSON."""
  try:
    return json.loads(read_text(path))
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{path}: not a valid JSON file ({e})") from None


def read_json_if_exists(path: str) -> Optional[Any]:
  return read_json(path) if exists(path) else None


@dataclasses.dataclass(frozen=True)
class TokenizerInfo:
  """tokenizer.json: how text becomes the ids a model was trained on.

  Attributes:
    type: WORDPIECE or SENTENCEPIECE (`data.vocab.vocab_kind` of the vocabulary).
    do_lower_case: the tokenizer's casing.
    vocab_file: the vocabulary's file name, relative to the directory.
  """

  type: str = WORDPIECE
  do_lower_case: bool = True
  vocab_file: str = VOCAB_FILE

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"


def read_tokenizer_info(directory: str) -> Optional[TokenizerInfo]:
  """The directory's recorded tokenizer; None when it records none.

  Dirs written before tokenizer.json existed record the casing in export_info.json
  (encoder exports) or task_info.json (fine-tuning dirs); those are read too.
  """
  recorded = read_json_if_exists(os.path.join(directory, TOKENIZER_FILE))
  if recorded is not None:
    try:
      return TokenizerInfo(**recorded)
    except TypeError as e:
      raise ValueError(f"{os.path.join(directory, TOKENIZER_FILE)}: {e}") from None
  for legacy in (EXPORT_INFO_FILE, TASK_INFO_FILE):
    values = read_json_if_exists(os.path.join(directory, legacy))
    if values is not None and values.get("do_lower_case") is not None:
      return TokenizerInfo(do_lower_case=bool(values["do_lower_case"]))
  return None


@dataclasses.dataclass(frozen=True)
class TaskInfo:
  """task_info.json: what rebuilds, re-evaluates and serves a fine-tuned model.

  Attributes:
    task: task name ("mrpc", "squad", "custom", ...).
    kind: "classifier" (K >= 2 labels), "regressor" (K = 1), "span", "tagger" (a label
      per word) or "multiple_choice" (a score per choice): an entry of the registry in
      recurrent_bert/models/task_kinds.py.
    label_names: the K label names of a classifier or tagger (empty otherwise).
    use_blstm_decoder: span models: the "+ BLSTM decoder" head.
    do_lower_case: the tokenizer's casing.
    max_seq_length: T of the training features.
    main_metric: the metric that picks the best checkpoint (higher is better).
    max_query_length, max_answer_length: span models: question pieces kept, longest
      answer in pieces.
    doc_stride: span and tagging models: pieces between the starts of context windows.
    document_context: taggers: windows were filled with the sentence's document.
    text_pair: sentence-pair task (the default serving signature takes two texts).
    layer_mix: which encoder layers the head reads (`layers.LAYER_MIXES`).
    feature_based: the encoder was frozen and read through a BiLSTM (BERT Table 7).
  """

  task: str
  kind: str
  label_names: Sequence[str] = ()
  use_blstm_decoder: bool = False
  do_lower_case: bool = True
  max_seq_length: int = 128
  main_metric: str = "accuracy"
  max_query_length: int = 64
  max_answer_length: int = 30
  doc_stride: int = 128
  document_context: bool = True
  text_pair: bool = False
  layer_mix: str = "last"
  feature_based: bool = False

  def to_json(self) -> str:
    return (
        json.dumps(
            {**dataclasses.asdict(self), "label_names": list(self.label_names)},
            indent=2,
            sort_keys=True,
        )
        + "\n"
    )

  @classmethod
  def read(cls, directory: str) -> "TaskInfo":
    path = os.path.join(directory, TASK_INFO_FILE)
    values = read_json(path)
    values["label_names"] = tuple(values.get("label_names", ()))
    try:
      return cls(**values)
    except TypeError as e:
      raise ValueError(f"{path}: {e}") from None


def is_finetuning_dir(path: str) -> bool:
  return exists(os.path.join(path.rstrip("/"), TASK_INFO_FILE))


def is_saved_model(path: str) -> bool:
  return exists(os.path.join(path.rstrip("/"), SAVED_MODEL_FILE))


def read_eval_results(model_dir: str) -> Optional[dict]:
  """A fine-tuning dir's eval_results.json, or None before its first evaluation."""
  return read_json_if_exists(os.path.join(model_dir, EVAL_RESULTS_FILE))


def read_best_metrics(model_dir: str) -> Optional[dict]:
  """best/best_metrics.json of a fine-tuning dir: the best checkpoint's evaluation."""
  return read_json_if_exists(os.path.join(model_dir, BEST_DIR, BEST_METRICS_FILE))
