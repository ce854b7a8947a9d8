import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.layers import BidirectionalLSTM
from recurrent_bert.layers import kernels
from recurrent_bert.weights_file import variables_by_path
from tests.support import references as ref

# Every implementation TensorFlow runs (the portable ones: tests/backends).
IMPLEMENTATIONS = kernels.offered(kernels.BLSTM_FIELD)

# (x, right-padding mask): three lengths, and T = 1.
CASES = {
    "padded": ((3, 7, 8), [[1] * 7, [1] * 4 + [0] * 3, [1] + [0] * 6]),
    "T=1": ((2, 1, 8), [[1], [1]]),
}


def _layer_arrays(layer, x):
  """The layer's weights in `references.blstm_layer`'s order, float64, after x."""
  weights = [x]
  for lstm in (layer.bilstm.forward_layer, layer.bilstm.backward_layer):
    cell = lstm.cell
    weights += [cell.kernel, cell.recurrent_kernel, cell.bias]
  if layer.projection is not None:
    weights += [layer.projection.kernel, layer.projection.bias]
  return [np.asarray(w, np.float64) for w in weights]


def _random_layer(rng, case, units, projection, implementation):
  shape, mask = CASES[case]
  layer = BidirectionalLSTM(units, projection, implementation=implementation)
  layer.build(shape)
  for v in layer.weights:
    v.assign(rng.normal(scale=0.4, size=v.shape).astype("float32"))
  x = rng.normal(size=shape).astype("float32")
  return layer, x, np.array(mask, "int32")


_NUMERIC = {}  # finite differences per (case, size), shared by the implementations


def _trainable_in_order(layer):
  """The layer's variables in `_layer_arrays`' order."""
  weights = []
  for lstm in (layer.bilstm.forward_layer, layer.bilstm.backward_layer):
    weights += [lstm.cell.kernel, lstm.cell.recurrent_kernel, lstm.cell.bias]
  if layer.projection is not None:
    weights += [layer.projection.kernel, layer.projection.bias]
  return weights


@pytest.mark.slow(seconds=67)
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("units,projection", [(4, None), (8, 8)])  # SMALL, full (H = 8)
@pytest.mark.parametrize("case", sorted(CASES))
def test_outputs_and_gradients_match_numpy_lstm_loops(units, projection, case, implementation):
  """Every implementation, eagerly, in graph mode and XLA-compiled, against the numpy
  loop (outputs) and central differences of it (gradients on x and every weight)."""
  rng = np.random.default_rng(0)  # the same layer and data for every implementation
  layer, x, mask = _random_layer(rng, case, units, projection, implementation)
  real = mask.astype(bool)
  # The loss reads real positions only (what a model's loss sees through the mask).
  upstream = rng.normal(size=x.shape[:2] + (projection or 2 * units,)) * real[:, :, None]
  lengths = mask.sum(1)
  arrays = _layer_arrays(layer, x)
  want = ref.blstm_layer(arrays, lengths)
  key = (case, units, projection)
  if key not in _NUMERIC:
    _NUMERIC[key] = ref.finite_difference_gradients(
        lambda moved: ref.blstm_layer(moved, lengths), arrays, upstream
    )

  def run():
    inputs = tf.constant(x)
    with tf.GradientTape() as tape:
      tape.watch(inputs)
      y = layer(inputs, mask)
      loss = tf.reduce_sum(y * tf.constant(upstream, tf.float32))
    return y, tape.gradient(loss, [inputs] + _trainable_in_order(layer))

  for mode, fn in (
      ("eager", run),
      ("graph", tf.function(run)),
      ("xla", tf.function(run, jit_compile=True)),
  ):
    y, grads = fn()
    np.testing.assert_allclose(y.numpy()[real], want[real], atol=1e-5, rtol=1e-5, err_msg=mode)
    if projection is None:  # padded positions are exactly zero
      np.testing.assert_array_equal(y.numpy()[~real], 0, err_msg=mode)
    for i, (g, w) in enumerate(zip(grads, _NUMERIC[key])):
      np.testing.assert_allclose(g.numpy(), w, atol=1e-5, rtol=1e-5, err_msg=f"{mode}, array {i}")


