"""Bidirectional LSTM mixer of TRANS-BLSTM (SPEC §3)."""

import keras
import tensorflow as tf
from tensorflow.compiler.tf2xla.python import xla
from keras import ops

from recurrent_bert.config import BLSTM_IMPLEMENTATIONS as IMPLEMENTATIONS
from recurrent_bert.layers.swish_rnn import _dense_2d
from recurrent_bert.layers.swish_rnn import _in_xla_program


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


def _split_gates(z):
  """[..., 4u] pre-activations -> the activated (i, f, g, o), each [..., u]."""
  i, f, g, o = tf.split(z, 4, axis=-1)
  return tf.sigmoid(i), tf.sigmoid(f), tf.tanh(g), tf.sigmoid(o)


def _fused_forward(gate_inputs, recurrent_kernel):
  """The LSTM recurrence of N directions at once, one XLA loop (no autodiff state).

  Each step is one batched [N, B, u] x [N, u, 4u] matmul: all directions advance together,
  so the loop runs T times, not N T times. Outputs are written in place into [T, ...]
  buffers.

  Args:
    gate_inputs: [T, N, B, 4u], x W + b of each direction (time-major, each direction in
      its own time order).
    recurrent_kernel: [N, u, 4u].
  Returns:
    h, c: [T, N, B, u], hidden and cell states after each step; gates: [T, N, B, 4u], the
    activated (i, f, g, o), saved for the backward pass (recomputing them would redo the
    recurrent matmul).
  """
  length = tf.shape(gate_inputs)[0]
  state_shape = tf.concat([tf.shape(gate_inputs)[1:3], tf.shape(recurrent_kernel)[1:2]], 0)
  zeros = tf.zeros(state_shape, gate_inputs.dtype)

  def body(t, h, c, hs, cs, gates):
    z = tf.gather(gate_inputs, t) + tf.matmul(h, recurrent_kernel)
    i, f, g, o = _split_gates(z)
    c = f * c + i * g
    h = o * tf.tanh(c)
    update = lambda buffer, value: xla.dynamic_update_slice(
        buffer, value[None], tf.stack([t, 0, 0, 0]))
    return (t + 1, h, c, update(hs, h), update(cs, c),
            update(gates, tf.concat([i, f, g, o], -1)))

  buffers = (tf.zeros_like(gate_inputs[..., :tf.shape(zeros)[-1]]),) * 2 + (
      tf.zeros_like(gate_inputs),)
  _, _, _, h, c, gates = tf.while_loop(
      lambda t, *_: t < length, body, (tf.constant(0), zeros, zeros) + buffers,
      maximum_iterations=length)
  return h, c, gates


def _fused_backward(dh, h, c, gates, recurrent_kernel):
  """Gradients on (gate_inputs, recurrent_kernel) of `_fused_forward` (XLA program).

  The reverse loop carries dh and dc of the state to the previous step:
    dc[t] = dc[t+1] f[t+1] + dh[t] o tanh'(c[t]),  dz[t] = (di, df, dg, do) * act'(z[t]),
    dh[t-1] += dz[t] R^T,
  with di = dc g, df = dc c[t-1], dg = dc i, do = dh tanh(c). The recurrent kernel's
  gradient sum_t h[t-1]^T dz[t] is one [N, u, T B] x [N, T B, 4u] matmul after the loop,
  not a rank-B update per step.

  Args:
    dh: [T, N, B, u], the loss gradient on the outputs h.
    h, c: [T, N, B, u]; gates: [T, N, B, 4u] (from `_fused_forward`).
    recurrent_kernel: [N, u, 4u].
  Returns:
    dgate_inputs: [T, N, B, 4u]; drecurrent_kernel: [N, u, 4u].
  """
  length = tf.shape(dh)[0]
  zeros = tf.zeros_like(dh[0])

  def body(s, dh_next, dc_next, dz_all):
    t = length - 1 - s
    i, f, g, o = tf.split(tf.gather(gates, t), 4, axis=-1)
    c_t = tf.gather(c, t)
    c_prev = tf.where(t > 0, tf.gather(c, tf.maximum(t - 1, 0)), zeros)
    dh_t = tf.gather(dh, t) + dh_next
    tanh_c = tf.tanh(c_t)
    dc = dc_next + dh_t * o * (1 - tanh_c * tanh_c)
    dz = tf.concat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f),
                    dc * i * (1 - g * g), dh_t * tanh_c * o * (1 - o)], -1)
    dz_all = xla.dynamic_update_slice(dz_all, dz[None], tf.stack([t, 0, 0, 0]))
    return s + 1, tf.matmul(dz, recurrent_kernel, transpose_b=True), dc * f, dz_all

  _, _, _, dz = tf.while_loop(
      lambda s, *_: s < length, body, (tf.constant(0), zeros, zeros, tf.zeros_like(gates)),
      maximum_iterations=length)
  h_prev = tf.concat([zeros[None], h[:-1]], 0)  # [T, N, B, u], h[t-1], zero at t = 0
  drecurrent = tf.einsum("tnbu,tnbg->nug", h_prev, dz)
  return dz, drecurrent


