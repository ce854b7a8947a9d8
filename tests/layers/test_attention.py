import keras
import numpy as np
import tensorflow as tf

from recurrent_bert.layers import SelfAttention
from recurrent_bert.layers.attention import written_out_attention
from tests.support import references as ref


def _weights(layer):
  return [
      w.numpy().astype(np.float64)
      for w in (
          layer.query.kernel,
          layer.query.bias,
          layer.key.kernel,
          layer.key.bias,
          layer.value.kernel,
          layer.value.bias,
          layer.output_dense.kernel,
          layer.output_dense.bias,
      )
  ]


def _attention_with_random_weights(rng):
  layer = SelfAttention(hidden_size=12, num_heads=3, attention_dropout_rate=0.0)
  layer.build((None, None, 12))
  for v in layer.weights:
    v.assign(rng.normal(scale=0.3, size=v.shape).astype("float32"))
  return layer


def test_matches_numpy_multi_head_attention_with_mask_and_bias(rng):
  layer = _attention_with_random_weights(rng)
  x = rng.normal(size=(2, 6, 12)).astype("float32")
  mask = np.array([[1] * 6, [1] * 4 + [0] * 2], "int32")
  bias = rng.normal(size=(1, 3, 6, 6)).astype("float32")
  got = layer(x, mask, bias).numpy()
  want = ref.self_attention(x.astype(np.float64), mask, *_weights(layer), bias=bias)
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


def test_mixed_float16_masking_stays_finite(rng):
  keras.config.set_dtype_policy("mixed_float16")  # conftest restores float32
  layer = SelfAttention(hidden_size=12, num_heads=3)
  x = tf.constant(rng.normal(size=(2, 6, 12)), tf.float16)
  mask = np.array([[1] * 6, [1] * 2 + [0] * 4], "int32")
  out = layer(x, mask)
  assert out.dtype == tf.float16
  assert np.all(np.isfinite(out.numpy()))


def test_tensorflow_takes_the_written_out_form_and_the_switch_is_not_saved(rng):
  """No fused form under TensorFlow: `fused` and `written_out_attention()` change nothing
  (its numerics stay those the references check), and configs do not carry the switch."""
  layer = _attention_with_random_weights(rng)
  x = rng.normal(size=(2, 6, 12)).astype("float32")
  mask = np.array([[1] * 4 + [0] * 2, [0] * 6], "int32")
  got = layer(x, mask, training=False).numpy()
  with written_out_attention():
    np.testing.assert_array_equal(layer(x, mask, training=False).numpy(), got)
  layer.fused = False
  np.testing.assert_array_equal(layer(x, mask, training=False).numpy(), got)
  assert "fused" not in layer.get_config()
  assert SelfAttention.from_config(layer.get_config()).fused
