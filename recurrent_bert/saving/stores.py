"""A TensorFlow checkpoint read by variable path: the second store beside the weights file.

The weights a model dir holds are in one of two files:

  weights_file.WeightsFile   a .weights.h5 file: every backend, no TensorFlow
  CheckpointStore            a TensorFlow checkpoint prefix (ckpt-N, encoder, pretrainer,
                             best/ckpt-N): TensorFlow, imported on first read

Both answer the same questions by variable path ("block_0/attention/query/kernel",
"mlm_head/output_bias": `weights_file.variables_by_path`): which variables with what
shapes (`shapes`), which are the encoder's (`encoder_paths`), their values (`read`).
`weights_file.assign` matches a model against either, so a mismatch is found and worded
once.

`tf_checkpoint` writes each variable under `<root>/<escaped path>/.ATTRIBUTES/
VARIABLE_VALUE`, root "model" (a whole model) or "encoder" (an encoder export), where
TensorFlow's object graph escapes "/" in a name as ".S" and "." as "..". Other roots (the
optimizer, the step, the input iterator) and the dropout generators' states are not
weights and are not listed.
"""

import re
from typing import Dict, Iterable, Optional, Tuple

import numpy as np

from recurrent_bert.errors import InputError

# Roots under which `tf_checkpoint` writes weights.
WEIGHT_ROOTS = ("model", "encoder")
_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
# Dropout seed-generator states: training checkpoints keep them (a resumed run draws the
# same masks), but they are not weights, and their names depend on the process.
_RNG_STATE = re.compile(r"^seed_generator(_\d+)?/")
_STEP_KEY = "global_step" + _VALUE_SUFFIX


def unescape(name: str) -> str:
  """The variable path of a name as TensorFlow's object graph escapes a dict key ("/" as
  ".S", "." as "..")."""
  out, i = [], 0
  while i < len(name):
    if name[i] == "." and i + 1 < len(name):
      out.append("/" if name[i + 1] == "S" else name[i + 1])
      i += 2
    else:
      out.append(name[i])
      i += 1
  return "".join(out)


class CheckpointStore:
  """A TensorFlow checkpoint prefix as a store of `weights_file.assign`.

  Attributes:
    path: the prefix (…/ckpt-N).
  """

  def __init__(self, prefix: str):
    self.path = prefix
    self._reader = None
    self._keys: Optional[Dict[str, str]] = None  # {variable path: checkpoint key}

  def _open(self):
    if self._reader is None:
      try:
        import tensorflow as tf
      except ImportError:
        raise InputError(
            f"{self.path}: a TensorFlow checkpoint, which needs TensorFlow to read (not "
            "installed); read the dir's .weights.h5 instead, or install tensorflow"
        ) from None
      try:
        # The reader of the prefix itself: load_checkpoint would take a ram:// prefix for
        # a directory (on that file system every prefix of a file is one).
        self._reader = tf.compat.v1.train.NewCheckpointReader(self.path)
      except (tf.errors.OpError, ValueError) as e:
        raise InputError(f"{self.path}: not a readable TensorFlow checkpoint ({e})") from None
    return self._reader

  def _key_of(self) -> Dict[str, str]:
    if self._keys is None:
      self._keys = {}
      for key in self._open().get_variable_to_shape_map():
        root, _, rest = key.partition("/")
        if root in WEIGHT_ROOTS and rest.endswith(_VALUE_SUFFIX):
          path = unescape(rest[: -len(_VALUE_SUFFIX)])
          if not _RNG_STATE.match(path):
            self._keys[path] = key
    return self._keys

  def shapes(self) -> Dict[str, Tuple[int, ...]]:
    shape_of = self._open().get_variable_to_shape_map()
    return {path: tuple(shape_of[key]) for path, key in self._key_of().items()}

  def encoder_paths(self) -> Optional[set]:
    return None  # not marked: an encoder loads with the file's other variables unused

  def read(self, paths: Iterable[str]) -> Dict[str, np.ndarray]:
    keys = self._key_of()
    return {path: self._open().get_tensor(keys[path]) for path in paths}

  def step(self) -> Optional[int]:
    """The checkpoint's global step (None: it records none)."""
    reader = self._open()
    return int(reader.get_tensor(_STEP_KEY)) if reader.has_tensor(_STEP_KEY) else None