_fused_forward_xla = tf.function(_fused_forward, jit_compile=True, autograph=False)
_fused_backward_xla = tf.function(_fused_backward, jit_compile=True, autograph=False)


@tf.custom_gradient
def lstm_recurrence(gate_inputs, recurrent_kernel):
  """h[t] of N LSTM directions from their gate inputs, with a hand-written gradient.

  Forward and backward are each one XLA program (also inside a model that is not
  compiled with XLA); the backward uses the saved gates and states instead of autodiff
  through the loop.

  Args:
    gate_inputs: [T, N, B, 4u], x W + b per direction, gates ordered (i, f, g, o).
    recurrent_kernel: [N, u, 4u].
  Returns:
    h: [T, N, B, u].
  """
  # stop_gradient: no enclosing tape may differentiate through the loop itself.
  gate_inputs, recurrent_kernel = (tf.stop_gradient(t)
                                   for t in (gate_inputs, recurrent_kernel))
  h, c, gates = _fused_forward_xla(gate_inputs, recurrent_kernel)
  return h, lambda dh: _fused_backward_xla(dh, h, c, gates, recurrent_kernel)


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
      tf.stop_gradient(t) for t in (x, kernel, recurrent_kernel, bias))
  units = recurrent_kernel.shape[0]
  zeros = tf.zeros([tf.shape(x)[1], units], x.dtype)
  no_peephole = tf.zeros([units], x.dtype)
  inputs = dict(seq_len_max=tf.cast(tf.shape(x)[0], tf.int64), x=x, cs_prev=zeros,
                h_prev=zeros, w=tf.concat([kernel, recurrent_kernel], 0), wci=no_peephole,
                wcf=no_peephole, wco=no_peephole, b=bias)
  i, cs, f, o, ci, co, h = tf.raw_ops.BlockLSTMV2(cell_clip=0.0, use_peephole=False,
                                                   **inputs)

  def grad(dh):
    dx, _, _, dw, _, _, _, db = tf.raw_ops.BlockLSTMGradV2(
        i=i, cs=cs, f=f, o=o, ci=ci, co=co, h=h, cs_grad=tf.zeros_like(cs), h_grad=dh,
        use_peephole=False, **inputs)
    return dx, dw[:-units], dw[-units:], db

  return h, grad


