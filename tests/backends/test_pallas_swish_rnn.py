"""SwishRNN's Pallas kernels ("pallas", JAX on a CUDA GPU), checked without a GPU.

The same kernel bodies run in Pallas' interpreter against the numpy loop of SPEC §4
(tests/support/references.py): outputs, and gradients against central differences of that
loop, for k = 1, 2, 3, 4, with and without the fused gating, a separate or shared residual,
T a multiple of the unrolled width or not, D wider than one program's channels; under
bfloat16 inputs too. The layer on "pallas" equals the layer on "portable" with the same
weights. And the kernels lower to Triton for CUDA (no GPU needed to lower), so a kernel
Triton cannot take fails here, not on the card.
"""

import keras
import numpy as np
import pytest

from recurrent_bert.errors import InputError
from recurrent_bert.layers import SwishRNN
from recurrent_bert.layers import kernels
from recurrent_bert.layers.kernels import pallas_swish_rnn
from tests.backends.support import BACKEND
from tests.backends.support import outputs_and_gradients
from tests.support import references as ref

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="Pallas kernels are JAX's")


def _on_a_gpu() -> bool:
  import jax

  return jax.devices()[0].platform == "gpu"


# On a GPU the same tests run the compiled Triton kernels.
INTERPRET = BACKEND == "jax" and not _on_a_gpu()


def _numpy_recurrence(k, shared, gated):
  """arrays (x1, [residual], alpha, beta, [gate, state_bias]) -> the kernel's output."""

  def run(arrays):
    arrays = list(arrays)
    x1 = arrays.pop(0)
    residual = x1 if shared else arrays.pop(0)
    alpha, beta = arrays.pop(0), arrays.pop(0)
    c = ref.swish_rnn_states(x1, residual, alpha, beta, k)
    if not gated:
      return c
    gate, state_bias = arrays
    return (c + state_bias) * gate

  return run


def _inputs(rng, shape, shared, gated):
  depth = shape[-1]
  arrays = [rng.normal(size=shape)]
  arrays += [] if shared else [rng.normal(size=shape)]
  arrays += [rng.uniform(0.5, 1.5, size=depth), rng.normal(size=depth)]
  arrays += [rng.normal(size=shape), rng.normal(size=depth)] if gated else []
  return [a.astype("float32") for a in arrays]


def _kernel(k, shared, gated, interpret=INTERPRET):
  """The kernel as a function of the same argument list as `_numpy_recurrence`."""

  def run(*arrays):
    arrays = list(arrays)
    x1 = arrays.pop(0)
    residual = None if shared else arrays.pop(0)
    alpha, beta = arrays.pop(0), arrays.pop(0)
    gate, state_bias = arrays if gated else (None, None)
    return pallas_swish_rnn.recurrence(
        x1, residual, alpha, beta, k, gate, state_bias, interpret=interpret
    )

  return run


@pytest.mark.parametrize(
    "k,shape,shared,gated",
    [
        (1, (2, 16, 3), True, True),  # two iterations of the 8-block unrolled body
        (2, (2, 7, 3), False, False),  # T padded to a multiple of k
        (3, (2, 7, 3), False, True),  # k not a power of 2: three carried chains
        (4, (1, 12, 3), True, False),
        (2, (1, 5, 130), False, True),  # two programs across D, the second mostly padding
    ],
)
def test_kernel_and_its_gradient_against_the_numpy_loop(rng, k, shape, shared, gated):
  import jax

  arrays = _inputs(rng, shape, shared, gated)
  upstream = rng.normal(size=shape)
  run = _kernel(k, shared, gated)
  got = np.asarray(run(*arrays))
  numpy_run = _numpy_recurrence(k, shared, gated)
  np.testing.assert_allclose(got, numpy_run(arrays), atol=1e-5, rtol=1e-5)
  if shape[-1] > 8:
    return  # central differences of 1,300 inputs: the narrow cases cover the gradient
  loss = lambda *a: (run(*a) * upstream).sum()
  grads = jax.grad(loss, argnums=tuple(range(len(arrays))))(*arrays)
  want = ref.finite_difference_gradients(numpy_run, arrays, upstream)
  for i, (g, w) in enumerate(zip(grads, want)):
    np.testing.assert_allclose(np.asarray(g), w, atol=2e-5, rtol=1e-4, err_msg=f"input {i}")


