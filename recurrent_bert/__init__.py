"""recurrent_bert: BERT, TRANS-BLSTM and SwishRNN-BERT on Keras 3 (TensorFlow, JAX, PyTorch)."""

import os as _os
import sys as _sys

__version__ = "0.1.0"

# What Keras accepts as KERAS_BACKEND; it raises a traceback at `import keras` for any other.
_KERAS_BACKENDS = ("tensorflow", "jax", "torch", "numpy", "openvino")
# Packages whose modules are commands (`python -m recurrent_bert.pretrain`; `tools` holds
# the old `python -m tools.x` paths, kept for one release).
_COMMAND_PACKAGES = ("recurrent_bert", "tools")
# The prefix of every console script in commands.COMMANDS (a test checks it).
_CONSOLE_PREFIX = "rbert-"


def _running_a_command() -> bool:
  """True in a process started as one of the package's commands, not in a library user."""
  # While `python -m package.module` imports the module's packages, argv[0] is "-m".
  if _sys.argv and _sys.argv[0] == "-m":
    return True
  if _sys.argv and _os.path.basename(_sys.argv[0]).startswith(_CONSOLE_PREFIX):
    return True
  spec = getattr(_sys.modules.get("__main__"), "__spec__", None)
  return (getattr(spec, "name", None) or "").split(".")[0] in _COMMAND_PACKAGES


def _check_keras_backend() -> None:
  """An unknown KERAS_BACKEND: one line and exit status 2 for a command, an ImportError
  with the same line for a library user. Runs before any module imports Keras."""
  name = _os.environ.get("KERAS_BACKEND")
  if not name or name in _KERAS_BACKENDS:  # unset or empty: Keras' own default
    return
  message = f"KERAS_BACKEND={name} is not a Keras backend (tensorflow, jax, torch)"
  if _running_a_command():
    from recurrent_bert import cli

    cli.fail(message)
  raise ImportError(message)


_check_keras_backend()
