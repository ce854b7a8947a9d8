import numpy as np
import pytest

from recurrent_bert.layers import RelativePositionBias
from recurrent_bert.layers import relative_position_bucket
from tests.support import references as ref


@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (16, 64)])
def test_bucket_matches_spec_formula(num_buckets, max_distance):
  offsets = np.arange(-600, 601)
  got = relative_position_bucket(offsets, num_buckets, max_distance).numpy()
  want = [ref.t5_bucket(int(n), num_buckets, max_distance) for n in offsets]
  np.testing.assert_array_equal(got, want)


def test_bucket_landmarks():
  # Hand-checked against SPEC §2: exact below 8, keys after the query offset by 16,
  # log-spaced buckets up to 128 and the last bucket of each half beyond it.
  cases = {
      0: 0,
      -1: 1,
      -7: 7,
      1: 17,
      7: 23,
      -8: 8,
      8: 24,
      -128: 15,
      128: 31,
      -1000: 15,
      1000: 31,
      -16: 10,
      -32: 12,
      -64: 14,
  }
  got = relative_position_bucket(np.array(list(cases)), 32, 128).numpy()
  assert dict(zip(cases, got.tolist())) == cases


def _layer_with_random_table(rng, num_heads, length, batch=1, **kwargs):
  """(a built RelativePositionBias with a random [32, A] table, the table, an input
  [batch, length, 4])."""
  layer = RelativePositionBias(num_heads=num_heads, **kwargs)
  x = np.zeros((batch, length, 4), "float32")
  layer.build(x.shape)
  table = rng.normal(size=(32, num_heads)).astype("float32")
  layer.bias_table.assign(table)
  return layer, table, x


def test_bias_gathers_table_by_bucket(rng):
  layer, table, x = _layer_with_random_table(rng, num_heads=3, length=20, batch=2)
  bias = layer(x).numpy()
  assert bias.shape == (1, 3, 20, 20)
  for q in range(20):
    for k in range(20):
      np.testing.assert_array_equal(bias[0, :, q, k], table[ref.t5_bucket(k - q)])


def _gather_reference(table, length):
  """The bias by gather (numpy): [A, T, T] with bias[:, q, k] = table[bucket(k - q)]."""
  buckets = np.array([[ref.t5_bucket(k - q) for k in range(length)] for q in range(length)])
  return table[buckets].transpose(2, 0, 1), buckets


def test_bias_gradient_is_the_scatter_add_of_the_gather(rng):
  import tensorflow as tf

  layer, table, x = _layer_with_random_table(rng, num_heads=2, length=9)
  upstream = rng.normal(size=(1, 2, 9, 9)).astype("float32")
  with tf.GradientTape() as tape:
    bias = layer(x)
    loss = tf.reduce_sum(bias * upstream)
  (grad,) = tape.gradient(loss, [layer.bias_table])
  want_bias, buckets = _gather_reference(table, 9)
  np.testing.assert_allclose(bias.numpy()[0], want_bias, atol=1e-6)
  # d loss / d table[b, a] = Σ over (q, k) in bucket b of upstream[a, q, k]: np.add.at.
  want = np.zeros_like(table)
  np.add.at(want, buckets.reshape(-1), upstream[0].transpose(1, 2, 0).reshape(-1, 2))
  np.testing.assert_allclose(tf.convert_to_tensor(grad).numpy(), want, atol=1e-5)


def test_table_is_read_and_its_gradient_summed_in_float32_under_mixed_precision(rng):
  import tensorflow as tf

  layer, table, x = _layer_with_random_table(rng, 2, 64, dtype="mixed_bfloat16")
  upstream = tf.cast(rng.normal(size=(1, 2, 64, 64)), "bfloat16")
  with tf.GradientTape() as tape:
    bias = layer(x)
    loss = tf.reduce_sum(tf.cast(bias, "float32") * tf.cast(upstream, "float32"))
  (grad,) = tape.gradient(loss, [layer.bias_table])
  assert bias.dtype == tf.bfloat16 and grad.dtype == tf.float32
  # The bias is the float32 table rounded once to bfloat16 ...
  want_bias, buckets = _gather_reference(table, 64)
  np.testing.assert_array_equal(
      tf.cast(bias[0], "float32").numpy(), tf.cast(tf.cast(want_bias, "bfloat16"), "float32")
  )
  # ... and each table entry's gradient sums up to 1,000 bfloat16 upstream values in
  # float32 (a bfloat16 sum, as with autocast on, is off by ~1e-2 of the total).
  want = np.zeros(table.shape, "float64")
  values = tf.cast(upstream[0], "float64").numpy().transpose(1, 2, 0).reshape(-1, 2)
  np.add.at(want, buckets.reshape(-1), values)
  np.testing.assert_allclose(grad.numpy(), want, rtol=1e-5, atol=1e-4)
