"""How the recurrent layers run on each Keras backend: one choice per layer, made here.

`BidirectionalLSTM` (field `blstm_implementation`) and `SwishRNN` (field
`swish_rnn_implementation`) compute the same function over the same variables whatever
runs them; the implementation only decides how. Per backend (Keras' own layout,
`keras/src/backend/{tensorflow,jax,torch}`, is the model: backend code stays in its files):

  tf_graph, tf_blstm, tf_swish_rnn   TensorFlow kernels ("fused", "loop", "block", "scan"):
                                     custom-gradient XLA loops, BlockLSTMV2, tf.scan.
  portable_blstm, portable_swish_rnn  `keras.ops` ("portable"): scan over time (SwishRNN with
                                     a hand-written reverse gradient): JAX, PyTorch.
  pallas_swish_rnn                   one Pallas (Triton) kernel per pass, the gating fused
                                     ("pallas"): JAX on a CUDA GPU.
  pallas_blstm                       the BLSTM as one fused Pallas kernel per time step and
                                     pass ("pallas"): JAX on a CUDA GPU.
  triton_swish_rnn(_kernels)         the same algorithm as Triton kernels behind PyTorch
                                     custom operators ("triton"): PyTorch on a CUDA GPU.
  jax_cudnn_lstm, torch_cudnn_lstm   cuDNN's LSTM fed by each row's length ("cudnn"):
                                     jax.experimental.rnn, PyTorch packed sequences.
  pallas_attention                   not a recurrence: the attention with its dropout as
                                     Pallas kernels, which `SelfAttention` takes itself
                                     under JAX on a CUDA GPU while attention dropout is on.
  pallas_layer_norm                  not a recurrence either: a block's residual sum,
                                     dropout and LayerNorm as one Pallas kernel a pass.
  pallas_support                     what the Pallas kernels share: the interpreter switch,
                                     Triton's settings, lowering for CUDA without a GPU.

Only the module of the running backend is ever imported (lazily, by the layers), so a
JAX or PyTorch process never loads TensorFlow. "auto" resolves as `resolve` says: on a GPU
the cuDNN LSTM of the backend ("keras" is TensorFlow's: Keras' LSTM picks cuDNN itself
there) and, for SwishRNN, TensorFlow's "fused", the Pallas kernel under JAX, the Triton
kernel under PyTorch (where Triton is installed, as it is with PyTorch's CUDA builds on
Linux, and a C compiler builds its launchers), or the portable scan; on a CPU "fused"
on TensorFlow (the fastest measured there, benchmarks/recurrence.py), "portable"
elsewhere.

A kernel that needs a device the process does not have is refused in one line naming
the implementation and the device. The Pallas kernels also run in Pallas' interpreter on
any device when RECURRENT_BERT_PALLAS_INTERPRET=1, the Triton kernels in Triton's when a
PyTorch process starts with TRITON_INTERPRET=1 (slow: for tests and for rehearsing a GPU
script on a CPU).
"""

import contextlib
import os
import shutil
from typing import Optional, Tuple

import keras

from recurrent_bert.errors import InputError

BLSTM_FIELD = "blstm_implementation"
SWISH_RNN_FIELD = "swish_rnn_implementation"

# Field -> Keras backend -> the implementations it runs, besides "auto". TensorFlow does
# not offer "portable": Keras' TensorFlow `ops.scan` sets no trip count, so its gradient
# fails to compile under XLA (jit_compile); TensorFlow's own kernels cover it there.
OFFERED = {
    BLSTM_FIELD: {
        "tensorflow": ("keras", "fused", "block", "scan"),
        "jax": ("cudnn", "portable", "pallas", "keras"),
        "torch": ("cudnn", "portable", "keras"),
    },
    SWISH_RNN_FIELD: {
        "tensorflow": ("fused", "loop", "scan"),
        "jax": ("portable", "pallas"),
        "torch": ("portable", "triton"),
    },
}


def backend() -> str:
  return keras.backend.backend()


def offered(field: str) -> Tuple[str, ...]:
  """The implementations of `field` that the running backend offers, "auto" first."""
  return ("auto",) + OFFERED[field].get(backend(), ())


def _tensorflow_sees_a_gpu() -> bool:
  import tensorflow as tf

  return bool(tf.config.list_logical_devices("GPU"))


def cudnn_lstm():
  """The running backend's cuDNN LSTM module (JAX or PyTorch)."""
  import importlib

  return importlib.import_module(f"{__name__}.{backend()}_cudnn_lstm")


def gated(c, gate, state_bias):
  """SwishRNN's output gating, (c + state_bias) * gate, or c itself without a gate
  ([B, T, D]); plain operators, so every implementation's tensors take it."""
  return c if gate is None else (c + state_bias) * gate


# The JAX platform the layers choose their paths for, where it is not the default
# device's: a compilation for a CUDA GPU on a machine without one
# (benchmarks/gpu/compiled_for_gpu.py) sets "gpu" through `jax_target`.
_jax_target: Optional[str] = None


