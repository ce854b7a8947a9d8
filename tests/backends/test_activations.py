"""The GELUs under JAX (layers/activations.py: a hand-written gradient that keeps only the
input): values and gradients against float64 formulas checked by central differences, in
float32 and bfloat16, and what the backward pass keeps. JAX session only: the other
backends run Keras' gelu."""

import math

import numpy as np
import pytest

from tests.backends.support import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="the custom gradient is JAX's")

_ERFC = np.vectorize(math.erfc)


def _gelu64(x, approximate):
  """GELU in float64 numpy: x Φ(x), or the tanh form of TF1 BERT."""
  if approximate:  # 0.5 x (1 + tanh(u)), written as x / (1 + exp(-2u)): exact in the left tail
    with np.errstate(over="ignore"):  # exp(-2u) = inf far left: x / inf = 0, as it should
      return x / (1.0 + np.exp(-2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
  return 0.5 * x * _ERFC(-x / math.sqrt(2.0))  # erfc: no cancellation in the left tail


def _slope64(x, approximate):
  """d GELU / dx in float64, by central differences of `_gelu64` (h = 1e-6)."""
  h = 1e-6
  return (_gelu64(x + h, approximate) - _gelu64(x - h, approximate)) / (2 * h)


@pytest.mark.parametrize("approximate", [False, True])
@pytest.mark.parametrize("dtype, tolerance", [("float32", 2e-6), ("bfloat16", 2**-8)])
def test_gelu_values_and_gradients(approximate, dtype, tolerance):
  import jax
  import jax.numpy as jnp

  from recurrent_bert.layers.activations import get_activation

  gelu = get_activation("gelu_approximate" if approximate else "gelu")
  x64 = np.concatenate([np.linspace(-9.0, 9.0, 181), [-30.0, 30.0, 0.0]])
  upstream64 = np.linspace(0.5, 1.5, x64.size)
  x = jnp.asarray(x64, dtype)
  x64 = np.asarray(x.astype(jnp.float32), np.float64)  # the inputs as rounded
  upstream = jnp.asarray(upstream64, dtype)
  upstream64 = np.asarray(upstream.astype(jnp.float32), np.float64)

  y, vjp = jax.vjp(gelu, x)
  (dx,) = vjp(upstream)

  assert y.dtype == dtype and dx.dtype == dtype
  atol = 1e-12 if dtype == "float32" else 1e-6  # the tails' values, far below either
  np.testing.assert_allclose(
      np.asarray(y, np.float64), _gelu64(x64, approximate), rtol=tolerance, atol=atol
  )
  np.testing.assert_allclose(
      np.asarray(dx, np.float64),
      upstream64 * _slope64(x64, approximate),
      rtol=tolerance,
      atol=atol,
  )


def test_gelu_backward_keeps_only_its_input(capsys):
  """Keras' own GELU keeps three arrays of x's shape for its gradient (the reason for the
  hand-written one); the package's keeps x."""
  import jax
  import jax.numpy as jnp
  import keras

  from recurrent_bert.layers.activations import get_activation

  x = jnp.linspace(-3.0, 3.0, 64, dtype=jnp.bfloat16)

  def kept(fn):
    jax.ad_checkpoint.print_saved_residuals(fn, x)
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("bf16[64]")]

  assert len(kept(lambda v: keras.activations.gelu(v, approximate=False))) > 1
  for name in ("gelu", "gelu_approximate"):
    assert kept(get_activation(name)) == ["bf16[64] from the argument x"]


@pytest.mark.parametrize("approximate", [False, True])
@pytest.mark.parametrize("dtype, tolerance", [("float32", 2e-6), ("bfloat16", 2**-7)])
def test_biased_gelu_values_and_gradients(approximate, dtype, tolerance):
  """act(x + bias) after a matmul: the value, x's gradient and the bias' (summed over the
  rows) against float64 formulas of the sum."""
  import jax
  import jax.numpy as jnp

  from recurrent_bert.layers.activations import get_biased_activation

  gelu = get_biased_activation("gelu_approximate" if approximate else "gelu")
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(0.0, 3.0, (7, 5)), dtype)
  bias = jnp.asarray(rng.normal(0.0, 1.0, (5,)), dtype)
  upstream = jnp.asarray(rng.uniform(0.5, 1.5, (7, 5)), dtype)
  x64, bias64, upstream64 = (
      np.asarray(t.astype(jnp.float32), np.float64) for t in (x, bias, upstream)
  )
  sum64 = x64 + bias64

  y, vjp = jax.vjp(gelu, x, bias)
  dx, dbias = vjp(upstream)

  assert y.dtype == dx.dtype == dbias.dtype == dtype
  np.testing.assert_allclose(
      np.asarray(y, np.float64), _gelu64(sum64, approximate), rtol=tolerance, atol=1e-6
  )
  d_sum64 = upstream64 * _slope64(sum64, approximate)
  np.testing.assert_allclose(np.asarray(dx, np.float64), d_sum64, rtol=tolerance, atol=1e-6)
  np.testing.assert_allclose(
      np.asarray(dbias, np.float64), d_sum64.sum(axis=0), rtol=tolerance, atol=1e-5
  )


def test_biased_gelu_keeps_the_product_and_the_bias_not_their_sum(capsys):
  """The FFN's activation keeps what is in memory anyway (the matmul's product and the
  bias); `gelu(x + bias)` would keep the sum, a [rows, d_ff] array the forward pass then
  writes out for the backward one."""
  import jax
  import jax.numpy as jnp

  from recurrent_bert.layers.activations import get_activation
  from recurrent_bert.layers.activations import get_biased_activation

  x, bias = jnp.ones((4, 8), jnp.bfloat16), jnp.ones((8,), jnp.bfloat16)

  def kept(fn):
    jax.ad_checkpoint.print_saved_residuals(fn, x, bias)
    return sorted(line for line in capsys.readouterr().out.splitlines() if "bf16" in line)

  (the_sum,) = kept(lambda x, b: get_activation("gelu")(x + b))
  assert the_sum.startswith("bf16[4,8] output of add")
  assert kept(get_biased_activation("gelu")) == [
      "bf16[4,8] from the argument x",
      "bf16[8] from the argument bias",
  ]
