"""Where pretraining writes its state, and how the encoder is loaded back.

Layout of a pretraining `--model_dir`:

  model_dir/
    model_config.json          the encoder's ModelConfig (vocab_size as trained)
    checkpoint, ckpt-N.*       training checkpoints (tf.train.CheckpointManager):
                               model (Pretrainer weights keyed by variable path: encoder
                               + heads), optimizer, global_step
                               and, with the default strategy, the input iterator
    train/                     TensorBoard event files
    metrics.jsonl              one JSON line per step: {"step", "loss", "mlm_loss"}
    encoder/                   the final export (written to a temp dir, then renamed):
      model_config.json
      encoder.index, encoder.data-*   tf.train.Checkpoint(encoder={path: variable})
      vocab.txt                copy of --vocab_file, when given
      export_info.json         {"global_step", "source_checkpoint"}

`load_encoder(path)` accepts any of: the export directory, a model_dir (its latest
training checkpoint, else its export), or a training checkpoint prefix (`.../ckpt-N`).
"""

import json
import os
from typing import Optional, Tuple

import tensorflow as tf

from recurrent_bert.config import ModelConfig
from recurrent_bert.data import io_utils

MODEL_CONFIG_FILE = "model_config.json"
EXPORT_DIR = "encoder"
EXPORT_PREFIX = "encoder"


class CheckpointNotFoundError(FileNotFoundError):
  """No encoder export or training checkpoint at the given path."""


def variables_by_path(layer, include_rng_state: bool = False) -> dict:
  """{variable path: variable} of every weight of a Keras layer or model.

  With `include_rng_state`, the dropout seed-generator states too (training
  checkpoints: a resumed run draws the same dropout masks). Their paths
  ("seed_generator_7/...") depend on how many generators the process created before,
  so exports and encoder loading leave them out.

  Checkpoints are keyed by these paths ("embeddings/token_embedding/embeddings",
  "block_3/attention/query/kernel", "mlm_head/output_bias", ...) rather than by Keras'
  object graph, which does not expose every nested layer of a functional task model
  to tf.train.Checkpoint. An encoder's paths are the same standalone and inside a
  Pretrainer, so encoder weights load from either kind of checkpoint.
  """
  variables = layer.variables if include_rng_state else layer.weights
  weights = {v.path: v for v in variables}
  if len(weights) != len(variables):
    raise ValueError(f"{layer.name}: variable paths are not unique")
  return weights


def write_model_config(directory: str, config: ModelConfig) -> None:
  tf.io.gfile.makedirs(directory)
  path = os.path.join(directory, MODEL_CONFIG_FILE)
  if "://" in directory:  # object stores write whole objects: atomic already
    with tf.io.gfile.GFile(path, "w") as f:
      f.write(config.to_json())
  else:
    io_utils.atomic_write_text(path, config.to_json())


def _is_checkpoint_prefix(path: str) -> bool:
  return tf.io.gfile.exists(path + ".index")


def resolve_checkpoint(path: str) -> Tuple[str, str, bool]:
  """Finds the checkpoint behind `path`.

  Returns:
    (checkpoint prefix, directory holding model_config.json, is_encoder_export).

  Raises:
    CheckpointNotFoundError: naming `path`.
  """
  path = path.rstrip("/")
  if _is_checkpoint_prefix(path):
    return path, os.path.dirname(path), os.path.basename(path) == EXPORT_PREFIX
  export_prefix = os.path.join(path, EXPORT_PREFIX)
  if _is_checkpoint_prefix(export_prefix):
    return export_prefix, path, True
  # A model_dir: its latest training checkpoint (it also holds the heads, which phase 2
  # wants), else its export.
  latest = tf.train.latest_checkpoint(path) if tf.io.gfile.isdir(path) else None
  if latest:
    return latest, path, False
  nested_export = os.path.join(path, EXPORT_DIR, EXPORT_PREFIX)
  if _is_checkpoint_prefix(nested_export):
    return nested_export, os.path.join(path, EXPORT_DIR), True
  raise CheckpointNotFoundError(
      f"{path!r} is neither an encoder export, a model_dir with checkpoints, nor a "
      "checkpoint prefix (…/ckpt-N)")


