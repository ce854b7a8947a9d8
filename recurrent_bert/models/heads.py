"""Task heads of SPEC §6: masked LM (tied), next sentence, classification, span."""

import keras
from keras import ops

from recurrent_bert.layers import BidirectionalLSTM
from recurrent_bert.layers import get_activation
from recurrent_bert.layers.dropout import Dropout
from recurrent_bert.layers.layer_norm import LayerNormalization

_NEG_INF = -1e9  # finite, so an all-padding row gives a uniform softmax, not NaN


def _initializer(initializer_range):
  return keras.initializers.TruncatedNormal(stddev=initializer_range)


@keras.saving.register_keras_serializable(package="recurrent_bert")
class MaskedLMHead(keras.layers.Layer):
  """Dense H->H, activation, LayerNorm, then `h · Eᵀ + b` with E the token embeddings.

  Logits are computed only at the gathered masked positions.

  Inputs: sequence_output [B, T, H]; masked_positions int [B, P].
  Output: logits [B, P, V], float32.

  `embeddings` is the encoder's `Embeddings` layer; the tie is not serialised by this
  layer, the `Pretrainer` that owns both rebuilds it.
  """

  def __init__(
      self,
      embeddings,
      hidden_act="gelu",
      layer_norm_epsilon=1e-12,
      initializer_range=0.02,
      **kwargs,
  ):
    super().__init__(**kwargs)
    self._embeddings = embeddings  # not tracked as a sublayer: its weights are the encoder's
    self.vocab_size = embeddings.vocab_size
    self.hidden_size = embeddings.hidden_size
    self.hidden_act = hidden_act
    self.layer_norm_epsilon = layer_norm_epsilon
    self.initializer_range = initializer_range
    self.transform = keras.layers.Dense(
        self.hidden_size,
        activation=get_activation(hidden_act),
        kernel_initializer=_initializer(initializer_range),
        name="transform",
    )
    self.layer_norm = LayerNormalization(epsilon=layer_norm_epsilon, name="layer_norm")

  def __setattr__(self, name, value):
    if name == "_embeddings":  # keep the tied layer out of Keras' tracking
      object.__setattr__(self, name, value)
      return
    super().__setattr__(name, value)

  def build(self, input_shape):
    self.transform.build((None, None, self.hidden_size))
    self.layer_norm.build((None, None, self.hidden_size))
    self.output_bias = self.add_weight(
        name="output_bias", shape=(self.vocab_size,), initializer="zeros"
    )
    self.built = True

  def call(self, sequence_output, masked_positions):
    positions = ops.cast(masked_positions, "int32")[:, :, None]
    gathered = ops.take_along_axis(sequence_output, positions, axis=1)  # [B, P, H]
    h = self.layer_norm(self.transform(gathered))
    table = ops.cast(self._embeddings.token_embeddings, h.dtype)
    logits = ops.matmul(h, ops.transpose(table)) + ops.cast(self.output_bias, h.dtype)
    return ops.cast(logits, "float32")

  def compute_output_shape(self, sequence_output_shape, masked_positions_shape):
    return tuple(masked_positions_shape) + (self.vocab_size,)


