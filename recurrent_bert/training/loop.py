"""TensorFlow's training loop: strategy.run, tf.function loop calls, tf.train checkpoints.

The run itself (the schedule of loop calls, progress lines, metrics.jsonl, the non-finite
stop, Ctrl-C) is `driver.TrainingDriver`'s, shared with JAX's loop (training/jax_loop.py);
this module is what TensorFlow computes and saves for it.

One loop for every task: what is computed per batch comes from an objective
(training/objectives.py: pretraining, classification, regression, span extraction).

Why not `model.fit`: under MultiWorkerMirroredStrategy Keras 3's trainer passes
PerReplica values to `strategy.reduce` while building its symbolic step
(keras-team/keras#20585). Owning the loop, as the TF Model Garden does, keeps one code
path for every strategy.

One call of the loop function runs `num_steps` steps inside a single tf.function
(a `tf.range` loop over the distributed iterator), so the host is involved only between
loops: for logging, checkpoints and the non-finite check. Per step, on each replica:

  1. forward + backward (`tf.function(jit_compile=...)`, XLA-compatible, host-free);
     the loss is normalised by *global* sums (the objective's normalizers, e.g. MLM
     weights and examples, all-reduced) so that gradients summed over replicas equal
     the single-device gradient;
  2. gradients are all-reduced, clipped to `clip_norm` by their global norm, divided by
     the replica count (Keras' optimizer all-reduces again, summing identical copies)
     and applied by the optimizer (AdamW or LAMB).

Gradient accumulation (`gradient_accumulation_steps` N > 1): a step is one update made
of N micro-batches per replica (global batch / (N x replicas) examples each). The
normalizers of all N are summed and all-reduced first, so each micro-batch's loss share
is already normalised by the whole batch; summing the N shares' gradients (one
micro-batch at a time, in a `tf.while_loop` without parallel iterations, so only one
micro-batch's activations are alive) gives the gradient of the batch, which step 2 then
clips and applies once. Stats are sums, so they add up across micro-batches too. The
step counter, the schedule and checkpoints count updates; a checkpoint is only written
between updates, so a run killed inside an accumulation cycle resumes at the last
update boundary with the input position of that boundary.

Resuming. Checkpoints hold the model, the optimizer, `global_step` and — where the
iterator is trackable (the default strategy's tf.data iterator) — the input position.
Distributed iterators are not checkpointable in TF 2.21, so under other strategies a
restarted run rebuilds the (seeded, deterministic) dataset and skips the batches it had
consumed: global_step x N x (replicas per input pipeline). A resumed run first cuts
metrics.jsonl back to the restored step, so the log reads as one run.

Ctrl-C (SIGINT) or SIGTERM stops training between two loop calls: the loop saves a
checkpoint of the last completed step and raises `TrainingInterrupted`, which the
commands turn into one line and exit status 130.
"""

import os
import shutil
from typing import Callable, Dict, Optional

from absl import logging
import tensorflow as tf

from recurrent_bert import model_dir as layout
from recurrent_bert import saving
from recurrent_bert.data import record_errors
from recurrent_bert.training import objectives
from recurrent_bert.training.driver import NonFiniteLossError  # noqa: F401  (re-exported)
from recurrent_bert.training.driver import Throughput  # noqa: F401  (re-exported)
from recurrent_bert.training.driver import TrainingDriver
from recurrent_bert.training.driver import TrainingInterrupted  # noqa: F401  (re-exported)
from recurrent_bert.training.driver import seconds_per_step  # noqa: F401  (re-exported)
from recurrent_bert.training.events import write_scalar


