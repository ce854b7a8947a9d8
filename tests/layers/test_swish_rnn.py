import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.layers import SwishRNN
from recurrent_bert.layers import swish_rnn_recurrence
from tests import references as ref


def _random_layer_inputs(rng, batch=2, length=7, hidden=8):
  return rng.normal(size=(batch, length, hidden)).astype("float32")


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("length", [1, 7, 8, 13])
def test_recurrence_matches_numpy_loop(rng, k, length):
  x1 = rng.normal(size=(2, length, 5))
  residual = rng.normal(size=(2, length, 5))
  alpha = rng.uniform(0.5, 1.5, size=5)
  beta = rng.normal(size=5)
  got = swish_rnn_recurrence(*(tf.constant(a, tf.float32)
                               for a in (x1, residual, alpha, beta)), step_size=k)
  want = ref.swish_rnn_states(x1, residual, alpha, beta, k)
  np.testing.assert_allclose(got.numpy(), want, atol=1e-5, rtol=1e-5)


def _layer_reference(layer, x, mask=None):
  """SPEC §4 from the layer's weights: projections, numpy recurrence, gated output."""
  w = {v.path.split("/")[-1]: v.numpy().astype(np.float64) for v in layer.weights}
  d = layer.inner_size
  xw = x.astype(np.float64) @ w["input_kernel"]
  x1, x2 = xw[..., :d], xw[..., d:]
  residual = x1 if layer.residual == "x1" else x2
  k = layer.step_size
  if layer.direction == "forward":
    c = ref.swish_rnn_states(x1, residual, w["alpha"], w["beta"], k)
  else:
    # Reverse each sequence's real part only: the backward scan starts at its last
    # real token, whatever follows it.
    lengths = mask.sum(1) if mask is not None else np.full(x.shape[0], x.shape[1])
    c = np.zeros_like(x1)
    channels = slice(0, d) if layer.direction == "backward" else slice(d // 2, d)
    for b, n in enumerate(lengths):
      if layer.direction == "bidirectional":
        c[b:b + 1, :n, :d // 2] = ref.swish_rnn_states(
            x1[b:b + 1, :n, :d // 2], residual[b:b + 1, :n, :d // 2],
            w["alpha"][:d // 2], w["beta"][:d // 2], k)
      rev = ref.swish_rnn_states(
          x1[b:b + 1, :n][:, ::-1, channels], residual[b:b + 1, :n][:, ::-1, channels],
          w["alpha"][channels], w["beta"][channels], k)
      c[b:b + 1, :n, channels] = rev[:, ::-1]
  gate = ref.gelu(x2 + w["gate_bias"]) if layer.gate == "gelu" else ref.sigmoid(
      x2 + w["gate_bias"])
  return ((c + w["state_bias"]) * gate) @ w["kernel"] + w["bias"]


def _randomise(layer, rng):
  for v in layer.weights:  # non-trivial alpha, beta and biases
    v.assign(rng.normal(scale=0.5, size=v.shape).astype("float32"))


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("residual,gate", [("x1", "gelu"), ("x2", "sigmoid")])
def test_layer_matches_spec(rng, k, residual, gate):
  layer = SwishRNN(hidden_size=8, inner_size=6, step_size=k, residual=residual, gate=gate)
  x = _random_layer_inputs(rng, length=7)
  layer.build(x.shape)
  _randomise(layer, rng)
  np.testing.assert_allclose(layer(x).numpy(), _layer_reference(layer, x),
                             atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("direction", ["backward", "bidirectional"])
@pytest.mark.parametrize("k", [1, 3])
def test_reverse_directions_ignore_padding(rng, direction, k):
  layer = SwishRNN(hidden_size=8, inner_size=6, step_size=k, direction=direction)
  x = _random_layer_inputs(rng, length=9)
  mask = np.ones((2, 9), "int32")
  mask[1, 5:] = 0
  layer.build(x.shape)
  _randomise(layer, rng)
  got = layer(x, mask).numpy()
  want = _layer_reference(layer, x, mask)
  real = mask.astype(bool)
  np.testing.assert_allclose(got[real], want[real], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_gradients_reach_every_weight_including_alpha_beta(rng, k):
  layer = SwishRNN(hidden_size=8, inner_size=6, step_size=k)
  x = tf.constant(_random_layer_inputs(rng, length=7))
  layer.build(x.shape)
  _randomise(layer, rng)
  with tf.GradientTape() as tape:
    tape.watch(x)
    loss = tf.reduce_sum(layer(x) ** 2)
  grads = tape.gradient(loss, layer.trainable_weights + [x])
  names = [v.path for v in layer.trainable_weights] + ["input"]
  assert {n.split("/")[-1] for n in names} >= {"alpha", "beta", "input_kernel"}
  for name, g in zip(names, grads):
    assert g is not None, name
    assert np.all(np.isfinite(g.numpy())), name
    assert np.abs(g.numpy()).sum() > 0, name


def test_gradient_matches_finite_differences(rng):
  """Autodiff through tf.scan vs central differences of the numpy reference."""
  k = 2
  x1 = rng.normal(size=(1, 5, 3))
  residual = rng.normal(size=(1, 5, 3))
  alpha = rng.uniform(0.5, 1.5, size=3)
  beta = rng.normal(size=3)
  weights = rng.normal(size=(1, 5, 3))
  tensors = [tf.Variable(a, dtype=tf.float64) for a in (x1, residual, alpha, beta)]
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(swish_rnn_recurrence(*tensors, step_size=k) * weights)
  grads = tape.gradient(loss, tensors)

  def objective(arrays):
    return float((ref.swish_rnn_states(*arrays, k) * weights).sum())

  arrays = [x1, residual, alpha, beta]
  eps = 1e-6
  for which, g in enumerate(grads):
    numeric = np.zeros_like(arrays[which])
    for idx in np.ndindex(arrays[which].shape):
      plus = [a.copy() for a in arrays]
      minus = [a.copy() for a in arrays]
      plus[which][idx] += eps
      minus[which][idx] -= eps
      numeric[idx] = (objective(plus) - objective(minus)) / (2 * eps)
    np.testing.assert_allclose(g.numpy(), numeric, atol=1e-6, rtol=1e-5)


def test_xla_forward_and_backward_match_eager(rng):
  layer = SwishRNN(hidden_size=8, inner_size=6, step_size=4)
  x = tf.constant(_random_layer_inputs(rng, length=10))
  layer.build(x.shape)

  def loss_and_grads(inputs):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(layer(inputs) ** 2)
    return loss, tape.gradient(loss, layer.trainable_weights)

  eager_loss, eager_grads = loss_and_grads(x)
  xla_loss, xla_grads = tf.function(loss_and_grads, jit_compile=True)(x)
  np.testing.assert_allclose(xla_loss, eager_loss, rtol=1e-5)
  for a, b in zip(xla_grads, eager_grads):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_rejects_bad_options():
  with pytest.raises(ValueError, match="residual"):
    SwishRNN(8, 6, residual="x3")
  with pytest.raises(ValueError, match="even"):
    SwishRNN(8, 5, direction="bidirectional")
