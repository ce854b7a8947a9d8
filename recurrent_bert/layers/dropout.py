"""Keras' Dropout with cheaper random bits under JAX.

Under JAX, `keras.layers.Dropout` draws its mask with `jax.random.bernoulli` on the
default threefry key: a uniform float per element from threefry's bits, then a compare.
At BERT-base size that is some 300 million values per training step, and on a GPU JAX
runs threefry as a kernel of its own whose output goes through memory. This layer keeps
an element when a 32-bit hash of (seed, the element's row-major index) is at or above the
integer `round(rate * 2**32)` (`kernels/dropout_bits.py`, the hash the Pallas attention
kernels draw with): integer arithmetic on an iota, which XLA fuses into the select, so
the bits take no kernel and no memory of their own (XLA's Philox generator, tried before,
took a kernel for its counters and laid the masks out batch-minor, which cost transposes
around every residual add), and the kept fraction is 1 - rate to 2**-32.

Everything else is Keras' layer: the same class name (so the same automatic layer names),
config and seed generator, whose one state variable is where Keras keeps it, so saved
models and checkpoints (their `seed_generator_N/...` states included) do not change. Each
training call takes the generator's next seed, as Keras' Dropout does, inside Keras'
stateless scope too (`stateless_call` under `jax.jit`: the JAX loop and Keras' trainer).
The masks are other masks than `keras.layers.Dropout` draws from the same seed; only
their law is the same. TensorFlow and PyTorch run the parent's call unchanged, and so does
JAX under a Keras distribution over several devices (the multi-device programs have been
checked with Keras' threefry draw, which is split by batch shard, and with no other).
"""

import keras
import numpy as np

from recurrent_bert.layers.kernels import dropout_bits


def _jax_dropout(inputs, rate: float, noise_shape, seed):
  """inputs with each element (or each `noise_shape` block) kept with probability 1 - rate
  and scaled by 1 / (1 - rate), else zero.

  Args:
    inputs: [...] float, any shape.
    rate: the fraction dropped, 0 < rate < 1.
    noise_shape: None, or the mask's shape (None entries: inputs' size there), which is
      broadcast to inputs' shape.
    seed: [2] uint32, a Keras seed (a SeedGenerator's next value).
  Returns:
    [...] like inputs, its dtype; a kept value is x * float32(1 / (1 - rate)) rounded to it.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  shape = inputs.shape
  if noise_shape is not None:
    shape = tuple(size if wanted is None else wanted for size, wanted in zip(shape, noise_shape))
  bits = dropout_bits.keep_bits_of_shape(seed, shape)
  threshold = dropout_bits.threshold(rate)
  keep = jnp.broadcast_to(bits >= threshold, inputs.shape)
  # Scaled in float32 at least, by 1 / (1 - rate) rounded once: XLA turns a division by a
  # constant into this product anyway, and a 16-bit factor (bfloat16's 1/0.9 is 1.109)
  # would bias every kept value; only the product is rounded to the inputs' dtype.
  wide = jnp.promote_types(inputs.dtype, jnp.float32)
  scaled = (inputs.astype(wide) * np.float32(1.0 / (1.0 - rate))).astype(inputs.dtype)
  return jax.lax.select(keep, scaled, jnp.zeros_like(inputs))


def on_one_device() -> bool:
  """Whether no Keras distribution spreads the computation over several devices."""
  distribution = keras.distribution.distribution()
  return distribution is None or distribution.device_mesh.devices.size == 1


@keras.saving.register_keras_serializable(package="recurrent_bert")
class Dropout(keras.layers.Dropout):
  """`keras.layers.Dropout`, whose JAX masks come from a hash of position (module doc).

  Args: as `keras.layers.Dropout` (rate, noise_shape, seed).
  Call: inputs [...] float, any shape; training (bool). Output: like inputs.
  """

  def call(self, inputs, training=False):
    active = training and 0 < self.rate < 1
    if not (active and keras.backend.backend() == "jax" and on_one_device()):
      return super().call(inputs, training=training)
    return _jax_dropout(inputs, self.rate, self.noise_shape, self.seed_generator.next())