def _num_workers(strategy: tf.distribute.Strategy) -> int:
  """Worker processes taking part in every collective (1 but for multi-worker runs)."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or not resolver:
    return 1
  spec = resolver.cluster_spec()
  return max(1, sum(spec.num_tasks(job) for job in ("chief", "worker") if job in spec.jobs))


class TrainingLoop(TrainingDriver):
  """Trains a task model with a custom distributed loop.

  Build the model and optimizer under `strategy.scope()` first, then:
    loop = TrainingLoop(strategy, model, optimizer, dataset_fn, objective, ...)
    loop.run()

  `dataset_fn(input_context, skip_batches)` returns the per-replica-batched dataset of
  one input pipeline (see data/pretraining_dataset.py), in micro-batches of
  global_batch_size / (gradient_accumulation_steps x replicas) examples; `objective` is
  one of training/objectives.py. `row_extras()` gives values appended to every
  metrics.jsonl row (e.g. {"skipped_records": n}); `checkpoint_iterator` False keeps the
  input iterator out of checkpoints (a resumed run skips the batches consumed instead).
  The other keyword arguments are `driver.TrainingDriver`'s (model_dir,
  global_batch_size, num_train_steps, steps_per_loop, save_checkpoints_steps,
  keep_checkpoint_max, log_steps, is_chief, gradient_accumulation_steps, row_extras).
  """

  def __init__(
      self,
      strategy: tf.distribute.Strategy,
      model,
      optimizer,
      dataset_fn: Callable[[tf.distribute.InputContext, int], tf.data.Dataset],
      objective,
      *,
      clip_norm: float = 1.0,
      jit_compile: bool = False,
      loss_scaling: bool = False,
      worker_id: int = 0,
      checkpoint_iterator: bool = True,
      **kwargs,
  ):
    super().__init__(model, optimizer, objective, **kwargs)
    model_dir, is_chief = self.model_dir, self.is_chief
    self.strategy = strategy
    self.dataset_fn = dataset_fn
    self.clip_norm = clip_norm
    self.jit_compile = jit_compile
    self.loss_scaling = loss_scaling
    with strategy.scope():
      self.global_step = tf.Variable(
          0,
          dtype=tf.int64,
          trainable=False,
          name="global_step",
          aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
      )

    # The default strategy hands out a plain (trackable) tf.data iterator.
    probe = strategy.distribute_datasets_from_function(lambda ctx: tf.data.Dataset.range(1))
    # An iterator over Python code (--skip_bad_records' reader) cannot be saved either.
    self.iterator_in_checkpoint = checkpoint_iterator and isinstance(iter(probe), tf.data.Iterator)
    self._iterator = None
    state = dict(optimizer=optimizer, global_step=self.global_step)
    if self.iterator_in_checkpoint:
      self._iterator = self._make_iterator(skip_steps=0)
      state["iterator"] = self._iterator
    self.checkpoint = saving.tf_checkpoint(model, include_rng_state=True, **state)
    # Every MultiWorkerMirrored worker must take part in saving; only the chief's copy
    # is kept, the others write to a scratch directory they delete.
    self._checkpoint_dir = (
        model_dir
        if is_chief
        else os.path.join(model_dir, layout.SCRATCH_DIR, f"worker_{worker_id}")
    )
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, self._checkpoint_dir, max_to_keep=self.keep_checkpoint_max
    )
    self.summary_writer = (
        tf.summary.create_file_writer(os.path.join(model_dir, layout.TRAIN_EVENTS_DIR))
        if is_chief
        else tf.summary.create_noop_writer()
    )
    # A checkpoint save is collective: one worker alone cannot save on Ctrl-C.
    self._num_workers = _num_workers(strategy)
    self._train_loop = tf.function(self._train_loop_fn)
    self._forward_backward = tf.function(self._forward_backward_fn, jit_compile=jit_compile)

  # -- input --------------------------------------------------------------------------

  def _make_iterator(self, skip_steps: int):
    def dataset_fn(input_context):
      # Each step takes N micro-batches per replica; a pipeline feeds this many replicas.
      replicas_per_pipeline = max(
          1, self.strategy.num_replicas_in_sync // input_context.num_input_pipelines
      )
      return self.dataset_fn(
          input_context, skip_steps * self.accumulation_steps * replicas_per_pipeline
      )

    options = tf.distribute.InputOptions(experimental_fetch_to_device=True)
    return iter(self.strategy.distribute_datasets_from_function(dataset_fn, options))

  # -- one step -----------------------------------------------------------------------

  def _forward_backward_fn(self, batch, global_normalizers):
    """Loss, stats and (possibly loss-scaled) gradients of one replica's batch."""
    variables = self.model.trainable_variables
    with tf.GradientTape() as tape:
      outputs = self.model(self.objective.model_inputs(batch), training=True)
      sums = self.objective.sums(batch, outputs)
      # This replica's share: summing shares over replicas gives the global loss.
      loss = self.objective.loss(sums, global_normalizers)
      scaled_loss = self.optimizer.scale_loss(loss) if self.loss_scaling else loss
    grads = tape.gradient(scaled_loss, variables)
    # Dense embedding gradients: all-reduce, clipping and scaling then treat every
    # gradient alike (IndexedSlices do not divide; a [V, H] dense sum is what BERT does).
    grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
    return loss, sums, grads

  def _accumulate(self, micro_batches, global_normalizers):
    """Loss share, stats and gradients of one replica's micro-batches, summed.

    Args:
      micro_batches: N >= 1 batches of this replica (dicts of [b, ...] tensors).
      global_normalizers: the objective's normalizers of the whole update (all
        micro-batches, all replicas).

    Returns:
      (loss share, {stat: sum}, gradients: None where a variable has none), as
      `_forward_backward_fn` returns them for one batch.
    """
    loss, sums, grads = self._forward_backward(micro_batches[0], global_normalizers)
    if len(micro_batches) == 1:
      return loss, sums, grads
    present = [i for i, g in enumerate(grads) if g is not None]
    rest = tf.nest.map_structure(lambda *xs: tf.stack(xs), *micro_batches[1:])

    def body(i, loss, sums, accumulated):
      batch = tf.nest.map_structure(lambda x: x[i], rest)
      micro_loss, micro_sums, micro_grads = self._forward_backward(batch, global_normalizers)
      return (
          i + 1,
          loss + micro_loss,
          {k: sums[k] + micro_sums[k] for k in sums},
          [a + micro_grads[j] for a, j in zip(accumulated, present)],
      )

    # parallel_iterations=1: the next micro-batch starts when this one's gradients are
    # summed, which bounds memory to one micro-batch's activations.
    _, loss, sums, accumulated = tf.while_loop(
        lambda i, *_: i < len(micro_batches) - 1,
        body,
        (tf.constant(0), loss, sums, [grads[j] for j in present]),
        parallel_iterations=1,
    )
    grads = list(grads)
    for j, g in zip(present, accumulated):
      grads[j] = g
    return loss, sums, grads

  def _replica_step(self, micro_batches):
    context = tf.distribute.get_replica_context()
    normalizers = [self.objective.normalizers(batch) for batch in micro_batches]
    normalizers = {k: tf.add_n([n[k] for n in normalizers]) for k in normalizers[0]}
    global_normalizers = context.all_reduce(tf.distribute.ReduceOp.SUM, normalizers)
    loss, sums, grads = self._accumulate(micro_batches, global_normalizers)
    # Variables outside the loss (the pooler without NSP) have no gradient: leave them
    # out of the update entirely, weight decay included.
    pairs = [(g, v) for g, v in zip(grads, self.model.trainable_variables) if g is not None]
    grads = context.all_reduce(tf.distribute.ReduceOp.SUM, [g for g, _ in pairs])
    clip_norm = self.clip_norm
    if self.loss_scaling:  # clipping scaled gradients at a scaled norm = clipping unscaled
      clip_norm = self.optimizer.scale_loss(tf.constant(clip_norm))
    if self.clip_norm > 0:
      grads, _ = tf.clip_by_global_norm(grads, clip_norm)
    num_replicas = float(self.strategy.num_replicas_in_sync)
    if num_replicas > 1:
      grads = [g / num_replicas for g in grads]
    self.optimizer.apply(grads, [v for _, v in pairs])
    # Each replica's share of a step value; the loop sums them over replicas.
    return dict(sums, loss=loss, **self.objective.step_values(sums, global_normalizers))

  def _train_loop_fn(self, iterator, num_steps):
    """Runs `num_steps` steps.

    Returns:
      (stats summed over replicas and steps {stat name: scalar},
       per-step values {"loss", *objective step values: [num_steps]}).
    """
    stat_names = self.objective.stat_names
    totals = {name: tf.constant(0.0) for name in stat_names}
    step_values = {
        k: tf.TensorArray(tf.float32, size=num_steps)
        for k in ("loss", *self.objective.step_value_names)
    }
    for i in tf.range(num_steps):
      micro_batches = [next(iterator) for _ in range(self.accumulation_steps)]
      per_replica = self.strategy.run(self._replica_step, args=(micro_batches,))
      reduced = {
          k: self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
          for k, v in per_replica.items()
      }
      step_values = {k: array.write(i, reduced[k]) for k, array in step_values.items()}
      totals = {name: totals[name] + reduced[name] for name in stat_names}
      self.global_step.assign_add(1)
    return totals, {k: array.stack() for k, array in step_values.items()}

  # -- driver -------------------------------------------------------------------------

  def restore(self) -> Optional[str]:
    """Restores the latest checkpoint of model_dir (all workers read the chief's)."""
    latest = saving.latest_checkpoint(self.model_dir)
    if latest:
      self.checkpoint.read(latest).assert_existing_objects_matched()
      logging.info("resumed from %s at step %d", latest, int(self.global_step.numpy()))
    self._saved_step = int(self.global_step.numpy()) if latest else None
    return latest

  def _save(self) -> None:
    step = int(self.global_step.numpy())
    self.manager.save(checkpoint_number=step)
    self._saved_step = step
    if not self.is_chief:
      shutil.rmtree(self._checkpoint_dir, ignore_errors=True)

  def current_step(self) -> int:
    return int(self.global_step.numpy())

  def latest_checkpoint(self) -> Optional[str]:
    return saving.latest_checkpoint(self.model_dir)

  def _start_input(self, step: int) -> None:
    if self._iterator is None:
      self._iterator = self._make_iterator(skip_steps=step)

  def _write_scalars(self, scalars: Dict[str, float], step: int) -> None:
    with self.summary_writer.as_default():
      for name, value in scalars.items():
        write_scalar(name, value, step)
    self.summary_writer.flush()

  def train_steps(self, num_steps: int):
    """One loop call of `num_steps` steps (`TrainingDriver.train_steps`)."""
    self._start_input(self.current_step())
    with record_errors.reading_records():
      sums, values = self._train_loop(self._iterator, tf.constant(num_steps, tf.int32))
    return ({k: float(v) for k, v in sums.items()}, {k: v.numpy() for k, v in values.items()})


class PretrainingLoop(TrainingLoop):
  """The loop with the pretraining objective (MLM, + NSP when the model has it)."""

  def __init__(self, strategy, model, optimizer, dataset_fn, **kwargs):
    super().__init__(
        strategy,
        model,
        optimizer,
        dataset_fn,
        objectives.PretrainingObjective(getattr(model, "use_nsp", False)),
        **kwargs,
    )
