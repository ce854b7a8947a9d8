"""ELMo's scalar mix: a learned, softmax-normalised weighted sum of a model's layers."""

from typing import Optional, Sequence

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="recurrent_bert")
class ScalarMix(keras.layers.Layer):
  """`gamma * sum_j softmax(w)_j * h_j` over N layer outputs (Peters et al., 2018, eq. 1).

  With every w_j equal (the default) it starts as the mean of the layers times gamma = 1.
  A one-hot mix (w very negative except at one layer, gamma = 1) returns that layer exactly.

  Inputs: a list of N tensors of one shape, e.g. N x [B, T, H].
  Output: one tensor of that shape, in the inputs' dtype.

  Args:
    num_layers: N, the number of inputs mixed.
    initial_weights: N logits w before the softmax; None = all zero (the mean).
    initial_scale: gamma's starting value.
  """

  def __init__(
      self,
      num_layers: int,
      initial_weights: Optional[Sequence[float]] = None,
      initial_scale: float = 1.0,
      **kwargs,
  ):
    super().__init__(**kwargs)
    if num_layers < 1:
      raise ValueError(f"ScalarMix needs at least one layer, got num_layers={num_layers}")
    if initial_weights is not None and len(initial_weights) != num_layers:
      raise ValueError(
          f"initial_weights has {len(initial_weights)} values for num_layers={num_layers}"
      )
    self.num_layers = num_layers
    self.initial_weights = None if initial_weights is None else [float(w) for w in initial_weights]
    self.initial_scale = float(initial_scale)

  def build(self, input_shape):
    weights = self.initial_weights or [0.0] * self.num_layers
    self.layer_weights = self.add_weight(
        name="layer_weights",
        shape=(self.num_layers,),
        initializer=keras.initializers.Constant(weights),
    )
    self.scale = self.add_weight(
        name="scale", shape=(), initializer=keras.initializers.Constant(self.initial_scale)
    )
    self.built = True

  def call(self, layers):
    if len(layers) != self.num_layers:
      raise ValueError(f"ScalarMix of {self.num_layers} layers got {len(layers)}")
    dtype = layers[0].dtype
    weights = ops.cast(ops.softmax(self.layer_weights), dtype)  # [N]
    mixed = layers[0] * weights[0]
    for j in range(1, self.num_layers):
      mixed = mixed + layers[j] * weights[j]
    return mixed * ops.cast(self.scale, dtype)

  def compute_output_shape(self, input_shape):
    return tuple(input_shape[0])

  def get_config(self):
    return {
        **super().get_config(),
        "num_layers": self.num_layers,
        "initial_weights": self.initial_weights,
        "initial_scale": self.initial_scale,
    }
