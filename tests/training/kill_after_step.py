"""Runs recurrent_bert.pretrain and stops it at a known point, for the resume tests.

A real kill -9 (no cleanup, no final checkpoint) or a real SIGINT, without a testing hook
in the training code itself. One of:

  KILL_AFTER_STEP=s             SIGKILL after the progress line of step s (an update
                                boundary);
  KILL_AT_MICRO_BATCH=k         SIGKILL right after the forward/backward pass of the k-th
                                micro-batch (1-based, counted over the whole run): with
                                gradient accumulation, inside an update;
  WAIT_FOR_SIGINT_AFTER_STEP=s  after logging step s, print "waiting for SIGINT at step s"
                                on stdout and wait until the test's SIGINT has reached the
                                loop's handler: the run then stops at exactly step s
                                however loaded the machine is.
"""

import os
import signal
import time

from recurrent_bert import cli
from recurrent_bert import pretrain
from recurrent_bert.training import driver


def _die():
  os.kill(os.getpid(), signal.SIGKILL)


_KILL_AFTER_STEP = int(os.environ.get("KILL_AFTER_STEP", 0))
_WAIT_AFTER_STEP = int(os.environ.get("WAIT_FOR_SIGINT_AFTER_STEP", 0))
# The driver's, so that TensorFlow's and JAX's loops (KERAS_BACKEND=jax) both stop.
_log_progress = driver.TrainingDriver._log_progress


def _log_progress_then_stop(self, step, *args, **kwargs):
  _log_progress(self, step, *args, **kwargs)
  if _KILL_AFTER_STEP and step >= _KILL_AFTER_STEP:
    _die()
  if step == _WAIT_AFTER_STEP:
    print(f"waiting for SIGINT at step {step}", flush=True)
    # Polls a condition (the handler ran), not a guess of how long the test takes.
    while not self.stop_requested:
      time.sleep(0.01)


driver.TrainingDriver._log_progress = _log_progress_then_stop

if "KILL_AT_MICRO_BATCH" in os.environ:  # TensorFlow's loop only
  import tensorflow as tf

  from recurrent_bert.training import loop

  _KILL_AT_MICRO_BATCH = int(os.environ["KILL_AT_MICRO_BATCH"])
  _forward_backward_fn = loop.TrainingLoop._forward_backward_fn
  _micro_batches_done = [0]

  def _count_and_maybe_die():
    _micro_batches_done[0] += 1
    if _micro_batches_done[0] >= _KILL_AT_MICRO_BATCH:
      _die()
    return 0

  def _forward_backward_then_count(self, batch, global_normalizers):
    loss, sums, grads = _forward_backward_fn(self, batch, global_normalizers)
    # Runs (on the host) once this micro-batch's gradients exist.
    with tf.control_dependencies([g for g in grads if g is not None]):
      done = tf.py_function(_count_and_maybe_die, [], tf.int32)
    with tf.control_dependencies([done]):
      loss = tf.identity(loss)
    return loss, sums, grads

  loop.TrainingLoop._forward_backward_fn = _forward_backward_then_count

if __name__ == "__main__":
  cli.run(pretrain.main, pretrain.HELP_GROUPS)  # as `python -m recurrent_bert.pretrain` runs
