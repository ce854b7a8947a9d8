"""Bidirectional LSTM mixer of TRANS-BLSTM (SPEC §3)."""

import keras
import tensorflow as tf
from keras import ops

IMPLEMENTATIONS = ("auto", "keras", "scan")


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


@keras.saving.register_keras_serializable(package="recurrent_bert")
class BidirectionalLSTM(keras.layers.Layer):
  """Forward and backward LSTMs of `units` each, concatenated, optionally projected.

  Full size (TRANS-BLSTM): units = H, then a dense 2H -> H projection. SMALL: units = H/2,
  no projection (2u = H already).

  Padding never reaches real tokens: the backward direction starts at each sequence's
  last real token, and outputs at padded positions are zero.

  Two implementations over the same variables (a `keras.layers.Bidirectional(LSTM)`, so
  checkpoints do not depend on the choice):
    "keras": Keras' LSTM with the mask. Its defaults (tanh/sigmoid, no recurrent
      dropout, not unrolled, use_bias, use_cudnn="auto") with right padding are what make
      it run the fused cuDNN kernel on GPU.
    "scan": `lstm_scan`, a `tf.scan` with the input projection hoisted out of the loop and
      `tf.reverse_sequence` for the backward direction. XLA compiles its gradient in
      memory linear in T (Keras' masked LSTM loop under `jit_compile=True` ran out of
      memory at BERT-base shapes on CPU), so it serves CPU, TPU and XLA.
    "auto" (default): "keras" when a GPU is visible (cuDNN), else "scan".

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
    if self.implementation != "auto":
      return self.implementation
    return "keras" if tf.config.list_logical_devices("GPU") else "scan"

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

  def call(self, x, attention_mask, training=None):
    if self.resolved_implementation == "scan":
      y = self._scan_directions(x, attention_mask)
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
