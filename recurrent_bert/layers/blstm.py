"""Bidirectional LSTM mixer of TRANS-BLSTM (SPEC §3)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="recurrent_bert")
class BidirectionalLSTM(keras.layers.Layer):
  """Forward and backward LSTMs of `units` each, concatenated, optionally projected.

  Full size (TRANS-BLSTM): units = H, then a dense 2H -> H projection. SMALL: units = H/2,
  no projection (2u = H already).

  Padding never reaches real tokens: the mask is passed to the LSTMs, so the backward
  direction starts at each sequence's last real token (state held at zero over the right
  padding). The LSTMs keep Keras' defaults (tanh/sigmoid, no recurrent dropout, not
  unrolled, use_cudnn="auto"), which with a right-padded mask is what makes them
  eligible for the fused cuDNN kernel on GPU.

  Inputs: x [B, T, H_in]; attention_mask [B, T] (1 real, 0 padding).
  Output: [B, T, projection_size] if projecting, else [B, T, 2 * units].
  """

  def __init__(self, units, projection_size=None, initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    # The padding mask arrives explicitly as `attention_mask`; accepting Keras' implicit
    # mask too lets stacked BLSTMs (the span decoder) pass tensors to each other.
    self.supports_masking = True
    self.units = units
    self.projection_size = projection_size
    self.initializer_range = initializer_range
    self.bilstm = keras.layers.Bidirectional(
        keras.layers.LSTM(units, return_sequences=True), merge_mode="concat",
        name="bilstm")
    self.projection = None
    if projection_size:
      self.projection = keras.layers.Dense(
          projection_size,
          kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
          name="projection")

  def build(self, input_shape):
    self.bilstm.build(tuple(input_shape))
    if self.projection is not None:
      self.projection.build((None, None, 2 * self.units))
    self.built = True

  def call(self, x, attention_mask, training=None):
    mask = ops.cast(attention_mask, "bool")
    y = self.bilstm(x, mask=mask, training=training)  # [B, T, 2u]
    if self.projection is not None:
      y = self.projection(y)
    return y

  def compute_output_shape(self, input_shape):
    width = self.projection_size or 2 * self.units
    return tuple(input_shape[:-1]) + (width,)

  def get_config(self):
    return {**super().get_config(), "units": self.units,
            "projection_size": self.projection_size,
            "initializer_range": self.initializer_range}
