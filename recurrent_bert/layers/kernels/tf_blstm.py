"""TensorFlow kernels of the TRANS-BLSTM bidirectional LSTM ("fused", "block", "scan").

Chosen by `layers.blstm.BidirectionalLSTM` on Keras' TensorFlow backend only; imported
lazily there, so no other backend loads TensorFlow. Each `*_directions` function runs both
directions of the layer's `keras.layers.Bidirectional(LSTM)` weights:
  cells: (forward cell, backward cell), each with kernel [D, 4u], recurrent_kernel
    [u, 4u], bias [4u] (gates i, f, g, o).
  x: [B, T, D]; attention_mask: [B, T] (1 real, 0 padding, right-padded).
  Returns [B, T, 2u], (forward, backward) concatenated, 0 at padded positions.
"""

from keras import ops
import tensorflow as tf

from recurrent_bert.layers.kernels.portable_blstm import cell
from recurrent_bert.layers.kernels.portable_blstm import cell_gradient
from recurrent_bert.layers.kernels.tf_graph import dense_2d
from recurrent_bert.layers.kernels.tf_graph import dynamic_update_slice


def lstm_scan(x, kernel, recurrent_kernel, bias):
  """A left-to-right LSTM over every position, in Keras' weight layout.

  Gates are ordered (input, forget, cell, output) as in `keras.layers.LSTM`; the input
  projection of all positions is one matmul outside the loop, so each `tf.scan` step
  does only the [B, u] x [u, 4u] recurrent matmul.

  Args:
    x: [B, T, D].
    kernel: [D, 4u]; recurrent_kernel: [u, 4u]; bias: [4u].
  Returns:
    h: [B, T, u], the hidden state after each position.
  """
  units = recurrent_kernel.shape[0]
  gate_inputs = tf.einsum("btd,dg->tbg", x, kernel) + bias  # [T, B, 4u]
  batch = tf.shape(x)[0]
  zeros = tf.zeros([batch, units], x.dtype)

  def step(carry, gates_t):
    h, c = carry
    z = gates_t + tf.matmul(h, recurrent_kernel)
    i, f, g, o = tf.split(z, 4, axis=-1)
    c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
    h = tf.sigmoid(o) * tf.tanh(c)
    return h, c

  h, _ = tf.scan(step, gate_inputs, initializer=(zeros, zeros))
  return tf.transpose(h, [1, 0, 2])


def _reversed(positions, lengths):
  """Positions (any shape, broadcast with lengths) in a sequence reversed within its
  real prefix, as `tf.reverse_sequence` maps them (its own inverse)."""
  return tf.where(positions < lengths, lengths - 1 - positions, positions)


def _direction_indices(positions):
  """[B, 2, 3] gather/scatter indices (b, position, direction) of one loop step, from
  its positions [B, 2] in each direction."""
  batch = tf.shape(positions)[0]
  b = tf.broadcast_to(tf.range(batch)[:, None], tf.shape(positions))
  n = tf.broadcast_to(tf.range(2)[None, :], tf.shape(positions))
  return tf.stack([b, positions, n], -1)


