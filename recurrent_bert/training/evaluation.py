"""Distributed prediction over a feature cache, returned in the cache's row order.

Every replica must run the same number of steps with the same (static) batch shape, on
one host or many. So the N rows of the cache are numbered, padded with copies of row 0
numbered -1 up to a multiple of the global batch, and sharded between the input
pipelines; each step's outputs are gathered from all replicas (`strategy.gather`) with
their row numbers, padding is dropped and the rows are put back in order on the host.
"""

import math
from typing import Callable, Dict, Sequence

import numpy as np
import tensorflow as tf

from recurrent_bert.data import feature_cache

ROW_ID = "row_id"


def eval_dataset(
    cache_path: str, global_batch_size: int, input_context: tf.distribute.InputContext
) -> tf.data.Dataset:
  """One input pipeline's share of the (padded, numbered) rows of a feature cache.

  Yields dicts of the cache's features with a per-replica batch axis B, plus
  `row_id` int32 [B] (-1 for padding rows).
  """
  metadata = feature_cache.read_cache_metadata(cache_path)
  num_rows = metadata["num_records"] if metadata else 0
  if num_rows == 0:
    raise ValueError(f"{cache_path}: no rows to evaluate")
  padded_rows = math.ceil(num_rows / global_batch_size) * global_batch_size
  rows = feature_cache.load_feature_dataset(cache_path).enumerate()
  rows = rows.map(lambda i, row: {**row, ROW_ID: tf.cast(i, tf.int32)})
  padding = rows.take(1).map(lambda row: {**row, ROW_ID: tf.constant(-1, tf.int32)})
  rows = rows.concatenate(padding.repeat(padded_rows - num_rows))
  rows = rows.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
  per_replica = input_context.get_per_replica_batch_size(global_batch_size)
  return rows.batch(per_replica, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


class Predictor:
  """Runs a model (inference mode) over every row of feature caches, on any strategy.

  Args:
    strategy: the strategy the model was built under.
    model: a task model; a tensor output is named "logits".
    model_inputs: batch dict -> the model's input dict (an objective's model_inputs).
    output_keys: the outputs to return.
  """

  def __init__(
      self,
      strategy: tf.distribute.Strategy,
      model,
      model_inputs: Callable[[Dict[str, tf.Tensor]], Dict[str, tf.Tensor]],
      output_keys: Sequence[str],
  ):
    self.strategy = strategy
    self.model = model
    self.model_inputs = model_inputs
    self.output_keys = tuple(output_keys)
    # One tf.function for every call: traced once per batch shape, not per evaluation.
    self._step = tf.function(self._step_fn)

  def _replica_step(self, batch):
    outputs = self.model(self.model_inputs(batch), training=False)
    if not isinstance(outputs, dict):
      outputs = {"logits": outputs}
    result = {k: tf.cast(outputs[k], tf.float32) for k in self.output_keys}
    result[ROW_ID] = batch[ROW_ID]
    return result

  def _step_fn(self, batch):
    per_replica = self.strategy.run(self._replica_step, args=(batch,))
    return {k: self.strategy.gather(v, axis=0) for k, v in per_replica.items()}

  def __call__(self, cache_path: str, global_batch_size: int) -> Dict[str, np.ndarray]:
    """Outputs for the N rows of a feature cache.

    Args:
      cache_path: a cache of `feature_cache.write_feature_cache`.
      global_batch_size: rows per step over all replicas (divisible by the replicas).

    Returns:
      {key: float32 numpy [N, ...]} in the cache's row order.
    """
    options = tf.distribute.InputOptions(experimental_fetch_to_device=True)
    dataset = self.strategy.distribute_datasets_from_function(
        lambda ctx: eval_dataset(cache_path, global_batch_size, ctx), options
    )
    parts: Dict[str, list] = {k: [] for k in (*self.output_keys, ROW_ID)}
    for batch in dataset:
      for k, v in self._step(batch).items():
        parts[k].append(v.numpy())
    row_ids = np.concatenate(parts.pop(ROW_ID))
    real = row_ids >= 0
    order = np.argsort(row_ids[real], kind="stable")
    if not np.array_equal(row_ids[real][order], np.arange(real.sum())):
      raise RuntimeError("distributed prediction lost or duplicated rows")
    return {k: np.concatenate(v)[real][order] for k, v in parts.items()}
