"""What the `Finetuner` does through JAX or PyTorch: devices, prediction, training rows.

Under `KERAS_BACKEND=jax` or `torch` the fine-tuning commands build `Devices` where
TensorFlow builds a tf.distribute strategy (`flags.execution.make_strategy`), and the
`Finetuner` runs the same modes with the same adapters, objectives, metrics, best/ keeping
and files, through these pieces and the shared driver (`backend_runs.loop_class()`:
`jax_loop.JaxTrainingLoop` or `torch_loop.TorchTrainingLoop`):

  Devices          JAX: one device, or every local one through Keras' DataParallel;
                   PyTorch: one
  NumpyPredictor   the task model over every row of a feature cache, in row order (the
                   last batch padded to the static batch shape, the padding dropped)
  row_batches      the training rows, in a new seeded order each epoch, resumable

Checkpoints are `saving.training_state`'s ckpt-N.state/ folders; best/ holds model.weights.h5.
The feature caches are still written and read with TensorFlow (`data.feature_cache`),
so fine-tuning under JAX or PyTorch needs TensorFlow installed; pretraining does not.
"""

import contextlib
from typing import Callable, Dict, Iterator, Optional, Sequence

import keras
import numpy as np

from recurrent_bert.data import feature_cache
from recurrent_bert.training import backend_runs


class Devices:
  """The stand-in of a tf.distribute strategy under JAX or PyTorch, as far as
  fine-tuning asks.

  Args:
    count: 1, or None for every local device (JAX: Keras' DataParallel).
    micro_batch_size: the training micro-batch, which must split over the devices (0:
      any split).
  """

  def __init__(self, count: Optional[int], micro_batch_size: int = 0):
    self.num_replicas_in_sync = backend_runs.set_up_devices(count, micro_batch_size)

  def scope(self):
    """Nothing to enter: the distribution (if any) is Keras' global one."""
    return contextlib.nullcontext()


class NumpyPredictor:
  """`evaluation.Predictor` under JAX or PyTorch: {output: float32 [N, ...]} for a
  cache's N rows.

  Args:
    model: a task model (a tensor output is named "logits").
    model_inputs: batch dict -> the model's input dict (the objective's).
    output_keys: the outputs to return.
  """

  def __init__(self, model, model_inputs: Callable, output_keys: Sequence[str]):
    self.model = model
    self.model_inputs = model_inputs
    self.output_keys = tuple(output_keys)
    self._forward = backend_runs.inference_function(self._outputs)

  def _outputs(self, trainable, non_trainable, batch):
    outputs, _ = self.model.stateless_call(
        trainable, non_trainable, self.model_inputs(batch), training=False
    )
    if not isinstance(outputs, dict):
      outputs = {"logits": outputs}
    return {k: keras.ops.cast(outputs[k], "float32") for k in self.output_keys}

  def __call__(self, cache_path: str, batch_size: int) -> Dict[str, np.ndarray]:
    features = feature_cache.read_feature_cache(cache_path)
    num_rows = len(next(iter(features.values())))
    trainable = [v.value for v in self.model.trainable_variables]
    non_trainable = [v.value for v in self.model.non_trainable_variables]
    parts: Dict[str, list] = {k: [] for k in self.output_keys}
    for start in range(0, num_rows, batch_size):
      rows = np.arange(start, start + batch_size)
      rows[rows >= num_rows] = 0  # padding: copies of row 0, dropped below
      batch = {k: v[rows] for k, v in features.items()}
      outputs = self._forward(trainable, non_trainable, batch)
      real = min(batch_size, num_rows - start)
      for k in self.output_keys:
        parts[k].append(keras.ops.convert_to_numpy(outputs[k])[:real])
    return {k: np.concatenate(v) for k, v in parts.items()}


def row_batches(
    features: Dict[str, np.ndarray], batch_size: int, seed: int, skip_batches: int = 0
) -> Iterator[Dict[str, np.ndarray]]:
  """Endless batches of the feature rows: epoch e in the permutation of seed (seed, e),
  batches running on across epochs; the first `skip_batches` are passed over (a resumed
  run's), without being gathered."""
  num_rows = len(next(iter(features.values())))
  index = 0
  epoch = 0
  pending = np.zeros([0], np.int64)
  while True:
    while len(pending) < batch_size:
      order = np.random.default_rng([seed, epoch]).permutation(num_rows)
      pending = np.concatenate([pending, order])
      epoch += 1
    rows, pending = pending[:batch_size], pending[batch_size:]
    if index >= skip_batches:
      yield {k: v[rows] for k, v in features.items()}
    index += 1
