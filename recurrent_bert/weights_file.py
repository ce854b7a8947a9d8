"""The portable weights file: a model's variables by path in HDF5, readable on every backend.

A model dir's TensorFlow checkpoints (tf.train.Checkpoint) need TensorFlow to read. Beside
each durable one the package writes this file too (`model_dir.EXPORT_WEIGHTS_FILE` in
encoder/, `model_dir.MODEL_WEIGHTS_FILE` in a fine-tuning best/), so a process running
Keras on JAX or PyTorch, with no TensorFlow installed, loads the same weights.

Layout (HDF5, h5py):

  /weights/<variable path>   one float dataset per variable, keyed by its Keras path
                             ("embeddings/token_embedding/embeddings", "block_0/...",
                             "classification_head/dense/kernel"): the keys of the
                             TensorFlow checkpoints (`variables_by_path`, `saving.stores`);
                             its attribute `encoder` says whether it is the encoder's
  attributes of /:
    format                   FORMAT, the layout's version
    model                    the model's class ("Encoder", "Classifier", "Pretrainer", ...)
    model_config             the encoder's ModelConfig as JSON (model_config.json's text)

An encoder's paths are the same standalone and inside a task model, so an encoder loads
from either kind of file (`load_weights(..., encoder_only=True)`). Bad input is one line: a
file that is not HDF5 names the file; a file of another model or size names the first
variable that does not match, with both shapes.

This module imports no TensorFlow (gs:// and other paths with a scheme go through
`tf.io.gfile`, imported on first use by `io_utils`).
"""

import os
import shutil
import tempfile
from typing import Callable, Dict, Iterable, Optional, Tuple

import h5py
import keras
import numpy as np

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert.errors import InputError

FORMAT = "recurrent_bert.weights/1"
WEIGHTS_GROUP = "weights"
# Set on each dataset: the variable is the encoder's (an encoder loads from a task model's
# file by these alone).
ENCODER_ATTRIBUTE = "encoder"


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


def _as_stored(variable) -> np.ndarray:
  value = np.asarray(keras.ops.convert_to_numpy(variable))
  # HDF5 has no bfloat16: such variables are kept as float32 (exact) and cast back on load.
  return value.astype(np.float32) if value.dtype.name == "bfloat16" else value


def _encoder_paths(model) -> set:
  """Paths of the encoder's variables: all of an encoder's, those of a task model's `encoder`."""
  encoder = getattr(model, "encoder", None)
  if encoder is not None:
    return set(variables_by_path(encoder))
  return set(variables_by_path(model)) if hasattr(model, "config") else set()


def _selected(model, include: Optional[Callable[[str], bool]]) -> dict:
  """{path: variable} of `model`'s weights whose path `include` accepts (all without it)."""
  return {p: v for p, v in variables_by_path(model).items() if include is None or include(p)}


def _write_hdf5(model, target, model_config_json: Optional[str], include) -> None:
  in_encoder = _encoder_paths(model)
  with h5py.File(target, "w") as f:
    f.attrs["format"] = FORMAT
    f.attrs["model"] = type(model).__name__
    if model_config_json is not None:
      f.attrs["model_config"] = model_config_json
    group = f.create_group(WEIGHTS_GROUP)
    for path, variable in _selected(model, include).items():
      dataset = group.create_dataset(path, data=_as_stored(variable))
      dataset.attrs[ENCODER_ATTRIBUTE] = path in in_encoder


def save_weights(model, path: str, include: Optional[Callable[[str], bool]] = None) -> str:
  """Writes `model`'s weights to `path` atomically (a reader never sees part of a file).

  Args:
    model: a Keras model or layer; its `config` (a ModelConfig, as Encoder has) or its
      `encoder.config` is recorded as the model_config attribute.
    path: the .weights.h5 file, local or with a scheme (gs://, ram://).
    include: keeps only the variables whose path it accepts (e.g. a Pretrainer's heads);
      default: every weight.

  Returns:
    `path`.
  """
  encoder = getattr(model, "encoder", None)
  config = getattr(model, "config", None) or getattr(encoder, "config", None)
  config_json = config.to_json() if hasattr(config, "to_json") else None
  if not layout.has_scheme(path):
    with io_utils.atomic_output(path) as tmp:
      _write_hdf5(model, tmp, config_json, include)
    return path
  # HDF5 writes through seeks, which object stores lack: a local file is copied up.
  local_dir = tempfile.mkdtemp(prefix="weights-")
  try:
    local = os.path.join(local_dir, os.path.basename(path))
    _write_hdf5(model, local, config_json, include)
    io_utils.atomic_copy(local, path)
  finally:
    shutil.rmtree(local_dir, ignore_errors=True)
  return path


