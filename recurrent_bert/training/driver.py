"""The training driver every backend's loop shares: its schedule of loop calls, progress
lines, metrics.jsonl rows, checkpoints, evaluation calls, the non-finite-loss stop and
Ctrl-C.

`TrainingDriver.run` is the loop of a training run, written once. What one loop call
computes, and how state is saved and restored, belongs to the backend's subclass:

  training/loop.py        `TrainingLoop`: TensorFlow, tf.distribute strategies, tf.function
                          loop calls, tf.train.Checkpoint
  training/jax_loop.py    `JaxTrainingLoop`: JAX, keras.distribution (DataParallel), jitted
                          steps, portable checkpoints (saving/training_state.py)
  training/torch_loop.py  `TorchTrainingLoop`: PyTorch, one device, autograd steps
                          (torch.compile optional), the same portable checkpoints

A subclass provides `current_step()`, `restore()`, `_save()`, `latest_checkpoint()`,
`_start_input(step)`, `train_steps(num_steps)` and `_write_scalars(scalars, step)`; the
driver restores, starts the input at the restored step, then makes loop calls that end
at the next log, checkpoint, evaluation or the last step.

This module imports no TensorFlow.
"""

import contextlib
import math
import os
import signal
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from absl import logging

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert.errors import InputError
from recurrent_bert.progress import format_duration


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


class TrainingDriver:
  """The loop of a training run, whatever computes its steps (module docstring).

  Args:
    model: the model trained.
    optimizer: a Keras optimizer (AdamW, LAMB, possibly wrapped for loss scaling).
    objective: one of training/objectives.py (sums, normalizers, loss, summaries).
    model_dir: where checkpoints, metrics.jsonl and events go.
    global_batch_size: examples per update (all replicas, all micro-batches).
    num_train_steps: updates in all.
    steps_per_loop: at most this many steps per loop call.
    save_checkpoints_steps, log_steps: a checkpoint, a progress line every this many steps.
    keep_checkpoint_max: checkpoints kept.
    is_chief: this process writes metrics.jsonl and events.
    gradient_accumulation_steps: micro-batches per update.
    row_extras: values appended to every metrics.jsonl row (e.g. {"skipped_records": n}).
  """

  def __init__(
      self,
      model,
      optimizer,
      objective,
      *,
      model_dir: str,
      global_batch_size: int,
      num_train_steps: int,
      steps_per_loop: int = 100,
      save_checkpoints_steps: int = 1000,
      keep_checkpoint_max: int = 5,
      log_steps: int = 100,
      is_chief: bool = True,
      gradient_accumulation_steps: int = 1,
      row_extras: Optional[Callable[[], Dict[str, float]]] = None,
  ):
    if gradient_accumulation_steps < 1:
      raise ValueError(
          f"gradient_accumulation_steps must be >= 1, got {gradient_accumulation_steps}"
      )
    self.model = model
    self.optimizer = optimizer
    self.objective = objective
    self.model_dir = model_dir
    self.global_batch_size = global_batch_size
    self.num_train_steps = num_train_steps
    self.steps_per_loop = steps_per_loop
    self.save_checkpoints_steps = save_checkpoints_steps
    self.keep_checkpoint_max = keep_checkpoint_max
    self.log_steps = log_steps
    self.is_chief = is_chief
    self.accumulation_steps = gradient_accumulation_steps
    self.row_extras = row_extras
    # (steps, seconds) of each loop call of `run`; the first includes tracing.
    self.step_timings: List[Tuple[int, float]] = []
    # Processes taking part in every save (a multi-worker save cannot happen on Ctrl-C).
    self._num_workers = 1
    self._stop_requested = False
    self._saved_step: Optional[int] = None  # of the latest checkpoint (None: none)

  # -- what a backend provides --------------------------------------------------------

  def current_step(self) -> int:
    """Updates done so far (restored ones included)."""
    raise NotImplementedError

  def restore(self) -> Optional[str]:
    """Restores the latest checkpoint of model_dir, if any, and returns it (None: none);
    sets `_saved_step`."""
    raise NotImplementedError

  def _save(self) -> None:
    """Checkpoints the current step and sets `_saved_step`."""
    raise NotImplementedError

  def latest_checkpoint(self) -> Optional[str]:
    """The newest checkpoint in model_dir (for messages)."""
    raise NotImplementedError

  def _start_input(self, step: int) -> None:
    """Positions the input after the batches of `step` updates (a resumed run's)."""
    raise NotImplementedError

  def train_steps(self, num_steps: int):
    """Runs `num_steps` steps in one loop call, without checkpoints or logs.

    Returns:
      (stats summed over replicas and steps {name: float}, per-step values
      {"loss": [num_steps], ...the objective's step values}) as numpy values.
    """
    raise NotImplementedError

  def _write_scalars(self, scalars: Dict[str, float], step: int) -> None:
    """TensorBoard scalars of the training events (where a writer is installed)."""
    raise NotImplementedError

  # -- progress -----------------------------------------------------------------------

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
          f"{_rate(rates['steps_per_second'], '.1f')} steps/s",
          f"{_rate(rates['examples_per_second'], '.0f')} ex/s",
          f"ETA {format_duration(eta)}",
      ]
    else:
      later = "; ETA from the next log" if step < self.num_train_steps else ""
      parts.append(
          f"(first call, with compilation: {format_duration(first_call_seconds or 0.0)}{later})"
      )
    logging.info(" ".join(parts))
    self._write_scalars(dict(summary, learning_rate=learning_rate, **(rates or {})), step)

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
    step = self.current_step()
    completed[0] = step
    self._start_input(step)
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
        kept = self.latest_checkpoint()
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
        io_utils.append_metrics_rows(self.model_dir, rows)
      bad = [i for i, loss in enumerate(losses) if not math.isfinite(loss)]
      if bad:
        raise NonFiniteLossError(
            f"loss is {losses[bad[0]]} at step {step + bad[0] + 1}; stopping without "
            f"saving. The last good checkpoint is kept: "
            f"{self.latest_checkpoint() or 'none (no checkpoint yet)'}. "
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


def _rate(value: float, spec: str) -> str:
  """`value` formatted by `spec`, or to two significant digits below 1 (a slow run's
  0.036 steps/s would read 0.0)."""
  return format(value, spec) if value >= 1 else format(value, ".2g")
