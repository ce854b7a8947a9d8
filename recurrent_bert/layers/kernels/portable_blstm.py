"""The bidirectional LSTM in `keras.ops` ("portable"), for JAX and PyTorch.

Both directions advance in one scan over time, each step one batched [2, B, u] x
[2, u, 4u] matmul (as TensorFlow's "fused" kernel does); the backward direction reads
each row reversed within its real prefix, so it starts at the row's last real token and
padding never reaches a real one.

The cell state c and the gates are float32 whatever the compute dtype (a 512-step chain
of bfloat16 roundings drifts); h, which feeds the matmul, is in the compute dtype.

The gradient of the recurrence is written by hand. The forward scan saves h, c and the
activated gates (i, f, g, o); the reverse scan then needs one matmul a step,

  dz[t] = (di i(1-i), df f(1-f), dg (1-g²), do o(1-o)),  dh[t-1] += dz[t] R^T,

where autodiff through the scan would also accumulate R's gradient inside the loop, a
second matmul a step and a [2, u, 4u] carry. Here R's gradient is one matmul after the
loop, dR = sum_t h[t-1]^T dz[t], over all T·B rows at once.
"""

from keras import ops

# Time steps per iteration of the scans' loops (lax.scan's `unroll` under JAX; PyTorch's
# Python loop is the same either way). What it computes does not depend on it. On a GPU
# each iteration of XLA's while loop may cost more than its kernels;
# benchmarks/kernels_side_by_side.py times 1 and 8 side by side, for a card to choose.
UNROLL = 1


def reversed_positions(lengths, length):
  """[B, T]: position t of each row reversed within its real prefix (padding stays put;
  the map is its own inverse). lengths: [B] int; length: T."""
  positions = ops.arange(length, dtype="int32")[None, :]
  lengths = ops.cast(lengths, "int32")[:, None]
  return ops.where(positions < lengths, lengths - 1 - positions, positions)


def reversed_within_lengths(x, reverse):
  """x [B, T, ...] with each row's positions permuted by `reverse` [B, T, 1]
  (`reversed_positions`, its own inverse), and as the gradient the same gather of the
  upstream gradient. Autodiff would take a gather's gradient as a scatter-add, which a GPU
  runs as atomic adds (for 16-bit values, compare-and-swap loops) though every position
  gets exactly one value."""

  @ops.custom_gradient
  def run(x):
    def grad(*grad_args, upstream=None):
      dy = grad_args[0] if upstream is None else upstream  # (keras.ops.custom_gradient)
      return ops.take_along_axis(dy, reverse, axis=1)

    return ops.take_along_axis(x, reverse, axis=1), grad

  return run(x)


def bidirectional_lstm(x, lengths, forward, backward, unroll=None):
  """Forward and backward LSTMs (Keras' weight layout, gates i, f, g, o) over right-padded rows.

  Args:
    x: [B, T, D].
    lengths: [B] int, real positions per row.
    forward, backward: (kernel [D, 4u], recurrent_kernel [u, 4u], bias [4u]) of each
      direction, in x's dtype.
    unroll: time steps per loop iteration; None is `UNROLL`.
  Returns:
    [B, T, 2u]: (forward, backward) at the original positions, 0 at padded ones.
  """
  batch, length = ops.shape(x)[0], ops.shape(x)[1]
  units = ops.shape(forward[1])[0]
  reverse = reversed_positions(lengths, length)[:, :, None]  # [B, T, 1]
  # Both directions' input projections as one batched matmul of the tokens as rows,
  # [2, B·T, D] x [2, D, 4u] (layers/token_rows.py says why rows).
  depth = ops.shape(x)[2]
  inputs = ops.stack([x, reversed_within_lengths(x, reverse)])
  inputs = ops.reshape(inputs, (2, batch * length, depth))
  kernels = ops.stack([forward[0], backward[0]])
  biases = ops.stack([forward[2], backward[2]])  # [2, 4u]
  products = ops.reshape(ops.matmul(inputs, kernels), (2, batch, length, -1))  # [2, B, T, 4u]
  recurrent_kernels = ops.stack([forward[1], backward[1]])  # [2, u, 4u]
  steps = ops.transpose(products + biases[:, None, None, :], (2, 0, 1, 3))  # [T, 2, B, 4u]
  h = recurrence(steps, recurrent_kernels, batch, units, x.shape[1], unroll)  # [T, 2, B, u]
  h = ops.transpose(h, (1, 2, 0, 3))  # [2, B, T, u]
  real = ops.cast(ops.arange(length)[None, :] < ops.cast(lengths, "int32")[:, None], x.dtype)
  outputs = ops.concatenate([h[0], reversed_within_lengths(h[1], reverse)], axis=-1)
  return outputs * real[:, :, None]