def _fused_forward(forward_inputs, backward_inputs, forward_kernel, backward_kernel, lengths):
  """Both LSTM directions in one XLA loop; returns the outputs and what the gradient
  needs (no autodiff state).

  Step t advances the forward direction at position t and the backward one at the
  reversed position (`_reversed`), reading the gate inputs and writing the outputs at
  those positions: no reversed or time-major copies outside the loop. Each step is one
  batched [2, B, u] x [2, u, 4u] matmul, so the loop runs T times, not 2T. Each
  direction's tensors stay separate outside the program (stacking [u, 4u] kernels or
  [B, T, 4u] inputs there would hold extra copies until the backward pass).

  Args:
    forward_inputs, backward_inputs: [B, T, 4u], x W + b of each direction at each
      position, gates ordered (i, f, g, o) as in Keras.
    forward_kernel, backward_kernel: [u, 4u], the recurrent kernels.
    lengths: [B] int32, real tokens per sequence (right padding).
  Returns:
    h: [B, T, 2, u], each direction's output at each position, 0 at padded positions
    (the state still runs through them, as in the other implementations, but nothing
    reads it: an output zeroed here needs no mask product, nor its copy, outside);
    c: [T, 2, B, u] and
    gates: [T, 2, B, 4u] (the activated i, f, g, o), in loop order, saved for
    `_fused_backward` (recomputing the gates would redo the recurrent matmul).
  """
  batch, length = tf.shape(forward_inputs)[0], tf.shape(forward_inputs)[1]
  units = forward_kernel.shape[0]
  kernels = tf.stack([forward_kernel, backward_kernel])  # [2, u, 4u]
  reversed_positions = _reversed(tf.range(length)[:, None], lengths)  # [T, B]
  zeros = tf.zeros([2, batch, units], forward_inputs.dtype)

  def body(t, h, c, h_out, c_all, gates_all):
    backward_positions = reversed_positions[t]  # [B]
    z = tf.stack(
        [
            tf.gather(forward_inputs, t, axis=1),
            tf.gather(backward_inputs, backward_positions, axis=1, batch_dims=1),
        ]
    )
    h, c, gates = cell(z + tf.matmul(h, kernels), c)
    at_t = tf.stack([t, 0, 0, 0])
    index = _direction_indices(tf.stack([tf.fill([batch], t), reversed_positions[t]], 1))
    # In both directions, loop step t is a padded position exactly when t >= length.
    real = tf.cast(t < lengths, h.dtype)[None, :, None]
    return (
        t + 1,
        h,
        c,
        tf.tensor_scatter_nd_update(h_out, index, tf.transpose(h * real, [1, 0, 2])),
        dynamic_update_slice(c_all, c[None], at_t),
        dynamic_update_slice(gates_all, gates[None], at_t),
    )

  dtype = forward_inputs.dtype
  _, _, _, h, c, gates = tf.while_loop(
      lambda t, *_: t < length,
      body,
      (
          tf.constant(0),
          zeros,
          zeros,
          tf.zeros([batch, length, 2, units], dtype),
          tf.zeros([length, 2, batch, units], dtype),
          tf.zeros([length, 2, batch, 4 * units], dtype),
      ),
      maximum_iterations=length,
  )
  return h, c, gates


def _fused_backward(dh_out, h, c, gates, forward_kernel, backward_kernel, lengths):
  """Gradients on the inputs of `_fused_forward` but the lengths (XLA program).

  The reverse loop carries the state gradients dh, dc to the previous step:
    dh[t] = dh_out[t] + dz[t+1] R^T,   dc[t] = dc[t+1] f[t+1] + dh[t] o[t] tanh'(c[t]),
    dz[t] = (dc g i', dc c[t-1] f', dc i g', dh tanh(c[t]) o') (act' the derivatives),
  writing dz (the gradient on the gate inputs) at each direction's position. Padded
  positions (loop steps t >= length in both directions) get no output gradient, so
  their dz is 0 and h there (zeroed) never enters the kernel's gradient. Each
  recurrent kernel's gradient sum_t h[t-1]^T dz[t] is one [u, B T] x [B T, 4u] matmul
  after the loop, not a rank-B update per step.

  Args:
    dh_out: [B, T, 2, u], the loss gradient on h.
    h: [B, T, 2, u]; c: [T, 2, B, u]; gates: [T, 2, B, 4u] (from `_fused_forward`).
    forward_kernel, backward_kernel: [u, 4u]; lengths: [B].
  Returns:
    dforward_inputs, dbackward_inputs: [B, T, 4u]; dforward_kernel, dbackward_kernel:
    [u, 4u].
  """
  batch, length = tf.shape(h)[0], tf.shape(h)[1]
  kernels = tf.stack([forward_kernel, backward_kernel])
  reversed_positions = _reversed(tf.range(length)[:, None], lengths)  # [T, B]
  zeros = tf.zeros_like(c[0])

  def body(s, dh_next, dc_next, dforward, dbackward):
    t = length - 1 - s
    index = _direction_indices(tf.stack([tf.fill([batch], t), reversed_positions[t]], 1))
    c_prev = tf.where(t > 0, tf.gather(c, tf.maximum(t - 1, 0)), zeros)
    real = tf.cast(t < lengths, dh_next.dtype)[None, :, None]  # padded outputs are 0
    dh = tf.transpose(tf.gather_nd(dh_out, index), [1, 0, 2]) * real + dh_next
    dz, dc = cell_gradient(dh, dc_next, tf.gather(gates, t), tf.gather(c, t), c_prev)
    dforward = dynamic_update_slice(dforward, dz[0][:, None], tf.stack([0, t, 0]))
    dbackward = tf.tensor_scatter_nd_update(dbackward, index[:, 1, :2], dz[1])
    return s + 1, tf.matmul(dz, kernels, transpose_b=True), dc, dforward, dbackward

  dinputs = tf.zeros([batch, length, gates.shape[-1]], h.dtype)
  _, _, _, dforward, dbackward = tf.while_loop(
      lambda s, *_: s < length,
      body,
      (tf.constant(0), zeros, zeros, dinputs, dinputs),
      maximum_iterations=length,
  )
  # h[t-1] of each position's own direction, in h's layout (zero at each direction's
  # first step): forward, position p - 1; backward, the position of loop step
  # reversed(p) - 1.
  positions = tf.broadcast_to(tf.range(length)[None, :], [batch, length])
  steps = _reversed(positions, lengths[:, None])  # [B, T], backward: loop step of each
  previous = tf.stack([positions - 1, _reversed(steps - 1, lengths[:, None])], -1)
  previous = tf.where(tf.stack([positions, steps], -1) > 0, previous, -1)  # -1: none
  padded = tf.pad(h, [[0, 0], [1, 0], [0, 0], [0, 0]])  # a zero row for "none"
  b = tf.broadcast_to(tf.range(batch)[:, None, None], tf.shape(previous))
  n = tf.broadcast_to(tf.range(2)[None, None, :], tf.shape(previous))
  h_prev = tf.gather_nd(padded, tf.stack([b, previous + 1, n], -1))  # [B, T, 2, u]
  return (
      dforward,
      dbackward,
      tf.einsum("btu,btg->ug", h_prev[:, :, 0], dforward),
      tf.einsum("btu,btg->ug", h_prev[:, :, 1], dbackward),
  )


