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

import dataclasses
import os
from typing import Callable, Optional, Tuple

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert import weights_file
from recurrent_bert.config import ModelConfig
from recurrent_bert.data import vocab as vocab_lib
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
    # A JAX pretraining run's latest training checkpoint (heads included) comes first, as
    # TensorFlow's does in `checkpoints.resolve_model`.
    state = latest_state(path)
    if state is not None:
      return os.path.join(state, layout.MODEL_WEIGHTS_FILE)
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
  """model_config.json beside the weights file (or beside its checkpoint folder), else the
  one recorded in the file."""
  folder = os.path.dirname(weights_path)
  for config_dir in (folder, os.path.dirname(folder)):
    config_path = os.path.join(config_dir, layout.MODEL_CONFIG_FILE)
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
  restore_encoder_portable(encoder, weights_path)
  return encoder


def latest_state(model_dir: str) -> Optional[str]:
  """The newest ckpt-N.state/ folder of a JAX pretraining run (None: none)."""
  from recurrent_bert.training import portable_state

  return portable_state.latest_state(model_dir)


def restore_encoder_portable(encoder, path: str) -> str:
  """An encoder's weights from any model dir or weights file, on any backend; returns
  the weights file read.

  Raises:
    InputError: one line (no weights file; an encoder that does not match).
  """
  weights_path = find_weights_file(path)
  weights_file.load_weights(encoder, weights_path, encoder_only=True)
  return weights_path


def restore_pretrainer_portable(pretrainer, path: str) -> str:
  """--init_checkpoint on any backend: the encoder from any model dir or weights file,
  and the heads of the file that the Pretrainer has too (a phase 1 Pretrainer's: the
  phase 1 -> phase 2 case); returns the weights file read.

  Raises:
    InputError: one line (no weights file; an encoder that does not match).
  """
  weights_path = restore_encoder_portable(pretrainer.encoder, path)
  stored = set(weights_file.variable_paths(weights_path))
  encoder_paths = set(weights_file.variables_by_path(pretrainer.encoder))
  heads = [p for p in weights_file.variables_by_path(pretrainer) if p not in encoder_paths]
  if any(p in stored for p in heads):
    weights_file.load_weights(
        pretrainer,
        weights_path,
        include=lambda p: p in stored and p not in encoder_paths,
        allow_unused=True,
    )
  return weights_path


# -- writing ---------------------------------------------------------------------------


def write_model_config(directory: str, config: ModelConfig) -> None:
  io_utils.atomic_write_text(os.path.join(directory, layout.MODEL_CONFIG_FILE), config.to_json())


def write_tokenizer_files(
    directory: str, vocab_file: Optional[str], do_lower_case: Optional[bool]
) -> None:
  """vocab.txt (a copy of `vocab_file`) and tokenizer.json, what a reader tokenizes with.

  A SentencePiece model is copied to sentencepiece.model instead, and tokenizer.json
  records its kind, file and the model's own casing.

  Without a vocabulary nothing is written; with an unknown casing (None: a converted
  checkpoint that does not say) only vocab.txt.
  """
  if not vocab_file:
    return
  info = layout.TokenizerInfo()
  if vocab_lib.vocab_kind(vocab_file) == layout.SENTENCEPIECE:
    # The model's normaliser fixes the casing: record it, not the flag.
    do_lower_case = vocab_lib.Vocabulary.from_sentencepiece(vocab_file).folds_case
    info = layout.TokenizerInfo(layout.SENTENCEPIECE, vocab_file=layout.SENTENCEPIECE_MODEL_FILE)
  io_utils.atomic_copy(vocab_file, os.path.join(directory, info.vocab_file))
  if do_lower_case is not None:
    io_utils.atomic_write_text(
        os.path.join(directory, layout.TOKENIZER_FILE),
        dataclasses.replace(info, do_lower_case=do_lower_case).to_json(),
    )


def export_encoder(
    encoder,
    model_dir: str,
    *,
    vocab_file: Optional[str] = None,
    do_lower_case: Optional[bool] = None,
    info: Optional[dict] = None,
    write_checkpoint: Optional[Callable[[str], None]] = None,
) -> str:
  """Writes model_dir/encoder atomically (temp dir, then rename); returns its path.

  It holds encoder.weights.h5, which Keras reads on every backend, model_config.json, the
  tokenizer files and export_info.json; `write_checkpoint(folder)` adds what a backend
  writes beside them (TensorFlow: the encoder's tf.train.Checkpoint,
  `checkpoints.export_encoder`).

  `do_lower_case` defaults to `info["do_lower_case"]` (None: not known).

  export_info.json is written last: on object stores, which rename object by object, an
  export without it is incomplete.
  """
  info = dict(info or {})
  if do_lower_case is None:
    do_lower_case = info.get("do_lower_case")
  info["do_lower_case"] = do_lower_case
  final_dir = os.path.join(model_dir, layout.EXPORT_DIR)
  with io_utils.atomic_directory(final_dir) as tmp_dir:
    if write_checkpoint is not None:
      write_checkpoint(tmp_dir)
    weights_file.save_weights(encoder, os.path.join(tmp_dir, layout.EXPORT_WEIGHTS_FILE))
    write_model_config(tmp_dir, encoder.config)
    write_tokenizer_files(tmp_dir, vocab_file, do_lower_case)
    io_utils.atomic_write_json(os.path.join(tmp_dir, layout.EXPORT_INFO_FILE), info)
  return final_dir
