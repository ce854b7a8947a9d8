"""JAX's training loop: jitted steps over numpy batches, on one device or several.

The run itself (the schedule of loop calls, progress lines, metrics.jsonl, the NaN stop,
Ctrl-C) is `driver.TrainingDriver`'s, the same code the TensorFlow loop runs; the
objectives, metric sums, optimizers and schedules are the ones TensorFlow trains with.
What is JAX's here is one update, written with Keras' stateless API:

  for each of the N micro-batches (`jax.lax.scan`, one micro-batch's activations alive):
    outputs = model.stateless_call(weights, ..., training=True)
    loss share = objective.loss(objective.sums(batch, outputs), normalizers of all N)
    gradient of the share, summed
  the summed gradient clipped to `clip_norm` by its global norm (as tf.clip_by_global_norm)
  optimizer.stateless_apply (AdamW or LAMB)

so its losses are the TensorFlow loop's for the same weights and batches
(tests/backends/test_pretraining_without_tensorflow.py holds them equal). Variables the
loss does not reach (the pooler without NSP) get a zero gradient here, where the
TensorFlow loop leaves them out of the update; AdamW then still decays them. The loss is
unchanged by it.

Several devices: under `keras.distribution.DataParallel` (set before the model is built,
so its variables are replicated) each micro-batch is split along its batch axis over the
devices; the sums inside the jitted step are then over the whole batch, and XLA adds the
cross-device reductions. No all-reduce is written here. Several hosts are JAX's
(`jax.distributed.initialize()` before Keras' `DataParallel`), each reading its share of
the records (`record_batches.training_batches(shard=...)`).

The step donates the state it updates (trainable and non-trainable variables, the
seed generators' states among them, the optimizer's variables, and the 16-bit copies of
the weights the model reads only cast, which a loop call keeps beside them under a mixed
policy: `_step_state`): XLA writes the new values into the old buffers, so a GPU holds
the parameters and optimizer slots once, not twice. A loop call reads the arrays the
Keras variables hold, steps on them and writes the step's outputs back before it returns,
also when it stops part-way (bad input, a second Ctrl-C): the donated arrays are deleted,
so the variables must never be left holding them.
Evaluation and checkpoints read the variables between calls, after that write-back.

Input, checkpoints (`saving.training_state`'s ckpt-N.state/ folders) and events are
`numpy_batch_loop.NumpyBatchLoop`'s, shared with PyTorch's loop.
"""

import collections
from typing import Dict, Optional

from absl import logging
import jax
import jax.numpy as jnp
import keras
import numpy as np

from recurrent_bert.errors import InputError
from recurrent_bert.layers.kernels.pallas_support import blocks_per_iteration
from recurrent_bert.training.numpy_batch_loop import NumpyBatchLoop

# Gradients of fewer elements go into the global norm as one vector (`global_norm`).
_SMALL = 1 << 16
# A larger gradient's squares are first summed over rows of a [rows, -1] view of it, rows
# the largest power of 2 up to this that divides its size.
_ROWS = 1024
# What may stand between a cast and the concatenation that reads it.
_RESHAPES = ("reshape", "broadcast_in_dim", "expand_dims", "squeeze")


def global_norm(grads):
  """`NumpyBatchLoop._global_norm` ([] float32, the root of the sum of every squared
  element of `grads`, float32 arrays) in few GPU kernels.

  The gradients of fewer than `_SMALL` elements (biases and LayerNorms: most of a model's
  variables, few of its elements) are squared as one concatenated vector. A larger one
  is summed over each row of a [rows, -1] view of it ([rows] float32), one kernel that
  reads it once; XLA splits a plain sum of it into two kernels, the second a launch for
  a few hundred numbers. The rows' sums and the small squares then make one last sum:
  BERT-base's training step compiled for an H100 is 74 kernels fewer (881 to 807). The
  barriers keep XLA from splitting the concatenated sums back into one per part."""
  parts = [
      jnp.sum(jnp.square(g.reshape(blocks_per_iteration(g.size, _ROWS), -1)), axis=1)
      for g in grads
      if g.size >= _SMALL
  ]
  small = [jnp.ravel(g) for g in grads if g.size < _SMALL]
  if small:
    parts.append(jnp.square(jax.lax.optimization_barrier(jnp.concatenate(small))))
  if not parts:
    return jnp.zeros((), jnp.float32)
  return jnp.sqrt(jnp.sum(jax.lax.optimization_barrier(jnp.concatenate(parts))))