@keras.saving.register_keras_serializable(package="recurrent_bert")
class ClassificationHead(keras.layers.Layer):
  """Dropout then dense K on the pooled output (NSP is K = 2; STS-B regression K = 1).

  Input: pooled_output [B, H]. Output: logits [B, K], float32.
  """

  def __init__(self, num_classes, dropout_rate=0.1, initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    self.num_classes = num_classes
    self.dropout_rate = dropout_rate
    self.initializer_range = initializer_range
    self.dropout = Dropout(dropout_rate)
    self.dense = keras.layers.Dense(
        num_classes, kernel_initializer=_initializer(initializer_range), name="logits"
    )

  def build(self, input_shape):
    self.dense.build(tuple(input_shape))
    self.built = True

  def call(self, pooled_output, training=None):
    return ops.cast(self.dense(self.dropout(pooled_output, training=training)), "float32")

  def compute_output_shape(self, input_shape):
    return tuple(input_shape[:-1]) + (self.num_classes,)

  def get_config(self):
    return {
        **super().get_config(),
        "num_classes": self.num_classes,
        "dropout_rate": self.dropout_rate,
        "initializer_range": self.initializer_range,
    }


@keras.saving.register_keras_serializable(package="recurrent_bert")
class SpanHead(keras.layers.Layer):
  """Start/end logits for extractive QA, optionally after the "+ BLSTM decoder".

  The decoder (TRANS-BLSTM §3.3) is two stacked full-size BLSTMs with 2H -> H
  projections between the encoder output and the dense H -> 2 span projection.

  Inputs: sequence_output [B, T, H]; input_mask [B, T].
  Output: dict of start_logits and end_logits, each [B, T] float32, padded positions
  set to -1e9.
  """

  def __init__(
      self,
      hidden_size,
      use_blstm_decoder=False,
      initializer_range=0.02,
      blstm_implementation="auto",
      **kwargs,
  ):
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self.use_blstm_decoder = use_blstm_decoder
    self.initializer_range = initializer_range
    self.blstm_implementation = blstm_implementation
    self.decoder_layers = [
        BidirectionalLSTM(
            hidden_size,
            hidden_size,
            initializer_range,
            blstm_implementation,
            name=f"decoder_blstm_{i}",
        )
        for i in range(2 if use_blstm_decoder else 0)
    ]
    self.span = keras.layers.Dense(
        2, kernel_initializer=_initializer(initializer_range), name="span"
    )

  def build(self, input_shape):
    for layer in self.decoder_layers:
      layer.build((None, None, self.hidden_size))
    self.span.build((None, None, self.hidden_size))
    self.built = True

  def call(self, sequence_output, input_mask, training=None):
    x = sequence_output
    for layer in self.decoder_layers:
      x = layer(x, input_mask, training=training)
    logits = ops.cast(self.span(x), "float32")  # [B, T, 2]
    is_pad = ops.cast(input_mask, "float32") < 0.5
    logits = ops.where(is_pad[:, :, None], _NEG_INF, logits)
    return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}

  def compute_output_shape(self, sequence_output_shape, input_mask_shape):
    shape = tuple(sequence_output_shape[:-1])
    return {"start_logits": shape, "end_logits": shape}

  def get_config(self):
    return {
        **super().get_config(),
        "hidden_size": self.hidden_size,
        "use_blstm_decoder": self.use_blstm_decoder,
        "initializer_range": self.initializer_range,
        "blstm_implementation": self.blstm_implementation,
    }


@keras.saving.register_keras_serializable(package="recurrent_bert")
class FeatureBiLSTM(keras.layers.Layer):
  """BERT's feature-based head (Table 7): a 2-layer BiLSTM over frozen encoder features.

  Each layer runs `units` cells per direction (default H/2, so the output width is H).

  Inputs: features [B, T, W] (W may differ from H, e.g. 4H when four layers are
  concatenated); input_mask [B, T].
  Output: [B, T, 2 * units].

  Args:
    units: cells per direction.
    num_layers: stacked BiLSTMs (the paper: 2).
    initializer_range: stddev of the LSTM input kernels.
    implementation: the BidirectionalLSTM implementation ("auto", "fused", ...).
  """

  def __init__(self, units, num_layers=2, initializer_range=0.02, implementation="auto", **kwargs):
    super().__init__(**kwargs)
    self.units = units
    self.num_layers = num_layers
    self.initializer_range = initializer_range
    self.implementation = implementation
    self.bilstms = [
        BidirectionalLSTM(
            units,
            projection_size=None,
            initializer_range=initializer_range,
            implementation=implementation,
            name=f"bilstm_{i}",
        )
        for i in range(num_layers)
    ]

  def build(self, features_shape, input_mask_shape=None):
    width = features_shape[-1]
    for layer in self.bilstms:
      layer.build((None, None, width))
      width = 2 * self.units
    self.built = True

  def call(self, features, input_mask, training=None):
    x = features
    for layer in self.bilstms:
      x = layer(x, input_mask, training=training)
    return x

  def compute_output_shape(self, features_shape, input_mask_shape=None):
    return tuple(features_shape[:-1]) + (2 * self.units,)

  def get_config(self):
    return {
        **super().get_config(),
        "units": self.units,
        "num_layers": self.num_layers,
        "initializer_range": self.initializer_range,
        "implementation": self.implementation,
    }