def test_bfloat16_inputs_compute_in_float32(rng):
  """bfloat16 x1 and gate: the state stays float32 inside, so the result is the float64
  loop on the bfloat16-rounded inputs, rounded once to bfloat16 at the end."""
  import jax
  from jax import numpy as jnp

  k, shape = 2, (2, 64, 8)
  x1, alpha, beta, gate, state_bias = _inputs(rng, shape, shared=True, gated=True)
  x1_bf16, gate_bf16 = jnp.asarray(x1, jnp.bfloat16), jnp.asarray(gate, jnp.bfloat16)
  got = _kernel(k, True, True)(x1_bf16, alpha, beta, gate_bf16, state_bias)
  assert got.dtype == jnp.bfloat16
  rounded = [np.asarray(t, np.float64) for t in (x1_bf16, alpha, beta, gate_bf16, state_bias)]
  want = _numpy_recurrence(k, True, True)(rounded)
  np.testing.assert_allclose(np.asarray(got, np.float64), want, atol=2e-2, rtol=1e-2)
  dx1 = jax.grad(lambda x: _kernel(k, True, True)(x, alpha, beta, gate_bf16, state_bias).sum())(
      x1_bf16
  )
  assert dx1.dtype == jnp.bfloat16
  dx1_f32 = jax.grad(lambda x: _kernel(k, True, True)(x, alpha, beta, gate, state_bias).sum())(
      np.asarray(rounded[0], np.float32)
  )
  np.testing.assert_allclose(np.asarray(dx1, np.float32), np.asarray(dx1_f32), atol=3e-2, rtol=2e-2)


@pytest.mark.parametrize("k,residual,direction", [(1, "x1", "forward"), (4, "x2", "bidirectional")])
def test_the_layer_on_pallas_equals_the_layer_on_portable(rng, monkeypatch, k, residual, direction):
  if INTERPRET:
    monkeypatch.setenv(pallas_swish_rnn.INTERPRET_ENV, "1")
  layers = {
      name: SwishRNN(8, 6, step_size=k, residual=residual, direction=direction, implementation=name)
      for name in ("portable", "pallas")
  }
  x = rng.normal(size=(2, 9, 8)).astype("float32")
  mask = np.array([[1] * 9, [1] * 5 + [0] * 4], "int32")
  for layer in layers.values():
    layer.build(x.shape)
  for v in layers["portable"].weights:
    v.assign(rng.normal(scale=0.5, size=v.shape).astype("float32"))
  for mine, theirs in zip(layers["pallas"].weights, layers["portable"].weights):
    mine.assign(theirs)
  upstream = rng.normal(size=x.shape)
  (want, want_grads), (got, got_grads) = (
      outputs_and_gradients(layers[name], x, upstream, mask) for name in ("portable", "pallas")
  )
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
  for w, g in zip(want_grads, got_grads):
    np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_the_kernels_lower_to_triton_for_cuda(k):
  """The base size's shapes (d' = 2048) in bfloat16, gated, both residual forms: the
  forward and the backward kernel each become one Triton call."""
  for has_residual in (False, True):
    text = pallas_swish_rnn.triton_module_text((4, 128, 2048), k, has_residual, True, "bfloat16")
    assert text.count("__gpu$xla.gpu.triton") == 2
    assert f"swish_rnn_forward_k{k}" in text and f"swish_rnn_backward_k{k}" in text


def test_pallas_is_refused_on_a_cpu_in_one_line(monkeypatch):
  monkeypatch.delenv(pallas_swish_rnn.INTERPRET_ENV, raising=False)
  assert kernels.resolve(kernels.SWISH_RNN_FIELD, "auto") == "portable"
  with pytest.raises(InputError) as error:
    SwishRNN(8, 6, implementation="pallas")
  message = str(error.value)
  assert "\n" not in message
  assert "'pallas'" in message and "'cpu'" in message and keras.backend.backend() == "jax"