_fused_forward_xla = tf.function(_fused_forward, jit_compile=True, autograph=False)
_fused_backward_xla = tf.function(_fused_backward, jit_compile=True, autograph=False)


def bidirectional_lstm_recurrence(
    forward_inputs, backward_inputs, forward_kernel, backward_kernel, lengths
):
  """h of a forward and a backward (within each real prefix) LSTM from their gate inputs,
  with a hand-written gradient.

  Forward and backward are each one XLA program (also inside a model that is not
  compiled with XLA); the backward uses the saved gates and states instead of autodiff
  through the loop.

  Args:
    forward_inputs, backward_inputs: [B, T, 4u], x W + b of each direction, gates
      ordered (i, f, g, o); both at the original positions.
    forward_kernel, backward_kernel: [u, 4u], the recurrent kernels.
    lengths: [B] int, real tokens per sequence (right padding).
  Returns:
    h: [B, T, 2, u], (forward, backward) at the original positions, 0 at padded ones;
    the backward direction starts at each sequence's last real token.
  """
  lengths = tf.cast(lengths, tf.int32)

  @tf.custom_gradient
  def recurrence(*args):
    # stop_gradient: no enclosing tape may differentiate through the loop itself.
    args = [tf.stop_gradient(t) for t in args]
    h, c, gates = _fused_forward_xla(*args, lengths)
    return h, lambda dh: _fused_backward_xla(dh, h, c, gates, *args[2:], lengths)

  return recurrence(forward_inputs, backward_inputs, forward_kernel, backward_kernel)


