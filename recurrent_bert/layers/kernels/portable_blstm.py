"""The bidirectional LSTM in `keras.ops` ("portable"), for JAX and PyTorch.

Both directions advance in one scan over time, each step one batched [2, B, u] x
[2, u, 4u] matmul (as TensorFlow's "fused" kernel does); the backward direction reads
each row reversed within its real prefix, so it starts at the row's last real token and
padding never reaches a real one. Autodiff through the scan keeps each step's state and
gates, which is what a hand-written backward would save too (lax.scan on JAX).
"""

from keras import ops


def reversed_positions(lengths, length):
  """[B, T]: position t of each row reversed within its real prefix (padding stays put;
  the map is its own inverse). lengths: [B] int; length: T."""
  positions = ops.arange(length, dtype="int32")[None, :]
  lengths = ops.cast(lengths, "int32")[:, None]
  return ops.where(positions < lengths, lengths - 1 - positions, positions)


def bidirectional_lstm(x, lengths, forward, backward):
  """Forward and backward LSTMs (Keras' weight layout, gates i, f, g, o) over right-padded rows.

  Args:
    x: [B, T, D].
    lengths: [B] int, real positions per row.
    forward, backward: (kernel [D, 4u], recurrent_kernel [u, 4u], bias [4u]) of each
      direction, in x's dtype.
  Returns:
    [B, T, 2u]: (forward, backward) at the original positions, 0 at padded ones.
  """
  batch, length = ops.shape(x)[0], ops.shape(x)[1]
  units = ops.shape(forward[1])[0]
  reverse = reversed_positions(lengths, length)[:, :, None]  # [B, T, 1]
  gate_inputs = ops.stack(  # [2, B, T, 4u]
      [
          ops.matmul(x, forward[0]) + forward[2],
          ops.matmul(ops.take_along_axis(x, reverse, axis=1), backward[0]) + backward[2],
      ]
  )
  recurrent_kernels = ops.stack([forward[1], backward[1]])  # [2, u, 4u]

  # The state is h and c stacked, [2, 2, B, u] (h/c, direction, row, unit), and each step
  # emits all of it: TensorFlow's ops.scan wants outputs shaped like the carry.
  def step(state, z):  # z: [2, B, 4u]
    z = z + ops.matmul(state[0], recurrent_kernels)
    i, f, g, o = ops.split(z, 4, axis=-1)
    c = ops.sigmoid(f) * state[1] + ops.sigmoid(i) * ops.tanh(g)
    state = ops.stack([ops.sigmoid(o) * ops.tanh(c), c])
    return state, state

  initial = ops.zeros((2, 2, batch, units), x.dtype)
  # A static trip count where T is known: XLA (TensorFlow's jit_compile) needs one.
  steps = ops.transpose(gate_inputs, (2, 0, 1, 3))  # [T, 2, B, 4u]
  _, states = ops.scan(step, initial, steps, length=x.shape[1])
  h = states[:, 0]  # [T, 2, B, u]
  h = ops.transpose(h, (1, 2, 0, 3))  # [2, B, T, u]
  real = ops.cast(ops.arange(length)[None, :] < ops.cast(lengths, "int32")[:, None], x.dtype)
  outputs = ops.concatenate([h[0], ops.take_along_axis(h[1], reverse, axis=1)], axis=-1)
  return outputs * real[:, :, None]
