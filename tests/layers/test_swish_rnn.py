import keras
import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.layers import SwishRNN
from recurrent_bert.layers import kernels
from recurrent_bert.layers import swish_rnn_recurrence
from tests.support import references as ref

# Every implementation TensorFlow runs (the portable ones: tests/backends).
IMPLEMENTATIONS = kernels.offered(kernels.SWISH_RNN_FIELD)


def _random_layer_inputs(rng, batch=2, length=7, hidden=8):
  return rng.normal(size=(batch, length, hidden)).astype("float32")


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("length", [1, 7, 8, 13])
def test_recurrence_matches_numpy_loop(rng, k, length, implementation):
  x1 = rng.normal(size=(2, length, 5))
  residual = rng.normal(size=(2, length, 5))
  alpha = rng.uniform(0.5, 1.5, size=5)
  beta = rng.normal(size=5)
  got = swish_rnn_recurrence(
      *(tf.constant(a, tf.float32) for a in (x1, residual, alpha, beta)),
      step_size=k,
      implementation=implementation,
      unroll=3,
  )
  want = ref.swish_rnn_states(x1, residual, alpha, beta, k)
  np.testing.assert_allclose(got.numpy(), want, atol=1e-5, rtol=1e-5)


def _layer_reference(layer, x, mask=None):
  """SPEC §4 from the layer's weights (`references.swish_rnn_layer`)."""
  w = {v.path.split("/")[-1]: v.numpy().astype(np.float64) for v in layer.weights}
  return ref.swish_rnn_layer(
      w, x, layer.inner_size, layer.step_size, layer.residual, layer.gate, layer.direction, mask
  )


def _randomise(layer, rng):
  for v in layer.weights:  # non-trivial alpha, beta and biases
    v.assign(rng.normal(scale=0.5, size=v.shape).astype("float32"))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("residual,gate", [("x1", "gelu"), ("x2", "sigmoid")])
