"""Where training writes its state, and how any model dir the package wrote is read back.

File names and layouts: `recurrent_bert/model_dir.py` (the contract). `resolve_model(path)`
is the one place that turns a path into weights, config and tokenizer, for every kind of
directory the package writes: a pretraining model_dir, its `encoder/` export, a
`rbert-convert-checkpoint` output, a fine-tuning model_dir (its best/ checkpoint), or a
checkpoint prefix (`.../ckpt-N`). `--init_checkpoint`, `export --model_dir` and sweeps all
go through it.
"""

import dataclasses
import os
from typing import Optional, Tuple

import tensorflow as tf

from recurrent_bert import model_dir as layout
from recurrent_bert import weights_file
from recurrent_bert.config import ModelConfig
from recurrent_bert.training import portable_checkpoints
from recurrent_bert.training.portable_checkpoints import write_model_config  # noqa: F401
from recurrent_bert.training.portable_checkpoints import write_tokenizer_files  # noqa: F401
from recurrent_bert.weights_file import variables_by_path

# Re-exported for callers that name them through this module.
MODEL_CONFIG_FILE = layout.MODEL_CONFIG_FILE
EXPORT_DIR = layout.EXPORT_DIR
EXPORT_PREFIX = layout.EXPORT_PREFIX


class CheckpointNotFoundError(FileNotFoundError):
  """No encoder export or training checkpoint at the given path."""


def _is_checkpoint_prefix(path: str) -> bool:
  return tf.io.gfile.exists(path + ".index")


@dataclasses.dataclass(frozen=True)
class ModelSource:
  """What a path given as a model resolves to.

  Attributes:
    kind: what the path is, in words ("pretraining model_dir", "encoder export",
      "converted model dir", "fine-tuning model_dir", "checkpoint prefix").
    prefix: the checkpoint prefix holding the weights.
    config_dir: the directory holding model_config.json.
    is_export: the checkpoint holds the encoder alone, keyed "encoder" (else a whole
      model, keyed "model": Pretrainer or task model).
    vocab_file: the recorded vocabulary, or None.
    do_lower_case: the recorded casing, or None.
  """

  kind: str
  prefix: str
  config_dir: str
  is_export: bool
  vocab_file: Optional[str] = None
  do_lower_case: Optional[bool] = None


def _with_tokenizer(source: ModelSource, search: Tuple[str, ...]) -> ModelSource:
  """Fills the vocabulary and casing from the first of `search` that records them."""
  vocab_file = do_lower_case = None
  for directory in search:
    info = layout.read_tokenizer_info(directory)
    if vocab_file is None:
      name = info.vocab_file if info else layout.VOCAB_FILE
      if layout.isfile(os.path.join(directory, name)):
        vocab_file = os.path.join(directory, name)
    if do_lower_case is None and info is not None:
      do_lower_case = info.do_lower_case
  return dataclasses.replace(source, vocab_file=vocab_file, do_lower_case=do_lower_case)


def _checkpoint_kind(directory: str) -> str:
  if layout.is_finetuning_dir(directory):
    return "fine-tuning model_dir"
  return "pretraining model_dir"


