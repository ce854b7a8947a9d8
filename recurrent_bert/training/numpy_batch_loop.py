"""What the JAX and PyTorch training loops share: everything but the step.

Both read numpy micro-batches from a `batches_fn(skip_batches)` iterator (the package's
own record readers, no tf.data), keep `saving.training_state`'s ckpt-N.state/ folders
(Keras weights, optimizer variables, dropout RNG, step) and write events where TensorFlow
is installed. How one update is computed is the subclass's `train_steps`:

  training/jax_loop.py    `JaxTrainingLoop`: a jitted, donating step (DataParallel too)
  training/torch_loop.py  `TorchTrainingLoop`: autograd, optionally `torch.compile`d

The input position of step N is N x gradient_accumulation_steps micro-batches, which a
resumed run skips.
"""

from typing import Callable, Dict, Iterator, List, Optional

from absl import logging
import keras
import numpy as np

from recurrent_bert import saving
from recurrent_bert.saving import training_state
from recurrent_bert.training import events
from recurrent_bert.training.driver import TrainingDriver


class NumpyBatchLoop(TrainingDriver):
  """A `TrainingDriver` over numpy micro-batches with ckpt-N.state/ checkpoints.

  Args:
    model: a built Keras model (e.g. `Pretrainer`).
    optimizer: a built Keras optimizer over `model.trainable_variables`
      (`optimizers.create_optimizer`, without clip_norm: the step clips).
    batches_fn: `batches_fn(skip_batches)` -> iterator of micro-batches (dicts of numpy
      arrays of global_batch_size / gradient_accumulation_steps examples), positioned
      after `skip_batches` of them.
    objective: one of training/objectives.py.
    clip_norm: global-norm gradient clipping (0: none), as tf.clip_by_global_norm.
    loss_scaling: must be False: float16 loss scaling is TensorFlow's.
    **kwargs: `TrainingDriver`'s (model_dir, global_batch_size, num_train_steps, ...).
  """

  def __init__(
      self,
      model,
      optimizer,
      batches_fn: Callable[[int], Iterator[Dict[str, np.ndarray]]],
      objective,
      *,
      clip_norm: float = 1.0,
      loss_scaling: bool = False,
      **kwargs,
  ):
    if loss_scaling:
      raise ValueError(
          f"float16 loss scaling is TensorFlow's; under {keras.backend.backend()} train in "
          "bfloat16"
      )
    super().__init__(model, optimizer, objective, **kwargs)
    self.batches_fn = batches_fn
    self.clip_norm = clip_norm
    self._batches: Optional[Iterator] = None

  def _next_micro_batches(self) -> List[Dict[str, np.ndarray]]:
    """The next update's gradient_accumulation_steps micro-batches."""
    return [next(self._batches) for _ in range(self.accumulation_steps)]

  def _summed_normalizers(self, micro_batches) -> Dict:
    """The objective's normalizers of the whole update: summed over its micro-batches."""
    normalizers = [self.objective.normalizers(batch) for batch in micro_batches]
    return {k: sum(n[k] for n in normalizers) for k in normalizers[0]}

  def _clipped(self, grads: List) -> List:
    """`grads` scaled to a global norm of at most `clip_norm` (tf.clip_by_global_norm),
    unchanged when clip_norm is 0; in `keras.ops`, which XLA fuses inside JAX's jitted
    step. PyTorch's loop, eager here, overrides it with multi-tensor kernels."""
    if self.clip_norm <= 0:
      return grads
    ops = keras.ops
    norm = self._global_norm([ops.cast(g, "float32") for g in grads])
    scale = self.clip_norm / ops.maximum(norm, self.clip_norm)
    return [ops.cast(g * scale, keras.backend.standardize_dtype(g.dtype)) for g in grads]

  def _global_norm(self, grads: List):
    """[] float32: sqrt of the sum of the squares of every element of `grads` (float32)."""
    ops = keras.ops
    return ops.sqrt(sum(ops.sum(ops.square(g)) for g in grads))

  def _call_results(self, per_step: List[Dict[str, np.ndarray]]):
    """`train_steps`' return value from each step's numpy values."""
    stat_names = self.objective.stat_names
    sums = {name: float(sum(np.float64(v[name]) for v in per_step)) for name in stat_names}
    step_value_names = ("loss", *self.objective.step_value_names)
    values = {k: np.array([v[k] for v in per_step], np.float32) for k in step_value_names}
    return sums, values

  # -- the driver's hooks -------------------------------------------------------------

  def _start_input(self, step: int) -> None:
    if self._batches is None:
      self._batches = self.batches_fn(step * self.accumulation_steps)

  def current_step(self) -> int:
    return int(keras.ops.convert_to_numpy(self.optimizer.iterations))

  def restore(self) -> Optional[str]:
    latest = saving.latest_state(self.model_dir)
    if latest:
      step = training_state.restore_state(latest, self.model, self.optimizer)
      logging.info("resumed from %s at step %d", latest, step)
    self._saved_step = self.current_step() if latest else None
    return latest

  def _save(self) -> None:
    step = self.current_step()
    if self.is_chief:
      training_state.save_state(
          self.model_dir, step, self.model, self.optimizer, self.keep_checkpoint_max
      )
    self._saved_step = step

  def latest_checkpoint(self) -> Optional[str]:
    return saving.latest_state(self.model_dir)

  def _write_scalars(self, scalars: Dict[str, float], step: int) -> None:
    events.write_scalars(self.model_dir, scalars, step, is_chief=self.is_chief)
