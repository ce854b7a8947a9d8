"""Shared pieces of the tests that run under Keras' JAX and PyTorch backends.

`tests/backends/` is collected only in a session whose Keras backend is not TensorFlow
(`make test` runs it as `KERAS_BACKEND=jax pytest tests/backends` and again with torch);
the TensorFlow session skips the folder. A test here that needs TensorFlow's answer for
the same weights asks a fresh TensorFlow process for it (`run_under_backend`), so the two
backends never share a process.
"""

import os
import subprocess
import sys
import tempfile
import textwrap
from typing import Dict, Sequence

import keras
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BACKEND = keras.backend.backend()


def backend_env(backend: str, unset: Sequence[str] = ()) -> Dict[str, str]:
  """This process's environment, with `backend` as Keras' backend and the repo importable,
  less the variables named in `unset`."""
  env = {k: v for k, v in os.environ.items() if k not in unset}
  env.update(KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2")
  env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH")) if p)
  return env


def run_python(code: str, backend: str, *args: str, timeout: float = 600, unset=()):
  """`python -c code args...` under `backend` in a fresh process (CompletedProcess, text),
  its environment less the variables named in `unset`."""
  return subprocess.run(
      [sys.executable, "-c", textwrap.dedent(code), *args],
      env=backend_env(backend, unset),
      cwd=REPO,
      capture_output=True,
      text=True,
      timeout=timeout,
  )


def run_under_backend(code: str, backend: str = "tensorflow", **arrays) -> Dict[str, np.ndarray]:
  """Runs `code` under `backend` in a fresh process and returns the arrays it computed.

  The code sees `inputs` ({name: numpy array}, the keyword arguments) and fills the dict
  `outputs` ({name: array-like}); both travel as .npz files.

  Raises:
    AssertionError: the process failed (its stderr is in the message).
  """
  with tempfile.TemporaryDirectory() as folder:
    inputs_path = os.path.join(folder, "inputs.npz")
    outputs_path = os.path.join(folder, "outputs.npz")
    np.savez(inputs_path, **arrays)
    script = (
        "import numpy as np, sys\n"
        "inputs = dict(np.load(sys.argv[1]))\n"
        "outputs = {}\n"
        + textwrap.dedent(code)
        + "\nnp.savez(sys.argv[2], **{k: np.asarray(v) for k, v in outputs.items()})\n"
    )
    result = run_python(script, backend, inputs_path, outputs_path)
    assert result.returncode == 0, f"{backend} process failed:\n{result.stderr[-4000:]}"
    with np.load(outputs_path) as outputs:
      return {name: outputs[name] for name in outputs.files}


def numpy_keep_bits(seed, size: int) -> np.ndarray:
  """[size] uint32: the hash of layers/kernels/dropout_bits.py in numpy uint32 arithmetic
  (wrapping): mix(mix(i * 0x9E3779B9 + s0) + s1) for the row-major indices i = 0 ..
  size - 1, mix an xor-shift-multiply round (>> 16, * 0x7FEB352D, >> 15, * 0x846CA68B,
  >> 16). A mask keeps the elements whose bits are at or above round(rate * 2**32)."""

  def mix(x):
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))

  s0, s1 = np.asarray(seed).astype(np.uint32)
  with np.errstate(over="ignore"):
    return mix(mix(np.arange(size, dtype=np.uint32) * np.uint32(0x9E3779B9) + s0) + s1)


def to_numpy(x) -> np.ndarray:
  """A backend tensor (or nest-free array-like) as float64/int numpy."""
  return np.asarray(keras.ops.convert_to_numpy(x))


def outputs_and_gradients(layer, x, upstream, *args):
  """y = layer(x, *args) and the gradients of sum(y * upstream) on x and on each of the
  layer's trainable weights (in `layer.trainable_weights` order), as numpy, computed by
  the session backend's own autodiff.

  x: a float32 numpy array; args: further call arguments (numpy), e.g. the mask.
  """
  weights = layer.trainable_weights
  if BACKEND == "jax":
    import jax

    others = [v.value for v in layer.non_trainable_variables]

    def loss(x, values):
      y, _ = layer.stateless_call(values, others, x, *args)
      return (y * upstream).sum(), y

    (_, y), (dx, dweights) = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
        x, [v.value for v in weights]
    )
    return to_numpy(y), [to_numpy(g) for g in [dx, *dweights]]
  import torch

  # On the layer's device (a GPU's, where there is one): torch never moves tensors itself.
  x = torch.tensor(x, device=weights[0].value.device, requires_grad=True)
  for v in weights:
    v.value.grad = None
  # cuDNN's RNNs use TF32 by default on a GPU (errors ~5e-4 against the float64 references,
  # seen on an H200); the comparison is of float32 arithmetic.
  tf32, torch.backends.cudnn.allow_tf32 = torch.backends.cudnn.allow_tf32, False
  try:
    y = layer(x, *args)
    (y * torch.tensor(upstream, dtype=y.dtype, device=y.device)).sum().backward()
  finally:
    torch.backends.cudnn.allow_tf32 = tf32
  return y.detach().cpu().numpy(), [
      g.detach().cpu().numpy() for g in [x.grad, *(v.value.grad for v in weights)]
  ]
