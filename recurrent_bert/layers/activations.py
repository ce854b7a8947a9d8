"""Activation names used in configs, resolved to functions.

Under JAX the two GELUs carry a hand-written gradient that keeps only their input for
the backward pass. Autodiff of GELU keeps the pieces of its formula (x / 2, -x / √2, the
output and the matmul's product before the bias: four [B·T, d_ff] tensors a layer in
BERT-base's FFN, about 1.8 GB of memory traffic a training step on a GPU), where the
input alone gives the slope again. Both are computed in float32 and rounded to the
input's dtype once. Elsewhere Keras' `gelu`.

After a matmul, `get_biased_activation` gives act(x + bias) as one function: under JAX
the GELUs then keep the matmul's product and the bias, which are in memory anyway, instead
of writing their sum out for the backward pass (BERT-base's FFN: one [B·T, d_ff] tensor a
layer less written, 0.6 GB a step on a GPU).
"""

import functools
import math

import keras

from recurrent_bert.layers.kernels.bias_gradient import bias_gradient

# tanh GELU: 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))) (`_cdf`).
_TANH_SCALE = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715


def get_activation(name):
  """ "gelu" is the exact erf form; "gelu_approximate" the tanh form of TF1 BERT."""
  if name in ("gelu", "gelu_approximate"):
    approximate = name == "gelu_approximate"
    if keras.backend.backend() == "jax":
      return functools.partial(_jax_gelu(approximate), bias=None)
    return lambda x: keras.activations.gelu(x, approximate=approximate)
  if name in ("relu", "sigmoid", "tanh"):
    return keras.activations.get(name)
  raise ValueError(f"unknown activation {name!r}")


def _cdf(x, approximate: bool):
  """GELU(x) / x for float32 x, in jax.numpy: Φ(x), the standard normal CDF (exact), or
  s = sigmoid(2u), u = √(2/π) (x + 0.044715 x³), which is (1 + tanh(u)) / 2 without its
  cancellation to 0 in float32 from x ≈ -4 (tanh). Φ through erfc, for the same reason."""
  import jax  # pylint: disable=g-import-not-at-top

  if approximate:
    return jax.nn.sigmoid(2.0 * _TANH_SCALE * (x + _CUBIC * x * x * x))
  return 0.5 * jax.lax.erfc(-x * math.sqrt(0.5))


def _gelu_slope(x, approximate: bool):
  """d GELU / dx of float32 x: Φ(x) + x φ(x) (exact, φ the normal density), or
  s + 2 x s (1 - s) √(2/π) (1 + 3 · 0.044715 x²) (tanh, s = `_cdf`)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  cdf = _cdf(x, approximate)
  if approximate:
    return cdf + 2.0 * x * cdf * (1.0 - cdf) * _TANH_SCALE * (1.0 + 3 * _CUBIC * x * x)
  return cdf + x * jnp.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def get_biased_activation(name):
  """(x [..., N], bias [N]) -> act(x + bias) [...,  N] in x's dtype, for the activation
  after a matmul (module doc); None where the backend has no fused form (apply the
  activation to the sum there)."""
  if name in ("gelu", "gelu_approximate") and keras.backend.backend() == "jax":
    return _jax_gelu(name == "gelu_approximate")
  return None


@functools.cache
def _jax_gelu(approximate: bool):
  """GELU of x + bias with a gradient that keeps only x and the bias (module doc):
  x [..., N] float, bias None or [N] float -> [..., N] in x.dtype."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  def widened(x, bias):
    wide = x.astype(jnp.float32)
    return wide if bias is None else wide + bias.astype(jnp.float32)

  @jax.custom_vjp
  def gelu(x, bias):
    wide = widened(x, bias)
    return (wide * _cdf(wide, approximate)).astype(x.dtype)

  def forward(x, bias):
    return gelu(x, bias), (x, bias)

  def backward(saved, upstream):
    x, bias = saved
    # The barrier keeps XLA from moving the float32 conversion into the forward pass,
    # where it would keep x in float32: twice the memory and traffic of x itself.
    x = jax.lax.optimization_barrier(x)
    d_wide = upstream.astype(jnp.float32) * _gelu_slope(widened(x, bias), approximate)
    dx = d_wide.astype(x.dtype)
    if bias is None:
      return dx, None
    return dx, bias_gradient(dx, range(x.ndim - 1)).astype(bias.dtype)

  gelu.defvjp(forward, backward)
  return gelu
