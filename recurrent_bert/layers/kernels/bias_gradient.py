"""A bias' gradient under JAX, summed where XLA computes it with no pass of its own.

The gradient of `x + bias` (bias broadcast along rows) is the upstream gradient summed over
the rows. The hand-written gradients that replace such an add (the biased GELU in
layers/activations.py, the Pallas attention's and BLSTM's in-kernel biases) sum it as
autodiff of the add does, in the gradient's own dtype: XLA then computes the sum in the
pass that writes the gradient (one multi-output kernel). A float32 sum of a 16-bit
gradient made it read the gradient again in a pass of its own, and where the gradient is
rounded from a float32 product, write that product out first (the FFN compiled for an
H100: 1.8 GB a training step more).

JAX is imported inside the function, so importing this module imports no framework.
"""

from typing import Sequence


def bias_gradient(d, axes: Sequence[int]):
  """d [...] summed over `axes` (the rows a bias was broadcast along), in d's dtype."""
  import jax
  from jax import numpy as jnp

  return jax.lax.reduce(d, jnp.zeros((), d.dtype), jax.lax.add, tuple(axes))
