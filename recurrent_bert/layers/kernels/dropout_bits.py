"""Dropout's random bits as a function of position: a 32-bit hash of (seed, index).

Element `index` of a mask drawn with the two-word seed (s0, s1) gets the bits
`mix(mix(index · 0x9E3779B9 + s0) + s1)`, where `mix` is an xor-shift-multiply round on
uint32 (wrapping arithmetic), and is kept when they are at or above
`threshold(rate) = round(rate · 2³²)`. Being plain element-wise integer arithmetic on an
iota, XLA fuses it into whatever consumes the mask (no bits go through memory, no kernel
of their own), a backward pass can recompute it instead of storing it, and the Pallas
attention kernels draw the same function inside the kernel. The seed is a Keras seed (a
SeedGenerator's next value: its seed and its call count).

JAX is imported inside the functions, so importing this module imports no framework.
"""

import numpy as np

# Mixer constants (odd, well-spread bits).
_GOLDEN = 0x9E3779B9
_MIX_1, _MIX_2 = 0x7FEB352D, 0x846CA68B


def _mix(x):
  """One xor-shift-multiply round on uint32 (wrapping arithmetic)."""
  from jax import numpy as jnp

  x = x ^ (x >> jnp.uint32(16))
  x = x * jnp.uint32(_MIX_1)
  x = x ^ (x >> jnp.uint32(15))
  x = x * jnp.uint32(_MIX_2)
  return x ^ (x >> jnp.uint32(16))


def keep_bits(seed0, seed1, index):
  """uint32 bits of element `index` (uint32) under the seed's two uint32 words."""
  from jax import numpy as jnp

  return _mix(_mix(index * jnp.uint32(_GOLDEN) + seed0) + seed1)


def keep_bits_of_shape(seed, shape):
  """The bits of every element of an array of `shape`, by its row-major index.

  Args:
    seed: [2] uint32 (or anything that casts to it).
    shape: the mask's shape, fewer than 2³² elements.
  Returns:
    [*shape] uint32.
  """
  import jax
  from jax import numpy as jnp

  shape = tuple(int(n) for n in shape)
  index = jax.lax.iota(jnp.uint32, int(np.prod(shape, dtype=np.int64))).reshape(shape)
  seed = jnp.asarray(seed).astype(jnp.uint32)
  return keep_bits(seed[0], seed[1], index)


def threshold(rate: float) -> np.uint32:
  """The bits at or above which an element is kept: 1 - rate of them, to 2**-32."""
  return np.uint32(min(round(rate * 2.0**32), 2**32 - 1))
