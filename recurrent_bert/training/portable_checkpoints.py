"""Model dirs read without TensorFlow: the encoder from a dir's portable weights file.

The TensorFlow reader of every model dir is `training.checkpoints.resolve_model`. Under
Keras' JAX or PyTorch backend, where TensorFlow may not be installed, a model dir is read
through the .weights.h5 file written beside its durable TensorFlow checkpoints
(`recurrent_bert.weights_file`; the names are in `model_dir`):

  encoder/encoder.weights.h5   a pretraining model_dir's or a converted dir's export
  best/model.weights.h5        a fine-tuning model_dir's best checkpoint (whole task model)

Training checkpoints (ckpt-N) have no such file, so a run's intermediate states, and a
fine-tuning run without evaluation (no best/), are read under TensorFlow only.

This module imports no TensorFlow (nor anything that does).
"""

import os
from typing import Optional, Tuple

from recurrent_bert import model_dir as layout
from recurrent_bert import weights_file
from recurrent_bert.config import ModelConfig
from recurrent_bert.errors import InputError

# Where each kind of dir keeps its weights file, relative to the path given.
_SEARCH = (
    layout.EXPORT_WEIGHTS_FILE,  # an encoder/ export itself
    layout.MODEL_WEIGHTS_FILE,  # a best/ dir itself
    os.path.join(layout.EXPORT_DIR, layout.EXPORT_WEIGHTS_FILE),  # pretraining, converted
    os.path.join(layout.BEST_DIR, layout.MODEL_WEIGHTS_FILE),  # fine-tuning model_dir
)


def find_weights_file(path: str) -> str:
  """The portable weights file behind `path`: the file itself, or the one its dir keeps.

  Raises:
    InputError: one line naming `path` and the files looked for.
  """
  path = path.rstrip("/")
  if layout.isfile(path):
    return path
  if layout.isdir(path):
    for relative in _SEARCH:
      candidate = os.path.join(path, relative)
      if layout.isfile(candidate):
        return candidate
    raise InputError(
        f"{path}: no portable weights file (looked for {', '.join(_SEARCH)}); training "
        "checkpoints (ckpt-N) and dirs written before weights files existed are read "
        "under TensorFlow only"
    )
  raise InputError(f"{path}: no such file or directory")


def _read_config(weights_path: str) -> ModelConfig:
  """model_config.json beside the weights file, else the one recorded in the file."""
  config_path = os.path.join(os.path.dirname(weights_path), layout.MODEL_CONFIG_FILE)
  if layout.exists(config_path):
    return ModelConfig.from_json(layout.read_text(config_path), source=config_path)
  recorded = weights_file.read_attributes(weights_path).get("model_config")
  if recorded is None:
    raise InputError(
        f"{weights_path}: records no model_config and has no {layout.MODEL_CONFIG_FILE} beside it"
    )
  return ModelConfig.from_json(recorded, source=weights_path)


def resolve_portable(path: str) -> Tuple[str, ModelConfig]:
  """(weights file, the encoder's ModelConfig) of any model dir the package writes, or a
  weights file."""
  weights_path = find_weights_file(path)
  return weights_path, _read_config(weights_path)


def load_encoder_portable(path: str, config: Optional[ModelConfig] = None):
  """Builds the encoder saved at `path` and loads its weights, on any Keras backend.

  Args:
    path: a pretraining, converted or fine-tuning model_dir, an encoder/ or best/ dir, or
      a .weights.h5 file (an encoder's, a Pretrainer's or a task model's).
    config: overrides the saved model_config.json (e.g. another dropout rate); sizes
      must match the file.

  Returns:
    A `recurrent_bert.models.Encoder` with the saved weights.

  Raises:
    InputError: one line: no weights file, not a weights file, or a file whose variables
      do not match the config's encoder (the first such variable named).
  """
  from recurrent_bert.models import build_encoder

  weights_path, saved_config = resolve_portable(path)
  encoder = build_encoder(config or saved_config)
  weights_file.load_weights(encoder, weights_path, encoder_only=True)
  return encoder
