"""Activation names used in configs, resolved to functions.

Under JAX the two GELUs carry a hand-written gradient that keeps only their input for
the backward pass. Autodiff of GELU keeps the pieces of its formula (x / 2, -x / √2, the
output and the matmul's product before the bias: four [B·T, d_ff] tensors a layer in
BERT-base's FFN, about 1.8 GB of memory traffic a training step on a GPU), where the
input alone gives the slope again. Both are computed in float32 and rounded to the
input's dtype once. Elsewhere Keras' `gelu`.
"""

import functools
import math

import keras

# tanh GELU: 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))) (`_cdf`).
_TANH_SCALE = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715


def get_activation(name):
  """ "gelu" is the exact erf form; "gelu_approximate" the tanh form of TF1 BERT."""
  if name in ("gelu", "gelu_approximate"):
    approximate = name == "gelu_approximate"
    if keras.backend.backend() == "jax":
      return _jax_gelu(approximate)
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


@functools.cache
def _jax_gelu(approximate: bool):
  """GELU with a gradient that keeps only x (module doc): x [...] float -> [...] x.dtype."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  @jax.custom_vjp
  def gelu(x):
    wide = x.astype(jnp.float32)
    return (wide * _cdf(wide, approximate)).astype(x.dtype)

  def forward(x):
    return gelu(x), x

  def backward(x, upstream):
    # The barrier keeps XLA from moving the float32 conversion into the forward pass,
    # where it would keep x in float32: twice the memory and traffic of x itself.
    x = jax.lax.optimization_barrier(x)
    slope = _gelu_slope(x.astype(jnp.float32), approximate)
    return ((upstream.astype(jnp.float32) * slope).astype(x.dtype),)

  gelu.defvjp(forward, backward)
  return gelu