@contextlib.contextmanager
def jax_target(platform: str):
  """Within it, the layers build their programs for JAX `platform` ("gpu": a CUDA GPU of
  compute capability 8.0 or above) whatever device this process has: "auto" picks that
  platform's kernels, compiled rather than interpreted."""
  global _jax_target
  previous, _jax_target = _jax_target, platform
  try:
    yield
  finally:
    _jax_target = previous


def jax_target_set() -> bool:
  """Whether a `jax_target` is in force."""
  return _jax_target is not None


def jax_platform() -> str:
  """The JAX platform the layers build for: `jax_target`'s, else the default device's."""
  if _jax_target:
    return _jax_target
  import jax

  return jax.devices()[0].platform


def pallas_runs() -> bool:
  """Whether the Pallas kernels run here: JAX on a CUDA GPU, or Pallas' interpreter."""
  from recurrent_bert.layers.kernels import pallas_support

  return backend() == "jax" and (jax_platform() == "gpu" or pallas_support.interpreted())


def pallas_takes(dtype) -> bool:
  """Whether the Pallas kernels of a layer's computation run here on activations of
  `dtype`: 16-bit ones on a CUDA GPU (what a mixed-precision step gives them), any in
  Pallas' interpreter."""
  from recurrent_bert.layers.kernels import pallas_support

  sixteen_bit = keras.backend.standardize_dtype(dtype) in ("bfloat16", "float16")
  return pallas_runs() and (sixteen_bit or pallas_support.interpreted())


# Read by Triton when it first defines a kernel: set, the kernels run in its interpreter.
TRITON_INTERPRET_ENV = "TRITON_INTERPRET"


def _torch_has_cuda() -> bool:
  import torch

  return torch.cuda.is_available()


def _triton_installed() -> bool:
  import importlib.util

  return importlib.util.find_spec("triton") is not None


def triton_interpreted() -> bool:
  """Whether this process asked Triton for its interpreter (at start, `TRITON_INTERPRET_ENV`)."""
  return os.environ.get(TRITON_INTERPRET_ENV, "") == "1"


def triton_missing() -> Optional[str]:
  """What the Triton kernels lack in this process (None: they run). Compiled for a CUDA
  GPU, Triton also builds a small C launcher per kernel with $CC, else gcc, else clang;
  its interpreter (TRITON_INTERPRET=1 at start) needs neither."""
  if backend() != "torch":
    return "PyTorch"
  if not _triton_installed():
    return "Triton, which is not installed"
  if triton_interpreted():
    return None
  if not _torch_has_cuda():
    return "a CUDA GPU"
  if not (os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")):
    return "a C compiler for Triton's kernel launchers ($CC, gcc or clang)"
  return None


def triton_runs() -> bool:
  """Whether the Triton kernels run here: PyTorch with Triton, on a CUDA GPU (with a C
  compiler) or in Triton's interpreter."""
  return triton_missing() is None


def check(field: str, implementation: str) -> None:
  """Raises InputError (one line naming the field and the backend's choices, or the
  device) when the running backend or device cannot run `implementation`."""
  choices = offered(field)
  if implementation not in choices:
    raise InputError(
        f"{field}={implementation!r} does not run on Keras' {backend()!r} backend, which "
        f"offers: {', '.join(choices)}"
    )
  if implementation == "pallas" and not pallas_runs():
    raise InputError(
        f"{field}='pallas' needs a CUDA GPU, and this JAX process runs on "
        f"{jax_platform()!r}: choose 'auto' or 'portable' (or set "
        "RECURRENT_BERT_PALLAS_INTERPRET=1 to run the kernel in Pallas' slow interpreter)"
    )
  needs = triton_missing() if implementation == "triton" else None
  if needs:
    where = "a CUDA GPU" if _torch_has_cuda() else "a CPU"
    raise InputError(
        f"{field}='triton' needs {needs}, and this PyTorch process runs on {where}: choose "
        f"'auto' or 'portable' (or start the process with {TRITON_INTERPRET_ENV}=1 to run "
        "the kernel in Triton's slow interpreter)"
    )
  # PyTorch's packed-sequence LSTM also runs on a CPU; jax.experimental.rnn's does not.
  if implementation == "cudnn" and backend() == "jax" and not cudnn_lstm().available():
    raise InputError(
        f"{field}='cudnn' needs a GPU, and this JAX process runs on {jax_platform()!r}: "
        "choose 'auto' or 'portable'"
    )


def resolve(field: str, implementation: str) -> str:
  """`implementation` checked, with "auto" replaced by this backend's and device's choice."""
  check(field, implementation)
  if implementation != "auto":
    return implementation
  name = backend()
  if field == BLSTM_FIELD:
    if name == "tensorflow":
      return "keras" if _tensorflow_sees_a_gpu() else "fused"
    return "cudnn" if cudnn_lstm().available() else "portable"
  if name == "tensorflow":
    return "fused"
  if name == "jax":
    return "pallas" if jax_platform() == "gpu" else "portable"
  return "triton" if _torch_has_cuda() and triton_runs() else "portable"
