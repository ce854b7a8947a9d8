"""Runs recurrent_bert.pretrain and SIGKILLs the process at a known point.

Used by the resume tests: a real kill -9 (no cleanup, no final checkpoint) without a
testing hook in the training code itself. One of:

  KILL_AFTER_STEP=s          after the progress line of step s (an update boundary);
  KILL_AT_MICRO_BATCH=k      right after the forward/backward pass of the k-th
                             micro-batch (1-based, counted over the whole run): with
                             gradient accumulation, inside an update.
"""

import os
import signal

import tensorflow as tf
from absl import app

from recurrent_bert import pretrain
from recurrent_bert.training import loop


def _die():
  os.kill(os.getpid(), signal.SIGKILL)


if "KILL_AFTER_STEP" in os.environ:
  _KILL_AFTER_STEP = int(os.environ["KILL_AFTER_STEP"])
  _log_progress = loop.PretrainingLoop._log_progress  # pylint: disable=protected-access

  def _log_progress_then_die(self, step, *args, **kwargs):
    _log_progress(self, step, *args, **kwargs)
    if step >= _KILL_AFTER_STEP:
      _die()

  loop.PretrainingLoop._log_progress = _log_progress_then_die  # pylint: disable=protected-access

if "KILL_AT_MICRO_BATCH" in os.environ:
  _KILL_AT_MICRO_BATCH = int(os.environ["KILL_AT_MICRO_BATCH"])
  _forward_backward_fn = loop.TrainingLoop._forward_backward_fn  # pylint: disable=protected-access
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

  loop.TrainingLoop._forward_backward_fn = _forward_backward_then_count  # pylint: disable=protected-access

if __name__ == "__main__":
  app.run(pretrain.main)
