"""TensorFlow graph helpers shared by the recurrent layers (SwishRNN, BLSTM)."""

import tensorflow as tf

# Not public, but the XLA ops' only Python home: tf.raw_ops lists no Xla* op, and
# tf.tensor_scatter_nd_update lowers to a scatter, not an in-place slice update.
from tensorflow.compiler.tf2xla.python import xla


def in_xla_program():
  """Whether the ops being traced now will be compiled by XLA (jit_compile), here or in
  an enclosing function."""
  # No public API says so; tf.__internal__ is the surface TF exports for Keras (kept
  # stable by TF's API golden files), unlike a tensorflow.python import.
  return tf.__internal__.get_enclosing_xla_context() is not None


def with_static_shape(t, shape):
  """Records a shape known from the inputs on t, in place (no op).

  Not tf.ensure_shape: inside a whole-model XLA program its EnsureShape ops made a
  training step with dropout ~5x slower (measured, TF 2.21 CPU).
  """
  t.set_shape(shape)
  return t


def dense_2d(x, kernel, bias=None, activation=None):
  """act(x W + b) as one 2-D MatMul, [B, T, H] -> [B, T, D].

  A flat MatMul -> BiasAdd -> activation chain is what TensorFlow's CPU/GPU graph
  rewriter fuses into one kernel (as it does in Dense layers of the FFN); a 3-D
  tf.matmul would be a broadcasting BatchMatMul with a much slower kernel gradient.
  """
  shape = tf.shape(x)
  y = tf.matmul(tf.reshape(x, [-1, x.shape[-1]]), kernel)
  if bias is not None:
    y = tf.nn.bias_add(y, bias)
  if activation is not None:
    y = activation(y)
  y = tf.reshape(y, tf.concat([shape[:-1], [kernel.shape[-1]]], 0))
  return with_static_shape(y, x.shape[:-1] + kernel.shape[-1:])


def dynamic_update_slice(t, update, start):
  """t with `update` written in place at index `start` (one index per dimension).

  XLA's DynamicUpdateSlice: inside an XLA loop it writes into the buffer without a copy,
  where a TensorArray or a concatenation would move the whole [B, T, D] buffer.
  """
  return xla.dynamic_update_slice(t, update, start)