def cell(z, c):
  """One LSTM step from its pre-activations z [..., 4u] (i, f, g, o) and the previous
  cell state c [..., u]: (h, c, activated gates [..., 4u]). Plain `keras.ops`, so
  TensorFlow's "fused" kernel (tf_blstm) runs the same step."""
  i, f, g, o = ops.split(z, 4, axis=-1)
  i, f, g, o = ops.sigmoid(i), ops.sigmoid(f), ops.tanh(g), ops.sigmoid(o)
  c = f * c + i * g
  return o * ops.tanh(c), c, ops.concatenate([i, f, g, o], axis=-1)


def cell_gradient(dh, dc_next, gates, c, c_prev):
  """Reverse of `cell`: from the gradients on its h and (through later steps) its c,
  the gradient on z, and the part of the gradient on c_prev that flows through c.

    dc = dc_next + dh o tanh'(c),  dz = (dc g i', dc c_prev f', dc i g', dh tanh(c) o')
  with act' the activations' derivatives written from their outputs.
  """
  i, f, g, o = ops.split(gates, 4, axis=-1)
  tanh_c = ops.tanh(c)
  dc = dc_next + dh * o * (1 - tanh_c * tanh_c)
  dz = ops.concatenate(
      [
          dc * g * i * (1 - i),
          dc * c_prev * f * (1 - f),
          dc * i * (1 - g * g),
          dh * tanh_c * o * (1 - o),
      ],
      axis=-1,
  )
  return dz, dc * f


def _states(steps, recurrent_kernels, batch, units, length, unroll=1):
  """The forward scan: h [T, 2, B, u] (steps' dtype), c and the gates [T, 2, B, u | 4u]
  (float32)."""
  dtype = steps.dtype

  def step(state, z):  # z: [2, B, 4u]
    h, c = state
    h, c, gates = cell(ops.cast(z + ops.matmul(h, recurrent_kernels), "float32"), c)
    h = ops.cast(h, dtype)
    return (h, c), (h, c, gates)

  initial = (ops.zeros((2, batch, units), dtype), ops.zeros((2, batch, units), "float32"))
  # A static trip count where T is known: XLA needs one.
  _, (h, c, gates) = ops.scan(step, initial, steps, length=length, unroll=unroll)
  return h, c, gates


def earlier(t):
  """t [T, ...] shifted one step later: out[s] = t[s - 1], zeros at s = 0."""
  return ops.concatenate([ops.zeros_like(t[:1]), t[:-1]], axis=0)


def _gradients(dh, h, c, gates, recurrent_kernels, unroll=1):
  """(d steps [T, 2, B, 4u], d recurrent_kernels [2, u, 4u]) from dh [T, 2, B, u]."""
  dtype = recurrent_kernels.dtype
  kernels_t = ops.transpose(recurrent_kernels, (0, 2, 1))  # [2, 4u, u]

  def step(carry, inputs):  # reverse time: the gradients arriving at h[t] and c[t]
    dh_later, dc_later = carry
    dh_t, c_t, c_earlier, gates_t = inputs
    dh_t = ops.cast(dh_t, "float32") + dh_later
    dz, dc_earlier = cell_gradient(dh_t, dc_later, gates_t, c_t, c_earlier)  # [2, B, 4u]
    dh_earlier = ops.cast(ops.matmul(ops.cast(dz, dtype), kernels_t), "float32")
    return (dh_earlier, dc_earlier), dz

  zeros = ops.zeros_like(c[0])
  _, dz = ops.scan(
      step,
      (zeros, zeros),
      (dh, c, earlier(c), gates),
      length=h.shape[0],
      reverse=True,
      unroll=unroll,
  )
  dz_compute = ops.cast(dz, dtype)
  # One matmul for all steps: [2, u, T·B] x [2, T·B, 4u].
  d_kernels = ops.einsum("tdbu,tdbg->dug", earlier(h), dz_compute)
  return dz_compute, d_kernels


def recurrence(steps, recurrent_kernels, batch, units, length, unroll=None):
  """Both directions' LSTM recurrence with the hand-written gradient (module docstring).

  Args:
    steps: [T, 2, B, 4u], x W + b of each direction at each step (gates i, f, g, o).
    recurrent_kernels: [2, u, 4u] (R), in steps' dtype.
    batch, units: B and u.
    length: T, a Python int where it is static.
    unroll: time steps per loop iteration; None is `UNROLL`.
  Returns:
    h: [T, 2, B, u] in steps' dtype.
  """
  unroll = UNROLL if unroll is None else unroll

  @ops.custom_gradient
  def run(steps, recurrent_kernels):
    h, c, gates = _states(steps, recurrent_kernels, batch, units, length, unroll)

    def grad(*grad_args, upstream=None):
      # TensorFlow and JAX pass the output's gradient; PyTorch passes the inputs and
      # `upstream` (keras.ops.custom_gradient's contract).
      dh = grad_args[0] if upstream is None else upstream
      return _gradients(dh, h, c, gates, recurrent_kernels, unroll)

    return h, grad

  return run(steps, recurrent_kernels)