def read_only_cast(loss_fn, trainable, *arguments):
  """((index, dtype), ...): the arrays of `trainable` that `loss_fn(trainable, *arguments)`
  uses only cast to one 16-bit float dtype, read from its traced program. Any other use
  (inside a nested function or kernel too) leaves a weight out, so a copy is only ever
  what the program computes from it; so does a cast that a concatenation reads (stacked
  weights: XLA casts them in the stacking kernel, where a copy saves nothing)."""
  closed = jax.make_jaxpr(loss_fn)(trainable, *arguments)
  uses = collections.defaultdict(list)  # id(variable) -> the equations that read it
  for equation in closed.jaxpr.eqns:
    for operand in equation.invars:
      uses[id(operand)].append(equation)
  cast = []
  for index, variable in enumerate(closed.jaxpr.invars[: len(trainable)]):
    readers = uses[id(variable)]
    if jnp.dtype(trainable[index].dtype) != jnp.float32 or not readers:
      continue
    if any(e.primitive.name != "convert_element_type" for e in readers):
      continue
    dtypes = {jnp.dtype(e.params["new_dtype"]) for e in readers}
    if len(dtypes) != 1 or not dtypes <= {jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)}:
      continue
    if not any(_concatenated(e.outvars[0], uses) for e in readers):
      cast.append((index, dtypes.pop()))
  return tuple(cast)


def _concatenated(value, uses) -> bool:
  """Whether a concatenation or stack reads `value` (a jaxpr variable), through
  reshapes."""
  for equation in uses[id(value)]:
    if equation.primitive.name in ("concatenate", "stack"):
      return True
    if equation.primitive.name in _RESHAPES and _concatenated(equation.outvars[0], uses):
      return True
  return False


def set_up_devices(devices: Optional[int], micro_batch_size: int) -> int:
  """Uses one device, or every local one through Keras' DataParallel; returns the count.

  Raises:
    InputError: the micro-batch does not split evenly over the devices.
  """
  available = jax.devices()
  count = len(available) if devices is None else devices
  if count > len(available):
    raise InputError(f"{count} devices asked for, {len(available)} found: {available}")
  if count > 1:
    if micro_batch_size % count:
      raise InputError(
          f"--train_batch_size / --gradient_accumulation_steps = {micro_batch_size} "
          f"examples per micro-batch do not split over the {count} devices"
      )
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=available[:count]))
  logging.info("JAX: %d of %d %s device(s)", count, len(available), available[0].platform)
  return count