class _OpenWeights:
  """h5py.File of a weights file, from a local path or one with a scheme (gs://)."""

  def __init__(self, path: str):
    self.path = path
    self._stream = self._file = None

  def __enter__(self) -> h5py.File:
    if not layout.exists(self.path):
      raise InputError(f"{self.path}: no such weights file")
    if layout.has_scheme(self.path):  # h5py reads a file object through seek and read
      self._stream = io_utils.open_file(self.path, "rb")
    try:
      self._file = h5py.File(self._stream or self.path, "r")
    except OSError:
      self.__exit__()
      raise InputError(
          f"{self.path}: not an HDF5 weights file (expected a .weights.h5 written by "
          "recurrent_bert)"
      ) from None
    if WEIGHTS_GROUP not in self._file or not isinstance(self._file[WEIGHTS_GROUP], h5py.Group):
      self.__exit__()
      raise InputError(
          f"{self.path}: an HDF5 file without a {WEIGHTS_GROUP!r} group, not a weights file "
          "written by recurrent_bert"
      )
    return self._file

  def __exit__(self, *exc_info) -> None:
    if self._file is not None:
      self._file.close()
      self._file = None
    if self._stream is not None:
      self._stream.close()
      self._stream = None


def _datasets(group: h5py.Group) -> Dict[str, h5py.Dataset]:
  """{variable path: dataset} below `group` (paths hold "/", which HDF5 makes into groups)."""
  found = {}

  def visit(name, item):
    if isinstance(item, h5py.Dataset):
      found[name] = item

  group.visititems(visit)
  return found


def _attributes(f: h5py.File) -> Dict[str, str]:
  return {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in f.attrs.items()}


def read_attributes(path: str) -> Dict[str, str]:
  """The file's attributes: {"format", "model", "model_config"} (those it has)."""
  with _OpenWeights(path) as f:
    return _attributes(f)


Shape = Tuple[int, ...]


class WeightsFile:
  """A weights file as a store of `assign`: what it holds, and the values.

  Attributes:
    path: the .weights.h5 file.
  """

  def __init__(self, path: str):
    self.path = path
    self._index = None  # {variable path: (shape, is the encoder's)}, read once

  def _indexed(self) -> Dict[str, Tuple[Shape, bool]]:
    if self._index is None:
      with _OpenWeights(self.path) as f:
        self._index = {
            name: (tuple(d.shape), bool(d.attrs.get(ENCODER_ATTRIBUTE, True)))
            for name, d in _datasets(f[WEIGHTS_GROUP]).items()
        }
    return self._index

  def shapes(self) -> Dict[str, Shape]:
    """{variable path: shape} of every variable in the file."""
    return {name: shape for name, (shape, _) in self._indexed().items()}

  def encoder_paths(self) -> Optional[set]:
    """The paths marked as the encoder's (files without the marks: all of them)."""
    return {name for name, (_, is_encoder) in self._indexed().items() if is_encoder}

  def read(self, paths: Iterable[str]) -> Dict[str, np.ndarray]:
    with _OpenWeights(self.path) as f:
      stored = _datasets(f[WEIGHTS_GROUP])
      return {name: stored[name][()] for name in paths}


def assign(
    model,
    store,
    *,
    encoder_only: bool = False,
    include: Optional[Callable[[str], bool]] = None,
    allow_unused: bool = False,
) -> int:
  """Assigns every weight of `model` from `store`, by variable path; returns how many.

  The store's variables (or its encoder's) and the model's must be the same paths with
  the same shapes. Nothing is assigned unless all match (the model is left as it was).
  Any store answers `shapes()`, `encoder_paths()` and `read(paths)`: a `WeightsFile`, or a
  TensorFlow checkpoint read by path (`recurrent_bert.saving`), so a mismatch is found,
  and worded, the same way in both.

  Args:
    model: a built Keras model or layer.
    store: where the values are (its `path` names it in errors).
    encoder_only: `model` is an encoder, matched against the store's encoder variables
      alone (an encoder loaded from a task model's or a Pretrainer's file); a store that
      does not mark them (None) may hold other variables besides.
    include: only the model's variables whose path it accepts are matched and assigned;
      default: every weight.
    allow_unused: the store may hold variables the model does not (a phase 1 Pretrainer's
      NSP head, loaded into one without it).

  Raises:
    InputError: one line naming the file and the first variable that does not match
      (missing from the file, not in the model, or of another shape, with both shapes),
      or that the file is not a weights file.
  """
  variables = _selected(model, include)
  model_name = type(model).__name__
  stored = store.shapes()
  if encoder_only:
    marked = store.encoder_paths()
    allow_unused = allow_unused or marked is None
    stored = {k: v for k, v in stored.items() if marked is None or k in marked}
  for name, variable in variables.items():
    if name not in stored:
      raise InputError(
          f"{store.path}: variable {name!r} {tuple(variable.shape)} of the {model_name} is "
          "not in the file (it holds a model of another architecture or size)"
      )
    if stored[name] != tuple(variable.shape):
      raise InputError(
          f"{store.path}: variable {name!r} has shape {stored[name]} in the file but "
          f"{tuple(variable.shape)} in the {model_name} (a model of another size?)"
      )
  unused = sorted(k for k in stored if k not in variables and (include is None or include(k)))
  if unused and not allow_unused:
    raise InputError(
        f"{store.path}: variable {unused[0]!r} {stored[unused[0]]} of the file is not in the "
        f"{model_name} ({len(unused)} such; the file holds a model of another architecture "
        "or size)"
    )
  values = store.read(variables)
  for name, variable in variables.items():
    variable.assign(values[name])
  return len(variables)


def load_weights(model, path: str, **options) -> int:
  """`assign(model, WeightsFile(path), **options)`: a weights file's values into `model`."""
  return assign(model, WeightsFile(path), **options)
