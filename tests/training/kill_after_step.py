"""Runs recurrent_bert.pretrain and stops it after a given step, for the resume tests.

KILL_AFTER_STEP=n: SIGKILLs itself after logging step n. A real kill -9 (no cleanup, no
final checkpoint) at a known step, without a testing hook in the training code itself.

WAIT_FOR_SIGINT_AFTER_STEP=n: after logging step n, prints "waiting for SIGINT at step n"
on stdout and waits until the test's SIGINT has reached the loop's handler. The run then
stops at exactly step n however loaded the machine is: nothing depends on timing.
"""

import os
import signal
import time

from absl import app

from recurrent_bert import pretrain
from recurrent_bert.training import loop

_KILL_AFTER_STEP = int(os.environ.get("KILL_AFTER_STEP", 0))
_WAIT_AFTER_STEP = int(os.environ.get("WAIT_FOR_SIGINT_AFTER_STEP", 0))
_log_progress = loop.PretrainingLoop._log_progress  # pylint: disable=protected-access


def _log_progress_then_stop(self, step, *args, **kwargs):
  _log_progress(self, step, *args, **kwargs)
  if _KILL_AFTER_STEP and step >= _KILL_AFTER_STEP:
    os.kill(os.getpid(), signal.SIGKILL)
  if step == _WAIT_AFTER_STEP:
    print(f"waiting for SIGINT at step {step}", flush=True)
    # Polls a condition (the handler ran), not a guess of how long the test takes.
    while not self.stop_requested:
      time.sleep(0.01)


loop.PretrainingLoop._log_progress = _log_progress_then_stop  # pylint: disable=protected-access

if __name__ == "__main__":
  app.run(pretrain.main)
