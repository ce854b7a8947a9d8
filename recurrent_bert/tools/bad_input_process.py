"""The commands the bad-input campaign runs, and how one run goes: a subprocess of its own.

`run_command` runs `python -m module args` from the folder holding the package, with a
timeout and an address-space cap, in a process group of its own so that a timeout (or
`stop_live_runs`, when the campaign is stopped) ends its workers too. Used by the
fixtures (made by the tools themselves), the flag listing (--helpxml) and the runs.
"""

import contextlib
import os
import resource
import signal
import subprocess
from typing import Optional, Sequence, Tuple

from recurrent_bert import jobs

# The folder holding the recurrent_bert package: a checkout, or site-packages.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Short name -> module run as `python -m`.
COMMANDS = {
    "pretrain": "recurrent_bert.pretrain",
    "finetune_glue": "recurrent_bert.finetune_glue",
    "finetune_squad": "recurrent_bert.finetune_squad",
    "finetune_tagging": "recurrent_bert.finetune_tagging",
    "finetune_multiple_choice": "recurrent_bert.finetune_multiple_choice",
    "extract_features": "recurrent_bert.extract_features",
    "export": "recurrent_bert.export",
    "summary": "recurrent_bert.summary",
    "smoke": "recurrent_bert.smoke",
    "create_pretraining_data": "recurrent_bert.tools.create_pretraining_data",
    "build_vocab": "recurrent_bert.tools.build_vocab",
    "tokenize_text": "recurrent_bert.tools.tokenize_text",
    "convert_checkpoint": "recurrent_bert.tools.convert_checkpoint",
    "builtin_corpus": "recurrent_bert.tools.builtin_corpus",
    "sweep": "recurrent_bert.tools.sweep",
}
# Commands whose base run takes long (fine-tuning compiles, trains, evaluates and
# predicts): their runs get this many times --timeout before they count as a hang.
SLOW_COMMANDS = {
    "finetune_glue": 3,
    "finetune_squad": 3,
    "finetune_tagging": 3,
    "finetune_multiple_choice": 3,
}

_live = set()  # the runs' processes, killed if the campaign is stopped


def _limit_memory(megabytes: int):
  def limit():
    os.setsid()  # its own process group: a timeout ends its workers too
    if megabytes:
      size = megabytes * 1024 * 1024
      resource.setrlimit(resource.RLIMIT_AS, (size, size))

  return limit


def run_command(
    module: str,
    args: Sequence[str],
    timeout: float,
    memory_limit_mb: int,
    cwd: Optional[str] = None,
) -> Tuple[Optional[int], str, str]:
  """Runs `python -m module args` from the repository root.

  Args:
    module: the module run with `python -m`.
    args: its arguments.
    timeout: seconds before it is killed.
    memory_limit_mb: its address-space cap (0: none).
    cwd: its working directory (default the folder holding the package); a run's is its scratch
      folder, so an empty path flag writes there, not into the checkout.

  Returns:
    (exit code or None on timeout, stderr, stdout).
  """
  # This package, whatever the working directory.
  python_path = os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))
  env = dict(os.environ, PYTHONPATH=python_path, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
  process = subprocess.Popen(
      jobs.python_module(module, *args),
      cwd=cwd or PACKAGE_ROOT,
      env=env,
      stdin=subprocess.DEVNULL,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      errors="replace",
      preexec_fn=_limit_memory(memory_limit_mb),
  )
  _live.add(process)
  try:
    stdout, stderr = process.communicate(timeout=timeout)
    return process.returncode, stderr, stdout
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, signal.SIGKILL)
    stdout, stderr = process.communicate()
    return None, stderr, stdout
  finally:
    _live.discard(process)


def stop_live_runs() -> None:
  """Kills the runs still going (Ctrl-C, SIGTERM): each is a process group of its own."""
  for process in list(_live):
    with contextlib.suppress(ProcessLookupError):
      os.killpg(process.pid, signal.SIGKILL)