def read_model_config(config_dir: str) -> ModelConfig:
  path = os.path.join(config_dir, MODEL_CONFIG_FILE)
  if not tf.io.gfile.exists(path):
    raise CheckpointNotFoundError(f"no {MODEL_CONFIG_FILE} in {config_dir!r}")
  with tf.io.gfile.GFile(path) as f:
    return ModelConfig.from_json(f.read(), source=path)


def _encoder_checkpoint(encoder, is_export: bool) -> tf.train.Checkpoint:
  """A Checkpoint whose object graph puts the encoder's weights where the files do."""
  weights = variables_by_path(encoder)
  # Exports key them under "encoder", training checkpoints (whole Pretrainer) "model".
  return tf.train.Checkpoint(encoder=weights) if is_export else tf.train.Checkpoint(
      model=weights)


def restore_encoder_weights(encoder, path: str) -> str:
  """Loads encoder weights from an export or a training checkpoint; returns the prefix.

  Every encoder variable must be found in the checkpoint (heads and optimizer state
  in a training checkpoint are ignored).
  """
  prefix, _, is_export = resolve_checkpoint(path)
  status = _encoder_checkpoint(encoder, is_export).read(prefix)
  status.expect_partial().assert_existing_objects_matched()
  return prefix


def load_encoder(path: str, config: Optional[ModelConfig] = None):
  """Builds the Encoder saved at `path` (see the module docstring) and loads its weights.

  Args:
    path: export dir, model_dir or checkpoint prefix.
    config: overrides the saved model_config.json (e.g. a different dropout rate for
      fine-tuning); sizes must match the checkpoint.

  Returns:
    A `recurrent_bert.models.Encoder` with the saved weights.
  """
  from recurrent_bert.models import build_encoder  # pylint: disable=g-import-not-at-top
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
  restore_encoder_weights(pretrainer.encoder, prefix)
  if not is_export:
    tf.train.Checkpoint(model=variables_by_path(pretrainer)).read(prefix).expect_partial()
  return prefix


def export_encoder(encoder, model_dir: str, *, vocab_file: Optional[str] = None,
                   info: Optional[dict] = None) -> str:
  """Writes model_dir/encoder atomically (temp dir, then rename); returns its path.

  On object stores (gs://...), which cannot rename directories, the files are written
  in place, the weights last but one and export_info.json last: a reader should treat
  an export without export_info.json as incomplete.
  """
  final_dir = os.path.join(model_dir, EXPORT_DIR)
  if "://" in model_dir:
    tf.io.gfile.makedirs(final_dir)
    write_model_config(final_dir, encoder.config)
    if vocab_file:
      tf.io.gfile.copy(vocab_file, os.path.join(final_dir, "vocab.txt"), overwrite=True)
    tf.train.Checkpoint(encoder=variables_by_path(encoder)).write(
        os.path.join(final_dir, EXPORT_PREFIX))
    with tf.io.gfile.GFile(os.path.join(final_dir, "export_info.json"), "w") as f:
      f.write(json.dumps(info or {}, indent=2, sort_keys=True) + "\n")
    return final_dir
  with io_utils.atomic_directory(final_dir) as tmp_dir:
    tf.train.Checkpoint(encoder=variables_by_path(encoder)).write(
        os.path.join(tmp_dir, EXPORT_PREFIX))
    write_model_config(tmp_dir, encoder.config)
    if vocab_file:
      tf.io.gfile.copy(vocab_file, os.path.join(tmp_dir, "vocab.txt"), overwrite=True)
    io_utils.atomic_write_json(os.path.join(tmp_dir, "export_info.json"), info or {})
  return final_dir
