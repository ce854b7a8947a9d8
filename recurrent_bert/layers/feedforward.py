"""Position-wise feed-forward block of BERT (SPEC §3, mixer `ffn`)."""

import keras
from keras import ops

from recurrent_bert.layers.activations import get_activation
from recurrent_bert.layers.activations import get_biased_activation
from recurrent_bert.layers.token_rows import over_token_rows
from recurrent_bert.layers.token_rows import without_bias


@keras.saving.register_keras_serializable(package="recurrent_bert")
class FeedForward(keras.layers.Layer):
  """`W2 act(W1 x + b1) + b2`. Input [B, T, H] -> output [B, T, H]; inner size d_ff. The
  two Dense layers multiply the tokens as the rows of one matrix (`token_rows`); where the
  backend has act(· + b1) as one function (`get_biased_activation`: the GELUs under JAX),
  the first layer's product goes to it with the bias, same variables."""

  def __init__(
      self, hidden_size, intermediate_size, activation="gelu", initializer_range=0.02, **kwargs
  ):
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self.intermediate_size = intermediate_size
    self.activation = activation
    self.initializer_range = initializer_range
    init = keras.initializers.TruncatedNormal(stddev=initializer_range)
    self.intermediate = keras.layers.Dense(
        intermediate_size,
        activation=get_activation(activation),
        kernel_initializer=init,
        name="intermediate",
    )
    self.output_dense = keras.layers.Dense(hidden_size, kernel_initializer=init, name="output")
    self._biased_activation = get_biased_activation(activation)

  def build(self, input_shape):
    self.intermediate.build((None, None, self.hidden_size))
    self.output_dense.build((None, None, self.intermediate_size))
    self.built = True

  def call(self, x, attention_mask=None, training=None, output_bias=True):
    """x [B, T, H] -> [B, T, H]; with `output_bias=False`, without the output layer's
    bias (`output_dense.bias`, for a caller that adds it itself)."""
    del attention_mask, training  # position-wise: padding cannot leak
    output = self.output_dense if output_bias else without_bias(self.output_dense)
    return over_token_rows(lambda rows: output(self._inner(rows)), x)

  def _inner(self, rows):
    """act(W1 x + b1) of the tokens' rows [N, H] -> [N, d_ff] (class doc)."""
    if self._biased_activation is None:
      return self.intermediate(rows)
    dense, dtype = self.intermediate, self.compute_dtype
    product = ops.matmul(rows, ops.cast(dense.kernel, dtype))  # [N, d_ff]
    return self._biased_activation(product, ops.cast(dense.bias, dtype))

  def compute_output_shape(self, input_shape):
    return tuple(input_shape)

  def get_config(self):
    return {
        **super().get_config(),
        "hidden_size": self.hidden_size,
        "intermediate_size": self.intermediate_size,
        "activation": self.activation,
        "initializer_range": self.initializer_range,
    }
