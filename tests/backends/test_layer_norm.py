"""The package's LayerNormalization (layers/layer_norm.py: one-pass statistics under JAX)
against LayerNorm in float64 numpy, outputs and textbook gradients, with rows whose mean
is a thousand times their spread; in the JAX and PyTorch sessions (PyTorch runs Keras'
own call, `F.layer_norm`)."""

import keras
import numpy as np
import pytest

from recurrent_bert.layers.layer_norm import LayerNormalization
from tests.backends.support import to_numpy


def _numpy_layer_norm(x, gamma, beta, epsilon):
  """float64, two passes: (x - mean) / sqrt(var + eps) * gamma + beta over the last axis."""
  mean = x.mean(-1, keepdims=True)
  variance = np.square(x - mean).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def _numpy_layer_norm_gradients(x, gamma, upstream, epsilon):
  """The textbook gradients of sum(LayerNorm(x) * upstream), float64: by x
  (dx = (dx̂ - mean(dx̂) - x̂ mean(dx̂ x̂)) / σ, dx̂ = upstream γ), by γ (Σ upstream x̂) and
  by β (Σ upstream), the sums over every row."""
  mean = x.mean(-1, keepdims=True)
  sigma = np.sqrt(np.square(x - mean).mean(-1, keepdims=True) + epsilon)
  x_hat = (x - mean) / sigma
  dx_hat = upstream * gamma
  dx = dx_hat - dx_hat.mean(-1, keepdims=True) - x_hat * (dx_hat * x_hat).mean(-1, keepdims=True)
  rows = tuple(range(x.ndim - 1))
  return dx / sigma, (upstream * x_hat).sum(rows), upstream.sum(rows)


def _inputs(rng):
  x = rng.normal(size=(3, 5, 48))
  x[0] += 1000.0  # mean far from zero against a spread of 1
  x[1] *= 1e-3  # a spread of the order of epsilon's square root
  return x


def _gradients(layer, x, upstream):
  """d(sum(layer(x) * upstream)) by x, gamma and beta, on the active backend."""
  backend = keras.backend.backend()
  weights = [layer.gamma, layer.beta]
  if backend == "jax":
    import jax

    def loss(x, gamma, beta):
      y, _ = layer.stateless_call([gamma, beta], [], x)
      return (y.astype("float32") * upstream).sum()

    return jax.grad(loss, argnums=(0, 1, 2))(x, *[w.value for w in weights])
  if backend == "torch":
    import torch

    x = torch.tensor(x, requires_grad=True)
    (layer(x).float() * torch.tensor(upstream)).sum().backward()
    return x.grad, weights[0].value.grad, weights[1].value.grad
  import tensorflow as tf

  x = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(x)
    loss = tf.reduce_sum(tf.cast(layer(x), "float32") * upstream)
  return tape.gradient(loss, [x] + [w.value for w in weights])


def test_outputs_and_gradients_equal_float64_layer_norm(rng):
  x = _inputs(rng)
  layer = LayerNormalization(epsilon=1e-12)
  layer.build(x.shape)
  gamma, beta = rng.normal(size=48), rng.normal(size=48)
  layer.gamma.assign(gamma)
  layer.beta.assign(beta)
  upstream = rng.normal(size=x.shape).astype("float32")
  x32 = x.astype("float32")  # what the layer sees; the reference starts from it too
  want = _numpy_layer_norm(x32.astype(np.float64), gamma, beta, 1e-12)
  np.testing.assert_allclose(to_numpy(layer(x32)), want, rtol=1e-4, atol=1e-4)

  numeric = _numpy_layer_norm_gradients(x32.astype(np.float64), gamma, upstream, 1e-12)
  got = [to_numpy(g) for g in _gradients(layer, x32, upstream)]
  for g, n, name in zip(got, numeric, ("x", "gamma", "beta")):
    np.testing.assert_allclose(g, n, rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "float32"])
def test_the_output_dtype_is_the_compute_dtype_and_bfloat16_inputs_normalise_in_float32(
    rng, policy
):
  x = rng.normal(size=(4, 64)).astype("float32") * 3 + 7
  layer = LayerNormalization(dtype=policy)
  layer.build(x.shape)
  inputs = keras.ops.cast(x, layer.compute_dtype)
  y = layer(inputs)
  assert keras.backend.standardize_dtype(y.dtype) == layer.compute_dtype
  seen = to_numpy(keras.ops.cast(inputs, "float32")).astype(np.float64)
  want = _numpy_layer_norm(seen, 1.0, 0.0, layer.epsilon)
  tolerance = 1e-5 if policy == "float32" else 1e-2  # one bfloat16 rounding of the output
  np.testing.assert_allclose(
      to_numpy(keras.ops.cast(y, "float32")), want, rtol=tolerance, atol=tolerance
  )