class JaxTrainingLoop(NumpyBatchLoop):
  """Trains `model` on `objective` with jitted JAX steps (module docstring).

  Args:
    model, optimizer, batches_fn, objective, clip_norm, loss_scaling: `NumpyBatchLoop`'s;
      the model's variables are read before and written after every loop call, so
      evaluation and saving see the trained weights.
    jit_compile: TensorFlow's XLA switch (`TrainingSettings.loop_arguments` gives it):
      JAX always compiles its step, so it is not read.
    **kwargs: `TrainingDriver`'s (model_dir, global_batch_size, num_train_steps, ...).
  """

  def __init__(
      self, model, optimizer, batches_fn, objective, *, jit_compile: bool = True, **kwargs
  ):
    super().__init__(model, optimizer, batches_fn, objective, **kwargs)
    self._distribution = keras.distribution.distribution()
    del jit_compile  # JAX always jits
    # The four state lists (module docstring); never the micro-batches, which no output
    # could reuse (JAX would warn that they were not usable).
    self._jitted_step = jax.jit(self._step, donate_argnums=(0, 1, 2, 3))
    self._read_cast = None  # ((index of a trainable variable, dtype), ...): `_step_state`

  # -- one update ---------------------------------------------------------------------

  def _loss_share(self, trainable, non_trainable, batch, normalizers):
    outputs, non_trainable = self.model.stateless_call(
        trainable, non_trainable, self.objective.model_inputs(batch), training=True
    )
    sums = self.objective.sums(batch, outputs)
    return self.objective.loss(sums, normalizers), (sums, non_trainable)

  def _step(self, trainable, non_trainable, optimizer_variables, copies, micro_batches):
    """One update from `micro_batches` (a tuple of N batch dicts); `copies` are the 16-bit
    copies of the weights the model reads only cast (`_step_state`).

    Returns:
      (trainable, non_trainable, optimizer_variables, copies, {"loss", stats, step
      values}).
    """
    normalizers = self._summed_normalizers(micro_batches)
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *micro_batches)
    weights = list(trainable)
    for (index, _), copy in zip(self._read_cast, copies):
      weights[index] = copy
    value_and_grad = jax.value_and_grad(self._loss_share, has_aux=True)

    def grad_fn(batch):  # gradients in the variables' dtype (float32 for the copies' too)
      result, grads = value_and_grad(weights, non_trainable, batch, normalizers)
      return result, [g.astype(t.dtype) for g, t in zip(grads, trainable)]

    def micro_step(carry, batch):
      non_trainable, loss, sums, grads = carry
      (share, (micro_sums, non_trainable)), micro_grads = grad_fn(batch)
      grads = [g + m for g, m in zip(grads, micro_grads)]
      sums = {k: sums[k] + micro_sums[k] for k in sums}
      return (non_trainable, loss + share, sums, grads), None

    first = jax.tree_util.tree_map(lambda x: x[0], stacked)
    (loss, (sums, non_trainable)), grads = grad_fn(first)
    if len(micro_batches) > 1:
      rest = jax.tree_util.tree_map(lambda x: x[1:], stacked)
      (non_trainable, loss, sums, grads), _ = jax.lax.scan(
          micro_step, (non_trainable, loss, sums, grads), rest
      )
    grads = self._clipped(grads)
    trainable, optimizer_variables = self.optimizer.stateless_apply(
        optimizer_variables, grads, trainable
    )
    values = dict(sums, loss=loss, **self.objective.step_values(sums, normalizers))
    return trainable, non_trainable, optimizer_variables, self._copies(trainable), values

  def _global_norm(self, grads):
    return global_norm(grads)

  # -- input --------------------------------------------------------------------------

  def _device_batch(self, batch: Dict[str, np.ndarray]):
    """A micro-batch on the devices: split along its batch axis under DataParallel."""
    if self._distribution is None:
      return {k: jnp.asarray(v) for k, v in batch.items()}
    return {
        k: keras.distribution.distribute_tensor(v, self._distribution.get_data_layout(v.shape))
        for k, v in batch.items()
    }

  # -- the driver's hooks -------------------------------------------------------------

  def _state_variables(self):
    """The step's first three state lists of Keras variables, in its argument order."""
    return (
        self.model.trainable_variables,
        self.model.non_trainable_variables,
        self.optimizer.variables,
    )

  def _step_state(self, micro_batches):
    """The step's state arguments: the arrays of `_state_variables`' three lists, then
    the 16-bit copies of the trainable weights that the model reads only cast to a 16-bit
    dtype (under a mixed policy, the kernels and biases that Keras autocasts; found once,
    from the traced loss of `micro_batches`). The step reads the copies in their place and
    writes new ones as it updates the weights, in the optimizer's pass over them, where
    every step cast each such weight in a pass of its own (BERT-base's step compiled for
    an H100: 53 kernels and 0.19 GB fewer). The values are the same, bit for bit: a copy
    is the cast the model would make, and the gradient of the cast is the copy's,
    converted (to float32 before micro-batches add up)."""
    trainable, *rest = ([v.value for v in variables] for variables in self._state_variables())
    if self._read_cast is None:
      self._read_cast = read_only_cast(
          self._loss_share,
          trainable,
          rest[0],
          micro_batches[0],
          self._summed_normalizers(micro_batches),
      )
    return (trainable, *rest, self._copies(trainable))

  def _copies(self, trainable):
    return [trainable[index].astype(dtype) for index, dtype in self._read_cast]

  def train_steps(self, num_steps: int):
    self._start_input(self.current_step())
    state, per_step = None, []
    try:
      for _ in range(num_steps):
        micro_batches = tuple(self._device_batch(b) for b in self._next_micro_batches())
        state = state or self._step_state(micro_batches)
        *state, values = self._jitted_step(*state, micro_batches)
        per_step.append(values)
    finally:
      # The first step deleted the arrays the variables hold (donated): they take the
      # last step's outputs, whether or not every step ran.
      for variables, arrays in zip(self._state_variables(), state or ()):
        for variable, array in zip(variables, arrays):
          variable.assign(array)
    return self._call_results(jax.device_get(per_step))  # one wait for the whole call
