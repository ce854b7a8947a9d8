"""The custom training loop: strategy.run, checkpoints, summaries, progress.

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

import contextlib
import json
import math
import os
import shutil
import signal
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from absl import logging
import tensorflow as tf

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert.data import record_errors
from recurrent_bert.errors import InputError
from recurrent_bert.progress import format_duration
from recurrent_bert.training import checkpoints
from recurrent_bert.training import objectives


def _scalar_metadata():
  # What tensorboard's tf.summary.scalar writes, from TF's own protos: TensorBoard is
  # not a dependency, but its scalar dashboard reads these events.
  from tensorflow.core.framework import summary_pb2

  return summary_pb2.SummaryMetadata(
      plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
      data_class=summary_pb2.DATA_CLASS_SCALAR,
  )


def write_scalar(name: str, value: float, step: int) -> None:
  """A TensorBoard scalar on the default summary writer."""
  tf.summary.write(name, tf.constant(value, tf.float32), step=step, metadata=_scalar_metadata())


class NonFiniteLossError(RuntimeError):
  """The loss became NaN or infinite; the last good checkpoint is kept."""


class TrainingInterrupted(KeyboardInterrupt):
  """Ctrl-C stopped training after `step`; a re-run resumes from `checkpoint_step`.

  A KeyboardInterrupt, so that no `except Exception` on the way up swallows it. str() is
  the one line the commands print before exiting with status 130.

  Attributes:
    step: the last completed step.
    model_dir: the run's model_dir.
    checkpoint_step: the step of the latest checkpoint in model_dir, which a re-run
      resumes from (None: there is none); == step when the stop saved it.
    reason: why the checkpoint is older than `step` (empty when it is not).
  """

  def __init__(self, step: int, model_dir: str, checkpoint_step: Optional[int], reason: str = ""):
    super().__init__(step, model_dir, checkpoint_step, reason)
    self.step = step
    self.model_dir = model_dir
    self.checkpoint_step = checkpoint_step
    self.reason = reason

  def __str__(self) -> str:
    head = f"interrupted at step {self.step}"
    if self.checkpoint_step == self.step:
      return f"{head}: checkpoint saved in {self.model_dir}; run the same command to resume"
    reason = f"{self.reason}; " if self.reason else ""
    if self.checkpoint_step is not None:
      return (
          f"{head}: {reason}the last periodic checkpoint (step "
          f"{self.checkpoint_step}) is kept in {self.model_dir}; run the same command "
          "to resume from it"
      )
    return (
        f"{head}: {reason}no checkpoint yet in {self.model_dir}; run the same command "
        "to start again"
    )


def _num_workers(strategy: tf.distribute.Strategy) -> int:
  """Worker processes taking part in every collective (1 but for multi-worker runs)."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or not resolver:
    return 1
  spec = resolver.cluster_spec()
  return max(1, sum(spec.num_tasks(job) for job in ("chief", "worker") if job in spec.jobs))


class Throughput:
  """Steps, examples and tokens per second over the loop calls after the first.

  The first call of a process traces and compiles the loop function, which takes seconds
  to minutes on a large model: counted, it would make the first rate far too low and the
  first ETA far too long. The caller passes the times, so the bookkeeping is testable
  without a clock.
  """

  def __init__(self):
    self.first_call_seconds: Optional[float] = None  # tracing + its steps
    self._mark: Optional[float] = None  # timing runs from here (None: not yet)
    self._reset()

  def _reset(self) -> None:
    self.steps, self.seconds, self.examples, self.tokens = 0, 0.0, 0.0, 0.0

  def call_done(self, start: float, end: float, steps: int, examples: float, tokens: float) -> None:
    """Counts a loop call that ran from `start` to `end` (the first one is left out)."""
    if self._mark is None:
      self.first_call_seconds = end - start
    else:
      # From the previous call's end: the host's work between calls (metrics,
      # checkpoints, logs) is part of the training time, as the user waits for it.
      self.steps += steps
      self.examples += examples
      self.tokens += tokens
      self.seconds += end - self._mark
    self._mark = end

  def skip_until(self, now: float) -> None:
    """The time since the last call up to `now` is not training (evaluation)."""
    if self._mark is not None:
      self._mark = now

  def take(self) -> Optional[Dict[str, float]]:
    """{steps_per_second, examples_per_second, tokens_per_second} since the last take.

    None when no call after the first has ended since then (no honest rate yet).
    """
    if not self.steps:
      return None
    seconds = max(self.seconds, 1e-9)
    rates = {
        "steps_per_second": self.steps / seconds,
        "examples_per_second": self.examples / seconds,
        "tokens_per_second": self.tokens / seconds,
    }
    self._reset()
    return rates


