"""Runs recurrent_bert.pretrain and SIGKILLs the process after step $KILL_AFTER_STEP.

Used by the resume tests: a real kill -9 (no cleanup, no final checkpoint) at a known
step, without a testing hook in the training code itself.
"""

import os
import signal

from absl import app

from recurrent_bert import pretrain
from recurrent_bert.training import loop

_KILL_AFTER_STEP = int(os.environ["KILL_AFTER_STEP"])
_log_progress = loop.PretrainingLoop._log_progress  # pylint: disable=protected-access


def _log_progress_then_die(self, step, *args, **kwargs):
  _log_progress(self, step, *args, **kwargs)
  if step >= _KILL_AFTER_STEP:
    os.kill(os.getpid(), signal.SIGKILL)


loop.PretrainingLoop._log_progress = _log_progress_then_die  # pylint: disable=protected-access

if __name__ == "__main__":
  app.run(pretrain.main)
