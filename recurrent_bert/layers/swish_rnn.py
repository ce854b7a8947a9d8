"""SwishRNN of Lei et al. (2022), the recurrent replacement of BERT's FFN (SPEC §4)."""

import keras
import tensorflow as tf
from keras import ops

from recurrent_bert.layers.activations import get_activation


def swish_rnn_recurrence(x1, residual, alpha, beta, step_size=1):
  """Runs `c[i] = Swish(c[i-k] - x1[i]) + residual[i]`, `c[<0] = 0`, left to right.

  `Swish(z) = z * sigmoid(alpha * z + beta)`. With step size k, position i depends on
  position i - k, so k positions advance together: the sequence is padded to a multiple
  of k and `tf.scan` runs over the T/k blocks of shape [B, k, D].

  Args:
    x1: [B, T, D] float.
    residual: [B, T, D], x1 (default) or x2.
    alpha, beta: [D].
    step_size: k >= 1.
  Returns:
    c: [B, T, D].
  """
  k = step_size
  batch, length, depth = tf.unstack(tf.shape(x1))
  padded_length = (length + k - 1) // k * k
  num_blocks = padded_length // k

  def to_blocks(t):  # [B, T, D] -> [T/k, B, k, D]
    t = tf.pad(t, [[0, 0], [0, padded_length - length], [0, 0]])
    t = tf.reshape(t, [batch, num_blocks, k, depth])
    return tf.transpose(t, [1, 0, 2, 3])

  def step(c_prev, block):
    x1_block, residual_block = block
    z = c_prev - x1_block
    return z * tf.sigmoid(alpha * z + beta) + residual_block

  c = tf.scan(step, (to_blocks(x1), to_blocks(residual)),
              initializer=tf.zeros([batch, k, depth], x1.dtype))
  c = tf.reshape(tf.transpose(c, [1, 0, 2, 3]), [batch, padded_length, depth])
  return c[:, :length]


@keras.saving.register_keras_serializable(package="recurrent_bert")
class SwishRNN(keras.layers.Layer):
  """The SwishRNN block: projections, Swish recurrence, gated output projection.

    X1, X2 = X W1, X W2                        (one fused [H, 2d'] matmul, no bias)
    c[i]   = Swish(c[i-k] - x1[i]) + x1[i]     (or + x2[i]: `residual="x2"`)
    out    = W3((C + b_c) * gate(X2 + b_g)) + b3

  Direction "forward" scans left to right, so right padding never reaches a real token.
  "backward" and "bidirectional" (half the channels each way) zero the inputs at padded
  positions: the state then stays exactly 0 across the padding (Swish(0) = 0) and each
  sequence's backward scan starts clean at its last real token.

  The recurrence runs in float32 even under mixed precision: a 512-step chain of
  bfloat16 roundings would drift.

  Inputs: x [B, T, H]; attention_mask [B, T] (1 real, 0 padding).
  Output: [B, T, H].
  """

  def __init__(self, hidden_size, inner_size, step_size=1, residual="x1", gate="gelu",
               direction="forward", initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    if residual not in ("x1", "x2"):
      raise ValueError(f"residual must be 'x1' or 'x2', got {residual!r}")
    if direction not in ("forward", "backward", "bidirectional"):
      raise ValueError(f"unknown direction {direction!r}")
    if direction == "bidirectional" and inner_size % 2:
      raise ValueError(f"bidirectional needs an even inner_size, got {inner_size}")
    self.hidden_size = hidden_size
    self.inner_size = inner_size
    self.step_size = step_size
    self.residual = residual
    self.gate = gate
    self.direction = direction
    self.initializer_range = initializer_range
    self._gate_fn = get_activation(gate)
    self.output_dense = keras.layers.Dense(
        hidden_size,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
        name="output")

  def build(self, input_shape):
    init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
    d = self.inner_size
    self.input_kernel = self.add_weight(name="input_kernel",
                                        shape=(self.hidden_size, 2 * d),
                                        initializer=init)
    self.alpha = self.add_weight(name="alpha", shape=(d,), initializer="ones")
    self.beta = self.add_weight(name="beta", shape=(d,), initializer="zeros")
    self.state_bias = self.add_weight(name="state_bias", shape=(d,), initializer="zeros")
    self.gate_bias = self.add_weight(name="gate_bias", shape=(d,), initializer="zeros")
    self.output_dense.build((None, None, d))
    self.built = True

  def _flip_backward_channels(self, t):
    """Reverses time on the channels that scan right to left ([B, T, D] -> same)."""
    if self.direction == "forward":
      return t
    if self.direction == "backward":
      return tf.reverse(t, axis=[1])
    half = self.inner_size // 2
    return tf.concat([t[..., :half], tf.reverse(t[..., half:], axis=[1])], axis=-1)

  def call(self, x, attention_mask=None, training=None):
    x1, x2 = tf.split(tf.matmul(x, ops.cast(self.input_kernel, x.dtype)), 2, axis=-1)
    residual = x1 if self.residual == "x1" else x2
    x1_state, residual_state = tf.cast(x1, "float32"), tf.cast(residual, "float32")
    if self.direction != "forward" and attention_mask is not None:
      real = tf.cast(attention_mask, "float32")[:, :, None]
      x1_state, residual_state = x1_state * real, residual_state * real
    c = swish_rnn_recurrence(
        self._flip_backward_channels(x1_state),
        self._flip_backward_channels(residual_state),
        tf.cast(self.alpha, "float32"), tf.cast(self.beta, "float32"), self.step_size)
    c = tf.cast(self._flip_backward_channels(c), x.dtype)
    gated = (c + ops.cast(self.state_bias, x.dtype)) * self._gate_fn(
        x2 + ops.cast(self.gate_bias, x.dtype))
    return self.output_dense(gated)

  def get_config(self):
    return {**super().get_config(), **{
        k: getattr(self, k) for k in ("hidden_size", "inner_size", "step_size",
                                      "residual", "gate", "direction",
                                      "initializer_range")}}
