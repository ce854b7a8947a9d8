"""Training checkpoints that need no TensorFlow: the JAX loop's `ckpt-N.state/` folders.

TensorFlow's loop keeps tf.train.Checkpoint files (ckpt-N.index, ...). The JAX loop
(`training/jax_loop.py`) keeps, for step N, the folder model_dir/ckpt-N.state/ holding

  model.weights.h5   the trained model's weights (`weights_file`: by variable path, the
                     file every backend and every model-dir reader loads)
  state.npz          `step`; the optimizer's variables `optimizer/<i>` in the optimizer's
                     order (its iteration count, moments, ...) and the model's dropout
                     seed-generator states `rng/<i>` in the model's order

written as a whole (`io_utils.atomic_directory`): a run killed while saving leaves the
previous checkpoints as they were. The `keep` newest are kept. The input position is
not stored: it is the step's (`record_batches.training_batches(skip_batches=...)`).

This module imports no TensorFlow.
"""

import os

import keras
import numpy as np

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert import weights_file
from recurrent_bert.errors import InputError
from recurrent_bert.saving.locate import list_states

STATE_FILE = layout.PORTABLE_STATE_FILE


def state_dir(model_dir: str, step: int) -> str:
  return os.path.join(model_dir, layout.PORTABLE_CHECKPOINT_FORMAT.format(step=step))


def _rng_states(model) -> list:
  weights = {id(v) for v in model.weights}
  return [v for v in model.variables if id(v) not in weights]


def save_state(model_dir: str, step: int, model, optimizer, keep: int) -> str:
  """Writes model_dir/ckpt-<step>.state/ (module docstring); keeps the `keep` newest."""
  path = state_dir(model_dir, step)
  arrays = {"step": np.asarray(step, np.int64)}
  for i, variable in enumerate(optimizer.variables):
    arrays[f"optimizer/{i}"] = np.asarray(keras.ops.convert_to_numpy(variable))
  for i, variable in enumerate(_rng_states(model)):
    arrays[f"rng/{i}"] = np.asarray(keras.ops.convert_to_numpy(variable))
  with io_utils.atomic_directory(path) as tmp:
    weights_file.save_weights(model, os.path.join(tmp, layout.MODEL_WEIGHTS_FILE))
    with io_utils.atomic_write(os.path.join(tmp, STATE_FILE), "wb") as f:
      np.savez(f, **arrays)
  for _, old in list_states(model_dir)[:-keep]:
    io_utils.remove_tree(old)
  return path


def restore_state(path: str, model, optimizer) -> int:
  """Loads a checkpoint folder into `model` and the (built) `optimizer`; returns its step.

  Raises:
    InputError: the folder holds another model or optimizer (one line naming it).
  """
  weights_file.load_weights(model, os.path.join(path, layout.MODEL_WEIGHTS_FILE))
  with io_utils.open_file(os.path.join(path, STATE_FILE), "rb") as f:
    stored = dict(np.load(f))
  for prefix, variables in (("optimizer", optimizer.variables), ("rng", _rng_states(model))):
    count = sum(1 for key in stored if key.startswith(prefix + "/"))
    if count != len(variables):
      raise InputError(
          f"{path}: holds {count} {prefix} variables, this run has {len(variables)} (a "
          "checkpoint of another optimizer or model; give a new --model_dir)"
      )
    for i, variable in enumerate(variables):
      value = stored[f"{prefix}/{i}"]
      if tuple(value.shape) != tuple(variable.shape):
        raise InputError(
            f"{path}: {prefix} variable {i} ({variable.path}) has shape {value.shape} in "
            f"the checkpoint but {tuple(variable.shape)} in this run"
        )
      variable.assign(value)
  return int(stored["step"])