@pytest.mark.slow(seconds=4)
def test_scan_gradients_equal_keras_lstm_gradients_under_xla(rng):
  """Same variables, two implementations: outputs and gradients agree, XLA included."""
  keras_layer = BidirectionalLSTM(6, 8, implementation="keras")
  scan_layer = BidirectionalLSTM(6, 8, implementation="scan")
  x = tf.constant(rng.normal(size=(2, 9, 8)), tf.float32)
  mask = tf.constant([[1] * 9, [1] * 5 + [0] * 4], tf.int32)
  keras_layer.build(x.shape)
  scan_layer.build(x.shape)
  for v in keras_layer.weights:
    v.assign(rng.normal(scale=0.4, size=v.shape).astype("float32"))
  scan_layer.set_weights(keras_layer.get_weights())
  weights = (
      tf.constant(rng.normal(size=(2, 9, 8)), tf.float32) * tf.cast(mask, tf.float32)[:, :, None]
  )  # the loss reads real positions only

  def loss_and_grads(layer):
    with tf.GradientTape() as tape:
      tape.watch(x)
      loss = tf.reduce_sum(layer(x, mask) * weights)
    return loss, tape.gradient(loss, layer.trainable_weights + [x])

  want_loss, want_grads = loss_and_grads(keras_layer)
  for jit in (False, True):
    loss, grads = tf.function(lambda: loss_and_grads(scan_layer), jit_compile=jit)()
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    for g, w in zip(grads, want_grads):
      np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-4)


def test_lstm_settings_stay_cudnn_eligible():
  # Keras uses the fused cuDNN kernel only with these settings (and a right-padded mask).
  layer = BidirectionalLSTM(4, None)
  assert layer.resolved_implementation == "fused"  # no GPU here; "keras" where there is
  for lstm in (layer.bilstm.forward_layer, layer.bilstm.backward_layer):
    assert lstm.activation.__name__ == "tanh"
    assert lstm.recurrent_activation.__name__ == "sigmoid"
    assert lstm.recurrent_dropout == 0 and not lstm.unroll and lstm.use_bias
    assert lstm.use_cudnn in ("auto", True)


@pytest.mark.parametrize(
    "saved,loaded", [("scan", "fused"), ("fused", "block"), ("keras", "fused"), ("fused", "scan")]
)
def test_weights_saved_under_one_implementation_load_under_another(rng, tmp_path, saved, loaded):
  """Same variables and paths (the Keras Bidirectional LSTM layout) for every
  implementation, so a checkpoint written with one restores into another."""
  x = rng.normal(size=(2, 5, 8)).astype("float32")
  mask = np.array([[1] * 5, [1] * 3 + [0] * 2], "int32")
  before, after = (BidirectionalLSTM(6, 8, implementation=i, name="blstm") for i in (saved, loaded))
  for layer in (before, after):
    layer.build(x.shape)
  for v in before.weights:
    v.assign(rng.normal(scale=0.4, size=v.shape).astype("float32"))
  assert [v.path for v in after.weights] == [v.path for v in before.weights]
  assert [v.path for v in before.weights] == [
      f"blstm/bilstm/{d}/lstm_cell/{n}"
      for d in ("forward_lstm", "backward_lstm")
      for n in ("kernel", "recurrent_kernel", "bias")
  ] + ["blstm/projection/kernel", "blstm/projection/bias"]
  # The training checkpoints' format: tf.train.Checkpoint of {variable path: variable}.
  prefix = tf.train.Checkpoint(model=variables_by_path(before)).write(str(tmp_path / "ckpt"))
  tf.train.Checkpoint(model=variables_by_path(after)).read(prefix).assert_existing_objects_matched()
  np.testing.assert_allclose(after(x, mask), before(x, mask), atol=1e-5)


def test_config_round_trip_and_unknown_implementation():
  layer = BidirectionalLSTM(4, 8, initializer_range=0.1, implementation="fused")
  clone = BidirectionalLSTM.from_config(layer.get_config())
  assert (clone.units, clone.projection_size, clone.initializer_range, clone.implementation) == (
      4,
      8,
      0.1,
      "fused",
  )
  with pytest.raises(ValueError, match="implementation"):
    BidirectionalLSTM(4, implementation="cudnn")
