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


def test_bias_gathers_table_by_bucket(rng):
  layer = RelativePositionBias(num_heads=3)
  x = np.zeros((2, 20, 4), "float32")
  layer.build(x.shape)
  table = rng.normal(size=(32, 3)).astype("float32")
  layer.bias_table.assign(table)
  bias = layer(x).numpy()
  assert bias.shape == (1, 3, 20, 20)
  for q in range(20):
    for k in range(20):
      np.testing.assert_array_equal(bias[0, :, q, k], table[ref.t5_bucket(k - q)])