def resolve_model(path: str) -> ModelSource:
  """Finds weights, config and tokenizer behind any directory the package writes.

  In order: a checkpoint prefix; an encoder export (`encoder.index` inside); a
  fine-tuning model_dir (its best/ checkpoint, else its latest); a pretraining model_dir
  with training checkpoints (they also hold the heads, which phase 2 wants); a converted
  or finished pretraining dir's `encoder/` export. The vocabulary and casing are looked
  up in the config dir, then the path itself, then its `encoder/`.

  Raises:
    CheckpointNotFoundError: naming `path`, what it is, and what would serve.
  """
  path = path.rstrip("/")
  export_dir = os.path.join(path, layout.EXPORT_DIR)
  if _is_weights_file(path) and layout.isfile(path):
    # A portable weights file (`weights_file`): an Encoder's, a Pretrainer's or a task
    # model's, written under any backend.
    directory = os.path.dirname(path)
    is_export = weights_file.read_attributes(path).get("model") == "Encoder"
    return _with_tokenizer(ModelSource("weights file", path, directory, is_export), (directory,))
  if _is_checkpoint_prefix(path):
    directory = os.path.dirname(path)
    is_export = os.path.basename(path) == layout.EXPORT_PREFIX
    kind = "encoder export" if is_export else "checkpoint prefix"
    search = (
        (directory, os.path.dirname(directory))
        if is_export
        else (directory, os.path.join(directory, layout.EXPORT_DIR))
    )
    return _with_tokenizer(ModelSource(kind, path, directory, is_export), search)
  export_prefix = os.path.join(path, layout.EXPORT_PREFIX)
  if _is_checkpoint_prefix(export_prefix):
    return _with_tokenizer(
        ModelSource("encoder export", export_prefix, path, True), (path, os.path.dirname(path))
    )
  is_dir = tf.io.gfile.isdir(path)
  if is_dir and layout.is_finetuning_dir(path):
    best = os.path.join(path, layout.BEST_DIR)
    latest = tf.train.latest_checkpoint(best) or tf.train.latest_checkpoint(path)
    if latest:
      config_dir = os.path.dirname(latest)
      return _with_tokenizer(
          ModelSource("fine-tuning model_dir", latest, config_dir, False), (config_dir, path)
      )
  latest = tf.train.latest_checkpoint(path) if is_dir else None
  if latest:
    return _with_tokenizer(
        ModelSource(_checkpoint_kind(path), latest, path, False), (path, export_dir)
    )
  state = portable_checkpoints.latest_state(path) if is_dir else None
  if state:  # a JAX run's training checkpoint: its model.weights.h5
    weights = os.path.join(state, layout.MODEL_WEIGHTS_FILE)
    return _with_tokenizer(
        ModelSource("pretraining model_dir", weights, path, False), (path, export_dir)
    )
  nested_export = os.path.join(export_dir, layout.EXPORT_PREFIX)
  if _is_checkpoint_prefix(nested_export):
    kind = (
        "converted model dir"
        if layout.exists(os.path.join(path, layout.CONVERSION_REPORT_FILE))
        else "pretraining model_dir"
    )
    return _with_tokenizer(ModelSource(kind, nested_export, export_dir, True), (export_dir, path))
  for folder, search in ((path, (path, os.path.dirname(path))), (export_dir, (export_dir, path))):
    # An export written under JAX: the weights file alone, no TensorFlow checkpoint.
    weights = os.path.join(folder, layout.EXPORT_WEIGHTS_FILE)
    if layout.exists(os.path.join(folder, layout.EXPORT_INFO_FILE)) and layout.isfile(weights):
      return _with_tokenizer(ModelSource("encoder export", weights, folder, True), search)
  if is_dir and layout.is_saved_model(path):
    raise CheckpointNotFoundError(
        f"{path!r} is a SavedModel export (for serving): give the model dir it was exported from"
    )
  if is_dir and layout.exists(os.path.join(path, MODEL_CONFIG_FILE)):
    raise CheckpointNotFoundError(
        f"{path!r} has a {MODEL_CONFIG_FILE} but no checkpoint yet (a run that has not "
        "saved one): wait for its first checkpoint, or give a checkpoint prefix"
    )
  what = (
      "a directory without checkpoints"
      if is_dir
      else ("not a file or directory" if not layout.exists(path) else "a file, not a checkpoint")
  )
  raise CheckpointNotFoundError(
      f"{path!r} is {what}; a model is a pretraining or fine-tuning model_dir, an "
      "encoder/ export, a rbert-convert-checkpoint output dir, or a checkpoint prefix "
      "(…/ckpt-N)"
  )


def resolve_checkpoint(path: str) -> Tuple[str, str, bool]:
  """(checkpoint prefix, directory holding model_config.json, is_encoder_export).

  Raises:
    CheckpointNotFoundError: naming `path`.
  """
  source = resolve_model(path)
  return source.prefix, source.config_dir, source.is_export


