"""The bidirectional LSTM of TRANS-BLSTM through cuDNN under JAX (`jax.experimental.rnn`).

Keras' own LSTM never reaches cuDNN under JAX when a mask is passed (it falls back to a
per-step loop), so `BidirectionalLSTM` calls `jax.experimental.rnn.lstm` itself. That
call reads the right padding from per-row `seq_lengths` and starts the backward direction
at each row's last real token, as the other implementations do.

Its weights are one flat float32 vector in cuDNN's layout (jax/experimental/rnn.py, jax
0.10.2): the matrices of every pseudo-layer (forward, then backward), then their biases,

  (W_ih^f [4u, D], W_hh^f [4u, u], W_ih^b, W_hh^b, b_ih^f [4u], b_hh^f [4u], b_ih^b, b_hh^b)

each flattened row-major, gates ordered (i, f, g, o) along the 4u axis as in Keras, so a
Keras kernel [D, 4u] is W_ih transposed. cuDNN adds two biases; Keras has one, which goes
in b_ih, with zeros in b_hh (their gradients differ only in where they land).

Only the GPU (CUDA) lowering exists: on CPU `jax.experimental.rnn.lstm` cannot even be
traced. `reference=True` runs `jax.experimental.rnn.lstm_ref` instead (a `lax.scan` over
the same flat vector, read back with JAX's own `unpack_lstm_weights`), which runs
anywhere; the CPU tests use it to check everything around the cuDNN kernel.

JAX is imported inside the functions, so importing this module imports no framework.
"""

import keras
import numpy as np


def available() -> bool:
  """Whether the layers build for a GPU (the default JAX device's platform, or
  `kernels.jax_target`'s), where `jax.experimental.rnn.lstm` runs."""
  from recurrent_bert.layers import kernels  # pylint: disable=g-import-not-at-top

  return kernels.jax_platform() == "gpu"


def pack_weights(forward, backward, xp=np):
  """Keras-layout weights of both directions as cuDNN's flat weight vector.

  Written in array methods shared by numpy, jax.numpy and torch, so the wrapper runs this
  same function on its traced weights (xp=jax.numpy) and the tests on numpy arrays.

  Args:
    forward, backward: (kernel [D, 4u], recurrent_kernel [u, 4u], bias [4u]) of each
      direction, in Keras' layout (gates i, f, g, o).
    xp: the array namespace (`concatenate`, `zeros_like`).
  Returns:
    [8u (D + u) + 16u], the module docstring's layout.
  """
  matrices, biases = [], []
  for kernel, recurrent_kernel, bias in (forward, backward):
    matrices += [kernel.T, recurrent_kernel.T]
    biases += [bias, xp.zeros_like(bias)]
  return xp.concatenate([w.reshape(-1) for w in matrices + biases])


def bidirectional_lstm(x, lengths, forward, backward, reference=False):
  """Both LSTM directions over right-padded rows, concatenated, through cuDNN.

  Computes in float32 (the only type `jax.experimental.rnn` takes) and returns x's dtype.
  cuDNN may use TF32 for the matmuls on Ampere and later, as JAX's default matmul
  precision does. Rows of length 0 (which cuDNN rejects, jax-ml/jax#17966) run as
  length 1, and their outputs are zeroed.

  Args:
    x: [B, T, D] float, right-padded.
    lengths: [B] int, real positions per row (the attention mask's row sums).
    forward, backward: (kernel [D, 4u], recurrent_kernel [u, 4u], bias [4u]) of each
      direction in Keras' layout: jax arrays or Keras variables.
    reference: run `jax.experimental.rnn.lstm_ref` (a scan, any device) instead of the
      cuDNN kernel.
  Returns:
    [B, T, 2u]: forward outputs then backward outputs, 0 at padded positions.
  """
  from jax.experimental import rnn  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  # A Keras variable's value, read here, is the one its stateless or autocast scope gives.
  forward, backward = (tuple(map(keras.ops.convert_to_tensor, w)) for w in (forward, backward))
  batch, _, depth = x.shape
  units = forward[1].shape[0]
  weights = pack_weights(forward, backward, xp=jnp).astype(jnp.float32)
  lengths = jnp.asarray(lengths).astype(jnp.int32)
  seq_lengths = jnp.maximum(lengths, 1)
  zeros = jnp.zeros((2, batch, units), jnp.float32)
  inputs = x.astype(jnp.float32)
  # Both take: lengths, input size, hidden size, 1 layer, no dropout, bidirectional.
  common = (seq_lengths, depth, units, 1, 0.0, True)
  if reference:
    y, _, _ = rnn.lstm_ref(
        inputs, zeros, zeros, *rnn.unpack_lstm_weights(weights, depth, units, 1, True), *common
    )
  else:
    y, _, _ = rnn.lstm(inputs, zeros, zeros, weights, *common)
  # cuDNN already writes 0 at padded positions; only clamped empty rows remain.
  y = jnp.where((lengths > 0)[:, None, None], y, 0.0)
  return y.astype(x.dtype)