class TrainingLoop:
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
  """

  def __init__(
      self,
      strategy: tf.distribute.Strategy,
      model,
      optimizer,
      dataset_fn: Callable[[tf.distribute.InputContext, int], tf.data.Dataset],
      objective,
      *,
      model_dir: str,
      global_batch_size: int,
      num_train_steps: int,
      steps_per_loop: int = 100,
      save_checkpoints_steps: int = 1000,
      keep_checkpoint_max: int = 5,
      log_steps: int = 100,
      clip_norm: float = 1.0,
      jit_compile: bool = False,
      loss_scaling: bool = False,
      is_chief: bool = True,
      worker_id: int = 0,
      gradient_accumulation_steps: int = 1,
      row_extras: Optional[Callable[[], Dict[str, float]]] = None,
      checkpoint_iterator: bool = True,
  ):
    self.strategy = strategy
    # Values every metrics.jsonl row of a call ends with (e.g. records skipped so far).
    self.row_extras = row_extras
    self.model = model
    self.optimizer = optimizer
    self.dataset_fn = dataset_fn
    self.model_dir = model_dir
    self.global_batch_size = global_batch_size
    self.num_train_steps = num_train_steps
    self.steps_per_loop = steps_per_loop
    self.save_checkpoints_steps = save_checkpoints_steps
    self.log_steps = log_steps
    self.clip_norm = clip_norm
    self.jit_compile = jit_compile
    self.loss_scaling = loss_scaling
    self.is_chief = is_chief
    self.objective = objective
    if gradient_accumulation_steps < 1:
      raise ValueError(
          f"gradient_accumulation_steps must be >= 1, got {gradient_accumulation_steps}"
      )
    self.accumulation_steps = gradient_accumulation_steps
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
    state = dict(
        model=checkpoints.variables_by_path(model, include_rng_state=True),
        optimizer=optimizer,
        global_step=self.global_step,
    )
    if self.iterator_in_checkpoint:
      self._iterator = self._make_iterator(skip_steps=0)
      state["iterator"] = self._iterator
    self.checkpoint = tf.train.Checkpoint(**state)
    # Every MultiWorkerMirrored worker must take part in saving; only the chief's copy
    # is kept, the others write to a scratch directory they delete.
    self._checkpoint_dir = (
        model_dir
        if is_chief
        else os.path.join(model_dir, layout.SCRATCH_DIR, f"worker_{worker_id}")
    )
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, self._checkpoint_dir, max_to_keep=keep_checkpoint_max
    )
    self.summary_writer = (
        tf.summary.create_file_writer(os.path.join(model_dir, layout.TRAIN_EVENTS_DIR))
        if is_chief
        else tf.summary.create_noop_writer()
    )
    # (steps, seconds) of each loop call of `run`; the first includes tracing.
    self.step_timings: List[Tuple[int, float]] = []
    # A checkpoint save is collective: one worker alone cannot save on Ctrl-C.
    self._num_workers = _num_workers(strategy)
    self._stop_requested = False
    self._saved_step: Optional[int] = None  # of the latest checkpoint (None: none)
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
    latest = tf.train.latest_checkpoint(self.model_dir)
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

  def _learning_rate(self, step: int) -> float:
    inner = getattr(self.optimizer, "inner_optimizer", self.optimizer)
    schedule = inner._learning_rate
    return float(schedule(step)) if callable(schedule) else float(schedule)

  def _log_progress(
      self,
      step: int,
      sums: Dict[str, float],
      num_steps: int,
      rates: Optional[Dict[str, float]],
      first_call_seconds: Optional[float] = None,
  ) -> None:
    """The progress line and summaries of the `num_steps` steps ending at `step`.

    `rates` (see `Throughput`) is None when only the first, tracing call ran since the
    last log: that line shows the call's duration instead of a rate and an ETA.
    """
    summary = self.objective.summarize(sums, num_steps)
    learning_rate = self._learning_rate(step)
    parts = [
        f"step {step}/{self.num_train_steps}",
        *self.objective.progress_fields(summary),
        f"lr={learning_rate:.1e}",
    ]
    if rates:
      eta = (self.num_train_steps - step) / rates["steps_per_second"]
      parts += [
          f"{rates['steps_per_second']:.1f} steps/s",
          f"{rates['examples_per_second']:.0f} ex/s",
          f"ETA {format_duration(eta)}",
      ]
    else:
      later = "; ETA from the next log" if step < self.num_train_steps else ""
      parts.append(
          f"(first call, with compilation: {format_duration(first_call_seconds or 0.0)}{later})"
      )
    logging.info(" ".join(parts))
    scalars = dict(summary, learning_rate=learning_rate, **(rates or {}))
    with self.summary_writer.as_default():
      for name, value in scalars.items():
        write_scalar(name, value, step)
    self.summary_writer.flush()

  def train_steps(self, num_steps: int):
    """Runs `num_steps` steps in one loop call, without checkpoints or logs.

    Returns:
      (stats summed over replicas and steps {name: float}, per-step values
      {"loss": [num_steps], ...the objective's step values}) as numpy values.
    """
    if self._iterator is None:
      self._iterator = self._make_iterator(skip_steps=int(self.global_step.numpy()))
    with record_errors.reading_records():
      sums, values = self._train_loop(self._iterator, tf.constant(num_steps, tf.int32))
    return ({k: float(v) for k, v in sums.items()}, {k: v.numpy() for k, v in values.items()})

  # -- Ctrl-C -------------------------------------------------------------------------

  @property
  def stop_requested(self) -> bool:
    """Ctrl-C was pressed during `run`: it stops before the next loop call."""
    return self._stop_requested

  def _on_sigint(self, signum, frame) -> None:
    del signum, frame
    if self._stop_requested:
      raise KeyboardInterrupt  # the second Ctrl-C: stop now, without saving
    self._stop_requested = True
    if self._num_workers > 1:
      logging.warning(
          "Ctrl-C: stopping after the current loop call, without saving (a "
          "save needs every worker); the last periodic checkpoint is kept"
      )
    else:
      logging.warning(
          "Ctrl-C: stopping after the current loop call to save a checkpoint "
          "(Ctrl-C again stops at once, without saving)"
      )

  @contextlib.contextmanager
  def _stop_between_calls_on_sigint(self):
    """During the block, Ctrl-C only asks the loop to stop before its next call.

    Python raises KeyboardInterrupt only once a tf.function call has returned, and then
    often inside TensorFlow's return path: the weights, global_step and the iterator have
    advanced but the call's losses are lost, so a checkpoint saved then would not match
    metrics.jsonl. Between calls everything agrees.
    """
    self._stop_requested = False
    if threading.current_thread() is not threading.main_thread():
      yield
      return
    # SIGTERM (a preempted VM, a scheduler, the demo and sweep stopping a run) the same
    # way. Not ours to change: a signal the process was started with ignored (nohup,
    # `&` in a script) stays ignored, an embedding program keeps its own handler.
    ours = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    previous = {
        signum: signal.signal(signum, self._on_sigint)
        for signum, default in ours.items()
        if signal.getsignal(signum) is default
    }
    try:
      yield
    finally:
      for signum, handler in previous.items():
        signal.signal(signum, handler)

  def _stop(self, step: int, reason: str = "") -> TrainingInterrupted:
    """Saves `step` when one process can (see below) and says what a re-run resumes."""
    if not reason and self._num_workers > 1:
      # Every worker must take part in a save, and the others did not see this Ctrl-C
      # (or may already be in their next call): saving could hang.
      reason = f"not saved, a save needs all {self._num_workers} workers"
    if not reason and step > 0 and self._saved_step != step:
      self._save()
    # This process's own record: in a multi-worker run the chief may still be writing
    # the checkpoint file of a save that every worker has finished its part of.
    return TrainingInterrupted(step, self.model_dir, self._saved_step, reason)

  # -- the loop -----------------------------------------------------------------------

  def run(
      self, evaluate: Optional[Callable[[int], None]] = None, eval_every_steps: int = 0
  ) -> Dict[str, float]:
    """Trains from the latest checkpoint (if any) to num_train_steps.

    Args:
      evaluate: called with the step after the checkpoint of every `eval_every_steps`-th
        step and of the last step (fine-tuning: dev metrics, best-checkpoint keeping).
        Every worker calls it (evaluation may use the strategy's collectives).
      eval_every_steps: 0 = evaluate after the last step only.

    Returns:
      The metrics of the last log interval (the objective's summary: loss, ...).

    Raises:
      NonFiniteLossError: the loss became NaN/inf; nothing after the last good
        checkpoint is saved.
      TrainingInterrupted: Ctrl-C; the last completed step is saved first (single-worker
        runs; a second Ctrl-C stops without saving).
    """
    with self._stop_between_calls_on_sigint():
      completed = [0]  # the last step trained and logged, for a second Ctrl-C
      try:
        return self._run(evaluate, eval_every_steps, completed)
      except TrainingInterrupted:
        raise
      except KeyboardInterrupt:
        # A second Ctrl-C, anywhere: a re-run resumes from the last finished save.
        raise TrainingInterrupted(
            completed[0], self.model_dir, self._saved_step, "stopped at once, not saved"
        ) from None

  def _run(self, evaluate, eval_every_steps, completed: List[int]) -> Dict[str, float]:
    self.restore()
    step = int(self.global_step.numpy())
    completed[0] = step
    if self._iterator is None:
      self._iterator = self._make_iterator(skip_steps=step)
    if step >= self.num_train_steps:
      logging.info("already at step %d >= num_train_steps=%d", step, self.num_train_steps)
    metrics_path = os.path.join(self.model_dir, layout.METRICS_LOG_FILE)
    # Appending to an object in an object store rewrites it whole, every loop call.
    log_metrics = self.is_chief and not metrics_path.startswith(("gs://", "s3://"))
    if log_metrics:
      # Steps after the restored checkpoint (a killed run's) are about to run again.
      dropped = io_utils.truncate_metrics_log(self.model_dir, step)
      if dropped:
        logging.info("metrics.jsonl: dropped %d rows after step %d", dropped, step)
    last_summary: Dict[str, float] = {}
    stat_names = self.objective.stat_names
    interval_sums = {name: 0.0 for name in stat_names}
    interval_steps = 0
    throughput = Throughput()
    eval_every = eval_every_steps if evaluate is not None and eval_every_steps > 0 else None
    while True:
      if self._stop_requested:
        raise self._stop(step)
      if step >= self.num_train_steps:
        break
      # A loop ends at the next log, checkpoint, evaluation or final step.
      boundaries = [
          self.num_train_steps,
          step + self.steps_per_loop,
          (step // self.log_steps + 1) * self.log_steps,
          (step // self.save_checkpoints_steps + 1) * self.save_checkpoints_steps,
      ]
      if eval_every:
        boundaries.append((step // eval_every + 1) * eval_every)
      num_steps = min(boundaries) - step
      if not self.step_timings:
        logging.info(
            "compiling the training loop (its first call traces it; rates and "
            "ETA are measured from the end of that call)..."
        )
      call_start = time.perf_counter()
      try:
        sums, values = self.train_steps(num_steps)
      except InputError as e:
        # The call's steps are not all done: its weights are not saved, older saves stay.
        kept = tf.train.latest_checkpoint(self.model_dir)
        kept = f"the checkpoint {kept} is kept" if kept else "no checkpoint was written yet"
        raise InputError(f"{e} (training stopped after step {step}; {kept})") from None
      call_end = time.perf_counter()
      self.step_timings.append((num_steps, call_end - call_start))
      throughput.call_done(
          call_start, call_end, num_steps, sums["num_examples"], sums["num_tokens"]
      )
      losses = values["loss"]
      if log_metrics:
        extras = self.row_extras() if self.row_extras else {}
        rows = [
            {"step": step + i + 1, **{k: float(v[i]) for k, v in values.items()}, **extras}
            for i in range(num_steps)
        ]
        with tf.io.gfile.GFile(metrics_path, "a") as f:
          f.write("".join(json.dumps(row) + "\n" for row in rows))
      bad = [i for i, loss in enumerate(losses) if not math.isfinite(loss)]
      if bad:
        raise NonFiniteLossError(
            f"loss is {losses[bad[0]]} at step {step + bad[0] + 1}; stopping without "
            f"saving. The last good checkpoint is kept: "
            f"{tf.train.latest_checkpoint(self.model_dir) or 'none (no checkpoint yet)'}. "
            "Try a lower --learning_rate, more --warmup_steps or a smaller --clip_norm."
        )
      step += num_steps
      completed[0] = step
      for name in interval_sums:
        interval_sums[name] += sums[name]
      interval_steps += num_steps
      if step % self.log_steps == 0 or step == self.num_train_steps:
        last_summary = self.objective.summarize(interval_sums, interval_steps)
        self._log_progress(
            step, interval_sums, interval_steps, throughput.take(), throughput.first_call_seconds
        )
        interval_sums = {name: 0.0 for name in stat_names}
        interval_steps = 0
      if step % self.save_checkpoints_steps == 0 or step == self.num_train_steps:
        self._save()
      if evaluate is not None and (
          step == self.num_train_steps or (eval_every and step % eval_every == 0)
      ):
        evaluate(step)
        throughput.skip_until(time.perf_counter())  # evaluation is not training time
    return last_summary


def seconds_per_step(step_timings: List[Tuple[int, float]]) -> float:
  """Training time per step of the loop calls after the first (which traces), else all."""
  timed = step_timings[1:] or step_timings
  steps = sum(n for n, _ in timed)
  return sum(t for _, t in timed) / steps if steps else float("nan")


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
