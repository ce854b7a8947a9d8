import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.layers import BidirectionalLSTM
from tests import references as ref


def _reference(layer, x, mask):
  """Forward LSTM over each real prefix, backward LSTM from its last real token."""
  lengths = mask.sum(1)
  directions = []
  for lstm, reverse in ((layer.bilstm.forward_layer, False),
                        (layer.bilstm.backward_layer, True)):
    cell = lstm.cell
    directions.append(ref.lstm_direction(
        x.astype(np.float64), cell.kernel.numpy(), cell.recurrent_kernel.numpy(),
        cell.bias.numpy(), lengths, reverse))
  y = np.concatenate(directions, -1)
  if layer.projection is not None:
    y = y @ layer.projection.kernel.numpy() + layer.projection.bias.numpy()
  return y


@pytest.mark.parametrize("implementation", ["keras", "scan"])
@pytest.mark.parametrize("units,projection", [(4, None), (8, 8)])  # SMALL, full (H = 8)
def test_matches_numpy_lstm_loops_and_ignores_padding(rng, units, projection,
                                                      implementation):
  layer = BidirectionalLSTM(units, projection, implementation=implementation)
  x = rng.normal(size=(3, 7, 8)).astype("float32")
  mask = np.array([[1] * 7, [1] * 4 + [0] * 3, [1] + [0] * 6], "int32")
  layer.build(x.shape)
  for v in layer.weights:
    v.assign(rng.normal(scale=0.4, size=v.shape).astype("float32"))
  got = layer(x, mask).numpy()
  assert got.shape == (3, 7, 8)
  want = _reference(layer, x, mask)
  real = mask.astype(bool)
  np.testing.assert_allclose(got[real], want[real], atol=1e-5, rtol=1e-4)


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
  weights = tf.constant(rng.normal(size=(2, 9, 8)), tf.float32) * tf.cast(
      mask, tf.float32)[:, :, None]  # the loss reads real positions only

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
  assert layer.resolved_implementation == "scan"  # no GPU here; "keras" where there is
  for lstm in (layer.bilstm.forward_layer, layer.bilstm.backward_layer):
    assert lstm.activation.__name__ == "tanh"
    assert lstm.recurrent_activation.__name__ == "sigmoid"
    assert lstm.recurrent_dropout == 0 and not lstm.unroll and lstm.use_bias
    assert lstm.use_cudnn in ("auto", True)