@keras.saving.register_keras_serializable(package="recurrent_bert")
class BidirectionalLSTM(keras.layers.Layer):
  """Forward and backward LSTMs of `units` each, concatenated, optionally projected.

  Full size (TRANS-BLSTM): units = H, then a dense 2H -> H projection. SMALL: units = H/2,
  no projection (2u = H already).

  Padding never reaches real tokens: the backward direction starts at each sequence's
  last real token, and outputs at padded positions are zero.

  Implementations over the same variables (a `keras.layers.Bidirectional(LSTM)`, so
  checkpoints do not depend on the choice, and it can change after training):
    "keras": Keras' LSTM with the mask. Its defaults (tanh/sigmoid, no recurrent
      dropout, not unrolled, use_bias, use_cudnn="auto") with right padding are what make
      it run the fused cuDNN kernel on GPU.
    "fused": `lstm_recurrence`: the input projection of both directions as one matmul,
      then both directions in one XLA loop (one batched [2, B, u] x [2, u, 4u] matmul per
      step) and a hand-written backward loop over the saved gates; its own XLA programs
      in graph mode, inlined in a whole-model XLA program.
    "block": `block_lstm`, TensorFlow's fused C++ kernel per direction. Has no XLA
      kernel: inside an XLA program it runs "fused".
    "scan": `lstm_scan`, a `tf.scan` with the input projection hoisted out of the loop and
      `tf.reverse_sequence` for the backward direction, autodiff through the scan.
    "auto" (default): "keras" when a GPU is visible (cuDNN), else "fused", the fastest
      measured on CPU in graph mode and under XLA (benchmarks/recurrence.py).
  All run every direction over the whole padded length and zero the padded outputs;
  the backward direction reads each sequence reversed within its real prefix
  (`tf.reverse_sequence`), so it starts at the last real token.

  Inputs: x [B, T, H_in]; attention_mask [B, T] (1 real, 0 padding).
  Output: [B, T, projection_size] if projecting, else [B, T, 2 * units].
  """

  def __init__(self, units, projection_size=None, initializer_range=0.02,
               implementation="auto", **kwargs):
    super().__init__(**kwargs)
    if implementation not in IMPLEMENTATIONS:
      raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, "
                       f"got {implementation!r}")
    # The padding mask arrives explicitly as `attention_mask`; accepting Keras' implicit
    # mask too lets stacked BLSTMs (the span decoder) pass tensors to each other.
    self.supports_masking = True
    self.units = units
    self.projection_size = projection_size
    self.initializer_range = initializer_range
    self.implementation = implementation
    # Fixed names: unnamed LSTMs are numbered per process (lstm_2, ...), which would make
    # checkpoint keys depend on how many LSTMs were built before this one.
    # Both directions are given, and the templates kept alive (untracked): inside
    # `keras.models.load_model`, Keras shares deserialised objects by `id()`, so a
    # template garbage-collected here could hand its id, and so an earlier block's
    # layer, to the next block's Bidirectional (seen as an intermittent load error).
    self._lstm_templates = (
        keras.layers.LSTM(units, return_sequences=True, name="lstm"),
        keras.layers.LSTM(units, return_sequences=True, go_backwards=True,
                          name="backward_lstm"))
    self.bilstm = keras.layers.Bidirectional(
        self._lstm_templates[0], backward_layer=self._lstm_templates[1],
        merge_mode="concat", name="bilstm")
    self.projection = None
    if projection_size:
      self.projection = keras.layers.Dense(
          projection_size,
          kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
          name="projection")

  def __setattr__(self, name, value):
    if name == "_lstm_templates":  # not sublayers: the Bidirectional owns the weights
      object.__setattr__(self, name, value)
      return
    super().__setattr__(name, value)

  def build(self, input_shape):
    self.bilstm.build(tuple(input_shape))
    if self.projection is not None:
      self.projection.build((None, None, 2 * self.units))
    self.built = True

  @property
  def resolved_implementation(self):
    if self.implementation == "block" and _in_xla_program():
      return "fused"  # BlockLSTMV2 has no XLA kernel
    if self.implementation != "auto":
      return self.implementation
    if tf.config.list_logical_devices("GPU"):
      return "keras"
    return "fused"

  def _scan_directions(self, x, attention_mask):
    """Both directions with `lstm_scan`: [B, T, H_in] -> [B, T, 2u]."""
    mask = tf.cast(attention_mask, x.dtype)
    lengths = tf.reduce_sum(tf.cast(attention_mask, tf.int32), axis=1)

    def run(lstm, inputs):
      cell = lstm.cell
      return lstm_scan(inputs, ops.cast(cell.kernel, x.dtype),
                       ops.cast(cell.recurrent_kernel, x.dtype),
                       ops.cast(cell.bias, x.dtype))

    forward = run(self.bilstm.forward_layer, x)
    # Reversing only each real prefix puts the padding after it, where it cannot reach
    # a real token.
    reverse = lambda t: tf.reverse_sequence(t, lengths, seq_axis=1, batch_axis=0)
    backward = reverse(run(self.bilstm.backward_layer, reverse(x)))
    return tf.concat([forward, backward], axis=-1) * mask[:, :, None]

  def _fused_directions(self, x, attention_mask):
    """Both directions with `lstm_recurrence`: [B, T, H_in] -> [B, T, 2u]."""
    mask = tf.cast(attention_mask, x.dtype)
    lengths = tf.reduce_sum(tf.cast(attention_mask, tf.int32), axis=1)
    cells = (self.bilstm.forward_layer.cell, self.bilstm.backward_layer.cell)
    cast = lambda name: [ops.cast(getattr(cell, name), x.dtype) for cell in cells]
    # One [B T, H_in] x [H_in, 8u] matmul (+ bias) for both directions' input projection.
    gates = _dense_2d(x, tf.concat(cast("kernel"), 1), tf.concat(cast("bias"), 0))
    reverse = lambda t: tf.reverse_sequence(t, lengths, seq_axis=1, batch_axis=0)
    forward, backward = tf.split(gates, 2, axis=-1)
    # Projection commutes with the per-sequence reversal (position-wise): reverse the
    # 4u gate inputs, not the input.
    gate_inputs = tf.transpose(tf.stack([forward, reverse(backward)]), [2, 0, 1, 3])
    h = lstm_recurrence(gate_inputs, tf.stack(cast("recurrent_kernel")))  # [T, 2, B, u]
    h = tf.transpose(h, [1, 2, 0, 3])  # [2, B, T, u]
    return tf.concat([h[0], reverse(h[1])], axis=-1) * mask[:, :, None]

  def _block_directions(self, x, attention_mask):
    """Both directions with `block_lstm`: [B, T, H_in] -> [B, T, 2u]."""
    mask = tf.cast(attention_mask, x.dtype)
    lengths = tf.reduce_sum(tf.cast(attention_mask, tf.int32), axis=1)
    reverse = lambda t: tf.reverse_sequence(t, lengths, seq_axis=0, batch_axis=1)
    x = tf.transpose(x, [1, 0, 2])  # [T, B, H_in]

    def run(lstm, inputs):
      cell = lstm.cell
      return block_lstm(inputs, *(ops.cast(w, x.dtype) for w in (
          cell.kernel, cell.recurrent_kernel, cell.bias)))

    forward = run(self.bilstm.forward_layer, x)
    backward = reverse(run(self.bilstm.backward_layer, reverse(x)))
    y = tf.transpose(tf.concat([forward, backward], -1), [1, 0, 2])
    return y * mask[:, :, None]

  def call(self, x, attention_mask, training=None):
    implementation = self.resolved_implementation
    if implementation == "scan":
      y = self._scan_directions(x, attention_mask)
    elif implementation == "fused":
      y = self._fused_directions(x, attention_mask)
    elif implementation == "block":
      y = self._block_directions(x, attention_mask)
    else:
      y = self.bilstm(x, mask=ops.cast(attention_mask, "bool"), training=training)
    if self.projection is not None:
      y = self.projection(y)
    return y

  def compute_output_shape(self, input_shape):
    width = self.projection_size or 2 * self.units
    return tuple(input_shape[:-1]) + (width,)

  def get_config(self):
    return {**super().get_config(), "units": self.units,
            "projection_size": self.projection_size,
            "initializer_range": self.initializer_range,
            "implementation": self.implementation}
