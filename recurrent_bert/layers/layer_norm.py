"""Keras' LayerNormalization, its statistics in one pass under JAX.

Keras computes a row's mean, then its variance from a second pass over the row, then
normalises: on a GPU XLA makes that five kernels forward (two reductions, two small
element-wise kernels between them, the normalisation) and as many backward. Under JAX
this layer takes the sum and the sum of squares of each row in one reduction, shifted by
the row's first element, so that the difference of the two loses no precision where the
mean is large against the spread (the shift is a sample of the row): var = E[d²] - E[d]²,
d = x - x[0]. Everything else is Keras' layer: the same class name, config and variables
(gamma, beta), float32 statistics whatever the input's dtype, and the output in the
layer's compute dtype. TensorFlow and PyTorch (`F.layer_norm`, one kernel) run the
parent's call unchanged.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="recurrent_bert")
class LayerNormalization(keras.layers.LayerNormalization):
  """`keras.layers.LayerNormalization` over the last axis, one-pass statistics under JAX
  (module doc). Args: as Keras' layer. Call: inputs [..., H]. Output: [..., H]."""

  def call(self, inputs):
    axes = self.axis if isinstance(self.axis, (list, tuple)) else [self.axis]
    last_axis_only = list(axes) in ([-1], [len(inputs.shape) - 1])
    if keras.backend.backend() != "jax" or self.rms_scaling or not last_axis_only:
      return super().call(inputs)
    x = ops.cast(inputs, "float32")
    d = x - ops.stop_gradient(x[..., :1])
    mean_d = ops.mean(d, axis=-1, keepdims=True)
    variance = ops.maximum(
        ops.mean(ops.square(d), axis=-1, keepdims=True) - ops.square(mean_d), 0.0
    )
    inv = ops.rsqrt(variance + self.epsilon)
    outputs = (d - mean_d) * inv
    if self.scale:
      outputs = outputs * ops.cast(self.gamma, "float32")
    if self.center:
      outputs = outputs + ops.cast(self.beta, "float32")
    return ops.cast(outputs, self.compute_dtype)