def test_layer_matches_spec(rng, k, residual, gate, implementation):
  layer = SwishRNN(
      hidden_size=8,
      inner_size=6,
      step_size=k,
      residual=residual,
      gate=gate,
      implementation=implementation,
  )
  x = _random_layer_inputs(rng, length=7)
  layer.build(x.shape)
  _randomise(layer, rng)
  np.testing.assert_allclose(layer(x).numpy(), _layer_reference(layer, x), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("direction", ["backward", "bidirectional"])
@pytest.mark.parametrize("k", [1, 3])
def test_reverse_directions_ignore_padding(rng, direction, k, implementation):
  layer = SwishRNN(
      hidden_size=8, inner_size=6, step_size=k, direction=direction, implementation=implementation
  )
  x = _random_layer_inputs(rng, length=9)
  mask = np.ones((2, 9), "int32")
  mask[1, 5:] = 0
  layer.build(x.shape)
  _randomise(layer, rng)
  got = layer(x, mask).numpy()
  want = _layer_reference(layer, x, mask)
  real = mask.astype(bool)
  np.testing.assert_allclose(got[real], want[real], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("k", [1, 2, 4])
def test_gradients_reach_every_weight_including_alpha_beta(rng, k, implementation):
  layer = SwishRNN(hidden_size=8, inner_size=6, step_size=k, implementation=implementation)
  x = tf.constant(_random_layer_inputs(rng, length=7))
  layer.build(x.shape)
  _randomise(layer, rng)
  with tf.GradientTape() as tape:
    tape.watch(x)
    loss = tf.reduce_sum(layer(x) ** 2)
  grads = tape.gradient(loss, layer.trainable_weights + [x])
  names = [v.path for v in layer.trainable_weights] + ["input"]
  assert {n.split("/")[-1] for n in names} >= {"alpha", "beta", "x1_kernel", "x2_kernel"}
  for name, g in zip(names, grads):
    assert g is not None, name
    assert np.all(np.isfinite(g.numpy())), name
    assert np.abs(g.numpy()).sum() > 0, name


@pytest.mark.parametrize("implementation", ["fused", "loop"])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize(
    "residual,direction", [("x1", "forward"), ("x2", "forward"), ("x1", "bidirectional")]
)
def test_layer_gradients_match_autodiff_of_the_scan(rng, k, residual, direction, implementation):
  """The hand-written backward of recurrence + gating (+ state bias) vs TF autodiff of
  the plain `tf.scan` and TF ops, the same weights, every weight and the input."""
  layers = [
      SwishRNN(
          hidden_size=8,
          inner_size=6,
          step_size=k,
          residual=residual,
          direction=direction,
          gate="gelu",
          implementation=impl,
      )
      for impl in (implementation, "scan")
  ]
  x = tf.constant(_random_layer_inputs(rng, length=11))
  mask = np.ones((2, 11), "int32")
  mask[0, 8:] = 0
  upstream = tf.constant(rng.normal(size=(2, 11, 8)).astype("float32"))
  for layer in layers:
    layer.build(x.shape)
  _randomise(layers[0], rng)
  layers[1].set_weights(layers[0].get_weights())
  grads = []
  for layer in layers:
    with tf.GradientTape() as tape:
      tape.watch(x)
      loss = tf.reduce_sum(layer(x, mask) * upstream)
    grads.append(tape.gradient(loss, [x] + layer.trainable_weights))
  names = ["input"] + [v.path for v in layers[0].trainable_weights]
  for name, got, want in zip(names, *grads):
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5, rtol=1e-4, err_msg=name)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_gradient_matches_finite_differences(rng, implementation):
  """Gradients (autodiff through tf.scan, or the analytic reverse recurrence) vs
  central differences of the numpy reference."""
  k = 2
  x1 = rng.normal(size=(1, 5, 3))
  residual = rng.normal(size=(1, 5, 3))
  alpha = rng.uniform(0.5, 1.5, size=3)
  beta = rng.normal(size=3)
  weights = rng.normal(size=(1, 5, 3))
  tensors = [tf.Variable(a, dtype=tf.float64) for a in (x1, residual, alpha, beta)]
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(
        swish_rnn_recurrence(*tensors, step_size=k, implementation=implementation) * weights
    )
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


@pytest.mark.slow(seconds=10)
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_xla_forward_and_backward_match_eager(rng, implementation):
  layer = SwishRNN(hidden_size=8, inner_size=6, step_size=4, implementation=implementation)
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
  with pytest.raises(ValueError, match="implementation"):
    SwishRNN(8, 6, implementation="cuda")
  with pytest.raises(ValueError, match="implementation"):
    swish_rnn_recurrence(
        *[tf.zeros([1, 2, 3])] * 2, tf.ones([3]), tf.zeros([3]), implementation="cuda"
    )


def _numpy_gradients(x1, residual, alpha, beta, k, dc):
  """Reverse-mode chain rule through the numpy loop of SPEC §4 (float64)."""
  c = ref.swish_rnn_states(x1, residual, alpha, beta, k)
  length = x1.shape[1]
  g = dc.astype(np.float64).copy()  # total gradient on c, completed right to left
  dx1, dres = np.zeros_like(g), np.zeros_like(g)
  dalpha, dbeta = np.zeros_like(alpha), np.zeros_like(beta)
  for i in reversed(range(length)):
    previous = c[:, i - k] if i >= k else 0.0
    z = previous - x1[:, i]
    s = ref.sigmoid(alpha * z + beta)
    dres[:, i] = g[:, i]
    dz = g[:, i] * (s + alpha * z * s * (1 - s))
    dx1[:, i] = -dz
    dalpha += (g[:, i] * z * z * s * (1 - s)).sum(0)
    dbeta += (g[:, i] * z * s * (1 - s)).sum(0)
    if i >= k:
      g[:, i - k] += dz
  return dx1, dres, dalpha, dbeta


def test_numpy_gradient_reference_matches_finite_differences(rng):
  k, shape = 2, (1, 5, 3)
  arrays = [
      rng.normal(size=shape),
      rng.normal(size=shape),
      rng.uniform(0.5, 1.5, 3),
      rng.normal(size=3),
  ]
  weights = rng.normal(size=shape)
  grads = _numpy_gradients(*arrays, k, weights)
  eps = 1e-6
  for which, g in enumerate(grads):
    for idx in np.ndindex(arrays[which].shape):
      plus = [a.copy() for a in arrays]
      minus = [a.copy() for a in arrays]
      plus[which][idx] += eps
      minus[which][idx] -= eps
      numeric = (
          (ref.swish_rnn_states(*plus, k) - ref.swish_rnn_states(*minus, k)) * weights
      ).sum() / (2 * eps)
      np.testing.assert_allclose(g[idx], numeric, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("length", [1, 6, 13])
def test_float32_gradients_match_numpy_loop(rng, k, length, implementation):
  """Every k, T a multiple of k or not, separate x1 and residual: <= 1e-5 in float32."""
  shape = (2, length, 5)
  arrays = [
      rng.normal(size=shape),
      rng.normal(size=shape),
      rng.uniform(0.5, 1.5, 5),
      rng.normal(size=5),
  ]
  upstream = rng.normal(size=shape)
  tensors = [tf.constant(a, tf.float32) for a in arrays]
  with tf.GradientTape() as tape:
    tape.watch(tensors)
    c = swish_rnn_recurrence(*tensors, step_size=k, implementation=implementation, unroll=4)
    loss = tf.reduce_sum(c * tf.constant(upstream, tf.float32))
  got = tape.gradient(loss, tensors)
  for g, want in zip(got, _numpy_gradients(*arrays, k, upstream)):
    np.testing.assert_allclose(g.numpy(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("k", [1, 3])
def test_residual_none_shares_x1_and_sums_its_gradients(rng, k, implementation):
  """residual=None is residual=x1 with one gradient for both uses of x1."""
  shape = (2, 7, 5)
  x1, alpha, beta = rng.normal(size=shape), rng.uniform(0.5, 1.5, 5), rng.normal(size=5)
  upstream = rng.normal(size=shape)
  tensors = [tf.constant(a, tf.float32) for a in (x1, alpha, beta)]
  with tf.GradientTape() as tape:
    tape.watch(tensors)
    c = swish_rnn_recurrence(
        tensors[0], None, *tensors[1:], step_size=k, implementation=implementation
    )
    loss = tf.reduce_sum(c * tf.constant(upstream, tf.float32))
  np.testing.assert_allclose(c, ref.swish_rnn_states(x1, x1, alpha, beta, k), atol=1e-5, rtol=1e-5)
  dx1, dres, dalpha, dbeta = _numpy_gradients(x1, x1, alpha, beta, k, upstream)
  for got, want in zip(tape.gradient(loss, tensors), (dx1 + dres, dalpha, dbeta)):
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("unroll", [1, 5, 16])
def test_loop_unroll_does_not_change_results(rng, unroll):
  x1 = tf.constant(rng.normal(size=(2, 11, 4)), tf.float32)
  alpha, beta = tf.constant(rng.uniform(0.5, 1.5, 4), tf.float32), tf.zeros([4])
  with tf.GradientTape() as tape:
    tape.watch(x1)
    loss = tf.reduce_sum(swish_rnn_recurrence(x1, x1, alpha, beta, 2, "loop", unroll) ** 2)
  with tf.GradientTape() as tape_scan:
    tape_scan.watch(x1)
    loss_scan = tf.reduce_sum(swish_rnn_recurrence(x1, x1, alpha, beta, 2, "scan") ** 2)
  np.testing.assert_allclose(loss, loss_scan, rtol=1e-6)
  np.testing.assert_allclose(
      tape.gradient(loss, x1), tape_scan.gradient(loss_scan, x1), rtol=1e-5, atol=1e-6
  )


@pytest.mark.slow(seconds=10)
@pytest.mark.parametrize("jit_compile", [False, True])
def test_graph_mode_with_unknown_batch_and_length(rng, jit_compile):
  """A functional model (symbolic [None, None, H]) reused for two shapes, with gradients."""
  inputs = keras.Input(shape=(None, 8))
  layers = [
      SwishRNN(8, 6, step_size=k, implementation=impl) for impl in ("fused", "scan") for k in (3,)
  ]
  model = keras.Model(inputs, [layer(inputs) for layer in layers])
  layers[1].set_weights(layers[0].get_weights())

  @tf.function(jit_compile=jit_compile, reduce_retracing=True)
  def outputs_and_grads(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      fused, scan = model(x)
      loss = tf.reduce_sum(fused**2) + tf.reduce_sum(scan**2)
    return fused, scan, tape.gradient(loss, [x] + model.trainable_weights)

  for shape in [(2, 7, 8), (3, 10, 8)]:
    fused, scan, grads = outputs_and_grads(tf.constant(rng.normal(size=shape), tf.float32))
    np.testing.assert_allclose(fused, scan, rtol=1e-5, atol=1e-6)
    w = len(layers[0].trainable_weights)
    for a, b in zip(grads[1 : 1 + w], grads[1 + w :]):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_recurrence_stays_float32_under_mixed_precision(rng):
  keras.config.set_dtype_policy("mixed_bfloat16")
  layer = SwishRNN(hidden_size=8, inner_size=6, step_size=2)
  x = tf.constant(rng.normal(size=(2, 9, 8)), tf.float32)
  with tf.GradientTape() as tape:
    y = layer(x)
    loss = tf.reduce_sum(tf.cast(y, tf.float32) ** 2)
  grads = tape.gradient(loss, layer.trainable_weights)
  assert y.dtype == tf.bfloat16
  assert all(g is not None and np.all(np.isfinite(g)) for g in grads)


def test_config_round_trip_keeps_implementation():
  layer = SwishRNN(8, 6, step_size=2, implementation="loop", unroll=4)
  clone = SwishRNN.from_config(layer.get_config())
  assert (clone.implementation, clone.unroll, clone.step_size) == ("loop", 4, 2)
  assert SwishRNN(8, 6).implementation == "auto"