@tf.custom_gradient
def block_lstm(x, kernel, recurrent_kernel, bias):
  """A left-to-right LSTM with TensorFlow's fused kernel `BlockLSTMV2` (no XLA kernel).

  The whole sequence runs in one C++ op (CPU and GPU kernels); each step multiplies
  [x, h] by one [D + u, 4u] matrix, so the input projection is not hoisted out of the
  loop. Its gate layout (i, f, g, o) is Keras'. The gradient is `BlockLSTMGradV2`,
  called here because TensorFlow registers the V1 gradient op (gate layout i, g, f, o)
  for BlockLSTMV2, which gives wrong gradients (TF 2.21).

  Args:
    x: [T, B, D] (time-major).
    kernel: [D, 4u]; recurrent_kernel: [u, 4u]; bias: [4u].
  Returns:
    h: [T, B, u].
  """
  x, kernel, recurrent_kernel, bias = (
      tf.stop_gradient(t) for t in (x, kernel, recurrent_kernel, bias)
  )
  units = recurrent_kernel.shape[0]
  zeros = tf.zeros([tf.shape(x)[1], units], x.dtype)
  no_peephole = tf.zeros([units], x.dtype)
  inputs = dict(
      seq_len_max=tf.cast(tf.shape(x)[0], tf.int64),
      x=x,
      cs_prev=zeros,
      h_prev=zeros,
      w=tf.concat([kernel, recurrent_kernel], 0),
      wci=no_peephole,
      wcf=no_peephole,
      wco=no_peephole,
      b=bias,
  )
  i, cs, f, o, ci, co, h = tf.raw_ops.BlockLSTMV2(cell_clip=0.0, use_peephole=False, **inputs)

  def grad(dh):
    dx, _, _, dw, _, _, _, db = tf.raw_ops.BlockLSTMGradV2(
        i=i,
        cs=cs,
        f=f,
        o=o,
        ci=ci,
        co=co,
        h=h,
        cs_grad=tf.zeros_like(cs),
        h_grad=dh,
        use_peephole=False,
        **inputs,
    )
    return dx, dw[:-units], dw[-units:], db

  return h, grad


def scan_directions(cells, x, attention_mask):
  """Both directions with `lstm_scan`: [B, T, H_in] -> [B, T, 2u]."""
  mask = tf.cast(attention_mask, x.dtype)
  lengths = tf.reduce_sum(tf.cast(attention_mask, tf.int32), axis=1)

  def run(cell, inputs):
    return lstm_scan(
        inputs,
        ops.cast(cell.kernel, x.dtype),
        ops.cast(cell.recurrent_kernel, x.dtype),
        ops.cast(cell.bias, x.dtype),
    )

  forward = run(cells[0], x)
  # Reversing only each real prefix puts the padding after it, where it cannot reach
  # a real token.
  reverse = lambda t: tf.reverse_sequence(t, lengths, seq_axis=1, batch_axis=0)
  backward = reverse(run(cells[1], reverse(x)))
  return tf.concat([forward, backward], axis=-1) * mask[:, :, None]


def fused_directions(cells, x, attention_mask):
  """Both directions with `bidirectional_lstm_recurrence`: [B, T, H_in] -> [B, T, 2u]."""
  lengths = tf.reduce_sum(tf.cast(attention_mask, tf.int32), axis=1)
  # One input projection per direction: concatenating the two [H_in, 4u] kernels into
  # one matmul holds a copy of both (and of their gradient) until the backward pass;
  # with that and stacked [T, 2, B, .] copies outside the loop, one full-size block
  # peaked at 2.3x the FFN's memory, 1.7x without (graph mode), and ran no faster.
  inputs = [
      dense_2d(x, ops.cast(cell.kernel, x.dtype), ops.cast(cell.bias, x.dtype)) for cell in cells
  ]
  h = bidirectional_lstm_recurrence(
      *inputs, *(ops.cast(cell.recurrent_kernel, x.dtype) for cell in cells), lengths
  )
  batch, length = tf.shape(x)[0], tf.shape(x)[1]
  return tf.reshape(h, [batch, length, 2 * cells[0].units])  # already 0 at padding


def block_directions(cells, x, attention_mask):
  """Both directions with `block_lstm`: [B, T, H_in] -> [B, T, 2u]."""
  mask = tf.cast(attention_mask, x.dtype)
  lengths = tf.reduce_sum(tf.cast(attention_mask, tf.int32), axis=1)
  reverse = lambda t: tf.reverse_sequence(t, lengths, seq_axis=0, batch_axis=1)
  x = tf.transpose(x, [1, 0, 2])  # [T, B, H_in]

  def run(cell, inputs):
    return block_lstm(
        inputs, *(ops.cast(w, x.dtype) for w in (cell.kernel, cell.recurrent_kernel, cell.bias))
    )

  forward = run(cells[0], x)
  backward = reverse(run(cells[1], reverse(x)))
  y = tf.transpose(tf.concat([forward, backward], -1), [1, 0, 2])
  return y * mask[:, :, None]
