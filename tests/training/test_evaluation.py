"""Distributed prediction over a feature cache: every row once, in order, padding dropped."""

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.data import feature_cache
from recurrent_bert.training import evaluation


class _RowModel:
  """logits [B, 2] = (sum of input_ids, first id): a function we can check by hand."""

  def __call__(self, inputs, training=False):
    ids = tf.cast(inputs["input_ids"], tf.float32)
    return tf.stack([tf.reduce_sum(ids, -1), ids[:, 0]], axis=-1)


@pytest.mark.parametrize("num_rows,batch_size", [(1, 4), (10, 4), (12, 4), (7, 32)])
def test_predictor_returns_each_row_once_in_order(tmp_path, rng, num_rows, batch_size):
  ids = rng.integers(0, 1000, size=(num_rows, 5)).astype(np.int32)
  cache = str(tmp_path / "rows.tfrecord")
  feature_cache.write_feature_cache(cache, {"input_ids": ids}, "key")
  predictor = evaluation.Predictor(
      tf.distribute.get_strategy(), _RowModel(), lambda batch: batch, ["logits"]
  )
  outputs = predictor(cache, batch_size)
  expected = np.stack([ids.sum(-1), ids[:, 0]], -1).astype(np.float32)
  np.testing.assert_array_equal(outputs["logits"], expected)


def test_empty_cache_is_an_error(tmp_path):
  cache = str(tmp_path / "empty.tfrecord")
  feature_cache.write_feature_cache(cache, {"input_ids": np.zeros((0, 3), np.int32)}, "k")
  predictor = evaluation.Predictor(
      tf.distribute.get_strategy(), _RowModel(), lambda batch: batch, ["logits"]
  )
  with pytest.raises(ValueError, match="no rows"):
    predictor(cache, 4)
