"""Multi-head scaled dot-product self-attention with a padding mask (SPEC §2)."""

import keras
from keras import ops
import numpy as np

_FLOAT32_MIN = float(np.finfo(np.float32).min)


@keras.saving.register_keras_serializable(package="recurrent_bert")
class SelfAttention(keras.layers.Layer):
  """Multi-head self-attention; the residual add and LayerNorm live in the block.

  Inputs:
    x: [B, T, H].
    attention_mask: [B, T], 1 for real tokens and 0 for padding (keys masked out).
    attention_bias: optional [1 or B, A, T, T] added to the logits (relative bias).
  Output: [B, T, H].
  """

  def __init__(
      self, hidden_size, num_heads, attention_dropout_rate=0.1, initializer_range=0.02, **kwargs
  ):
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self.num_heads = num_heads
    self.head_size = hidden_size // num_heads
    self.attention_dropout_rate = attention_dropout_rate
    self.initializer_range = initializer_range
    init = keras.initializers.TruncatedNormal(stddev=initializer_range)
    dense = lambda name: keras.layers.EinsumDense(
        "btd,dnh->btnh",
        output_shape=(None, num_heads, self.head_size),
        bias_axes="nh",
        kernel_initializer=init,
        name=name,
    )
    self.query = dense("query")
    self.key = dense("key")
    self.value = dense("value")
    self.output_dense = keras.layers.EinsumDense(
        "btnh,nhd->btd",
        output_shape=(None, hidden_size),
        bias_axes="d",
        kernel_initializer=init,
        name="output",
    )
    self.dropout = keras.layers.Dropout(attention_dropout_rate)

  def build(self, input_shape):
    for layer in (self.query, self.key, self.value):
      layer.build((None, None, self.hidden_size))
    self.output_dense.build((None, None, self.num_heads, self.head_size))
    self.built = True

  def call(self, x, attention_mask, attention_bias=None, training=None):
    q = self.query(x)  # [B, T, A, d]
    k = self.key(x)
    v = self.value(x)
    q = q * ops.cast(1.0 / self.head_size**0.5, q.dtype)
    logits = ops.einsum("bqnh,bknh->bnqk", q, k)  # [B, A, T, T]
    if attention_bias is not None:
      logits = logits + ops.cast(attention_bias, logits.dtype)
    # Softmax in float32: float16 logits overflow, and the dtype's own minimum (not a
    # literal like -1e9) stands for -inf on padded keys.
    logits = ops.cast(logits, "float32")
    key_is_pad = ops.cast(attention_mask, "float32")[:, None, None, :] < 0.5
    logits = ops.where(key_is_pad, _FLOAT32_MIN, logits)
    probs = ops.cast(ops.softmax(logits, axis=-1), x.dtype)
    probs = self.dropout(probs, training=training)
    context = ops.einsum("bnqk,bknh->bqnh", probs, v)  # [B, T, A, d]
    return self.output_dense(context)

  def get_config(self):
    return {
        **super().get_config(),
        "hidden_size": self.hidden_size,
        "num_heads": self.num_heads,
        "attention_dropout_rate": self.attention_dropout_rate,
        "initializer_range": self.initializer_range,
    }