def read_model_config(config_dir: str) -> ModelConfig:
  path = os.path.join(config_dir, MODEL_CONFIG_FILE)
  if not tf.io.gfile.exists(path):
    raise CheckpointNotFoundError(f"no {MODEL_CONFIG_FILE} in {config_dir!r}")
  with tf.io.gfile.GFile(path, "rb") as f:  # bytes: a non-UTF-8 file is named by from_json
    return ModelConfig.from_json(f.read(), source=path)


def _encoder_checkpoint(encoder, is_export: bool) -> tf.train.Checkpoint:
  """A Checkpoint whose object graph puts the encoder's weights where the files do."""
  weights = variables_by_path(encoder)
  # Exports key them under "encoder", training checkpoints (whole Pretrainer) "model".
  return tf.train.Checkpoint(encoder=weights) if is_export else tf.train.Checkpoint(model=weights)


def restore_encoder_weights(encoder, path: str) -> str:
  """Loads encoder weights from an export or a training checkpoint; returns the prefix.

  Every encoder variable must be found in the checkpoint (heads and optimizer state
  in a training checkpoint are ignored).
  """
  prefix, _, is_export = resolve_checkpoint(path)
  if _is_weights_file(prefix):
    weights_file.load_weights(encoder, prefix, encoder_only=True)
    return prefix
  status = _encoder_checkpoint(encoder, is_export).read(prefix)
  status.expect_partial().assert_existing_objects_matched()
  return prefix


def _is_weights_file(prefix: str) -> bool:
  """A source read from a portable weights file (a model dir written under JAX)."""
  return prefix.endswith(".weights.h5")


def load_encoder(path: str, config: Optional[ModelConfig] = None):
  """Builds the Encoder saved at `path` (see the module docstring) and loads its weights.

  Args:
    path: export dir, model_dir or checkpoint prefix.
    config: overrides the saved model_config.json (e.g. a different dropout rate for
      fine-tuning); sizes must match the checkpoint.

  Returns:
    A `recurrent_bert.models.Encoder` with the saved weights.
  """
  from recurrent_bert.models import build_encoder

  prefix, config_dir, _ = resolve_checkpoint(path)
  encoder = build_encoder(config or read_model_config(config_dir))
  restore_encoder_weights(encoder, prefix)
  return encoder


def restore_pretrainer_weights(pretrainer, path: str) -> str:
  """--init_checkpoint: weights only (no optimizer, step or iterator state).

  From a training checkpoint the encoder and the heads present in both are loaded (the
  phase 1 -> phase 2 case); from an encoder export only the encoder (warm start).
  """
  prefix, _, is_export = resolve_checkpoint(path)
  if _is_weights_file(prefix):
    return portable_checkpoints.restore_pretrainer_portable(pretrainer, prefix)
  restore_encoder_weights(pretrainer.encoder, prefix)
  if not is_export:
    tf.train.Checkpoint(model=variables_by_path(pretrainer)).read(prefix).expect_partial()
  return prefix


def write_portable_weights(model, directory: str) -> str:
  """directory/model.weights.h5: the whole model's weights for every Keras backend (a
  fine-tuning best/ keeps it beside its checkpoint); returns its path."""
  return weights_file.save_weights(model, os.path.join(directory, layout.MODEL_WEIGHTS_FILE))


def export_encoder(
    encoder,
    model_dir: str,
    *,
    vocab_file: Optional[str] = None,
    do_lower_case: Optional[bool] = None,
    info: Optional[dict] = None,
) -> str:
  """`portable_checkpoints.export_encoder` with the encoder's TensorFlow checkpoint
  (encoder.index / .data-*) beside its weights file; returns the export's path."""

  def write_checkpoint(folder: str) -> None:
    tf.train.Checkpoint(encoder=variables_by_path(encoder)).write(
        os.path.join(folder, EXPORT_PREFIX)
    )

  return portable_checkpoints.export_encoder(
      encoder,
      model_dir,
      vocab_file=vocab_file,
      do_lower_case=do_lower_case,
      info=info,
      write_checkpoint=write_checkpoint,
  )
