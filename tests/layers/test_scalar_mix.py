"""ScalarMix and LayerCombination against numpy written out from their definitions."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.config import LAYER_MIXES
from recurrent_bert.layers import LayerCombination
from recurrent_bert.layers import ScalarMix


def _layers(rng, count, shape=(2, 5, 6)):
  return [rng.standard_normal(shape).astype("float32") for _ in range(count)]


def _numpy_mix(layers, weights, gamma):
  """gamma * sum_j softmax(w)_j h_j (Peters et al., 2018, eq. 1), in float64."""
  w = np.exp(weights - np.max(weights))
  w /= w.sum()
  return gamma * sum(wj * h.astype(np.float64) for wj, h in zip(w, layers))


def test_scalar_mix_is_the_softmax_weighted_sum(rng):
  layers = _layers(rng, 3)
  weights = rng.standard_normal(3)
  mix = ScalarMix(3, initial_weights=weights.tolist(), initial_scale=1.7)
  np.testing.assert_allclose(mix(layers), _numpy_mix(layers, weights, 1.7), rtol=1e-5, atol=1e-6)


def test_scalar_mix_defaults_to_the_mean(rng):
  layers = _layers(rng, 4)
  np.testing.assert_allclose(ScalarMix(4)(layers), np.mean(layers, axis=0), atol=1e-6)


@pytest.mark.parametrize("chosen", [0, 2, 3])
def test_one_hot_weights_return_that_layer_exactly(rng, chosen):
  layers = _layers(rng, 4)
  weights = [-1e4] * 4
  weights[chosen] = 0.0
  got = ScalarMix(4, initial_weights=weights, initial_scale=1.0)(layers)
  assert np.array_equal(np.asarray(got), layers[chosen])


def test_gradients_reach_weights_and_scale(rng):
  layers = [tf.constant(h) for h in _layers(rng, 3)]
  mix = ScalarMix(3, initial_weights=[0.1, -0.3, 0.5])
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(mix(layers) ** 2)
  grads = tape.gradient(loss, [mix.layer_weights.value, mix.scale.value])
  assert all(g is not None and np.all(np.isfinite(g)) for g in grads)
  assert np.any(np.asarray(grads[0]) != 0) and float(grads[1]) != 0


def test_scalar_mix_config_round_trip(rng):
  mix = ScalarMix(3, initial_weights=[1.0, 2.0, 3.0], initial_scale=0.5, name="mix")
  clone = ScalarMix.from_config(mix.get_config())
  assert (clone.num_layers, clone.initial_weights, clone.initial_scale, clone.name) == (
      3,
      [1.0, 2.0, 3.0],
      0.5,
      "mix",
  )
  layers = _layers(rng, 3)
  np.testing.assert_allclose(clone(layers), mix(layers), atol=0)


def test_scalar_mix_bad_arguments():
  with pytest.raises(ValueError, match="at least one layer"):
    ScalarMix(0)
  with pytest.raises(ValueError, match="2 values for num_layers=3"):
    ScalarMix(3, initial_weights=[0.0, 1.0])
  with pytest.raises(ValueError, match="ScalarMix of 2 layers got 3"):
    ScalarMix(2)([np.zeros((1, 2), "float32")] * 3)


def test_scalar_mix_under_mixed_float16(rng):
  keras.config.set_dtype_policy("mixed_float16")
  layers = [tf.constant(h, tf.float16) for h in _layers(rng, 3)]
  weights = rng.standard_normal(3)
  mix = ScalarMix(3, initial_weights=weights.tolist())
  out = mix(layers)
  assert out.dtype == tf.float16 and mix.layer_weights.dtype == "float32"
  want = _numpy_mix([h.numpy().astype(np.float64) for h in layers], weights, 1.0)
  np.testing.assert_allclose(out.numpy().astype(np.float64), want, atol=1e-2)


def test_scalar_mix_under_xla(rng):
  layers = [tf.constant(h) for h in _layers(rng, 3)]
  weights = rng.standard_normal(3)
  mix = ScalarMix(3, initial_weights=weights.tolist(), initial_scale=0.8)
  compiled = tf.function(lambda hs: mix(hs), jit_compile=True)
  np.testing.assert_allclose(
      compiled(layers), _numpy_mix([h.numpy() for h in layers], weights, 0.8), atol=1e-5
  )


def _numpy_combination(mode, layers):
  """What each LAYER_MIXES mode reads, written out: "four" = the last min(4, L)."""
  last_four = layers[-min(4, len(layers)) :]
  if mode == "last":
    return layers[-1]
  if mode == "second_to_last":
    return layers[-2]
  if mode == "sum_last_four":
    return np.sum(np.stack(last_four), axis=0)
  if mode == "concat_last_four":
    return np.concatenate(last_four, axis=-1)
  read = last_four if mode == "mix_last_four" else layers
  return np.mean(read, axis=0)  # a fresh mix: all weights equal, gamma 1


@pytest.mark.parametrize("num_layers", [2, 3, 6])
@pytest.mark.parametrize("mode", LAYER_MIXES)
def test_layer_combination_modes(rng, mode, num_layers):
  layers = _layers(rng, num_layers)
  combination = LayerCombination(mode, num_layers)
  got = np.asarray(combination(layers))
  want = _numpy_combination(mode, layers)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  assert combination.compute_output_shape([h.shape for h in layers]) == want.shape


def test_layer_combination_mix_uses_its_learned_weights(rng):
  layers = _layers(rng, 5)
  combination = LayerCombination("mix_last_four", 5)
  combination.build([h.shape for h in layers])
  weights = rng.standard_normal(4)
  combination.scalar_mix.layer_weights.assign(weights)
  combination.scalar_mix.scale.assign(2.5)
  np.testing.assert_allclose(
      combination(layers), _numpy_mix(layers[-4:], weights, 2.5), rtol=1e-5, atol=1e-5
  )


@pytest.mark.parametrize("num_layers,width", [(1, 6), (3, 18), (12, 24)])
def test_concat_last_four_width(num_layers, width):
  from recurrent_bert.layers import combined_width

  assert combined_width("concat_last_four", num_layers, 6) == width
  assert combined_width("mix_all", num_layers, 6) == 6


def test_bad_mode_names_the_choices():
  with pytest.raises(ValueError) as error:
    LayerCombination("middle", 4)
  for mode in LAYER_MIXES:
    assert mode in str(error.value)
  with pytest.raises(ValueError, match="at least 2 blocks"):
    LayerCombination("second_to_last", 1)


def test_layer_combination_config_round_trip():
  combination = LayerCombination("concat_last_four", 3, name="combo")
  clone = LayerCombination.from_config(combination.get_config())
  assert (clone.layer_mix, clone.num_layers, clone.num_read) == ("concat_last_four", 3, 3)
