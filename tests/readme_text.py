"""README.md read as the manual: its sections, shell blocks and command lines, and the
commands run as it runs them (from the repository root, in a fresh process)."""

import os
import re
import subprocess
import sys

from tests import forkserver

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "README.md")


def env(**extra):
  """The test process's environment with TensorFlow's start-up logs quiet, plus `extra`."""
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **extra)


def readme_section(title: str) -> str:
  with open(README, encoding="utf-8") as f:
    text = f.read()
  match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.S | re.M)
  assert match, f"README.md has no section '## {title}'"
  return match.group(1)


def shell_blocks(markdown: str) -> list:
  return re.findall(r"^```sh\n(.*?)^```", markdown, re.S | re.M)


def commands(block: str) -> list:
  """The block's command lines, continuation lines joined (comments dropped)."""
  joined = block.replace("\\\n", " ")
  return [
      line.strip()
      for line in joined.splitlines()
      if line.strip() and not line.lstrip().startswith("#")
  ]


def start_module(*args, **extra_env) -> subprocess.Popen:
  """`python -m args...` started from the repository root, its output captured as text
  (a child of tests/forkserver.py, where TensorFlow is imported once)."""
  return forkserver.start([sys.executable, "-m", *args], REPO, env(**extra_env))


def finish(process: subprocess.Popen, timeout: float = 600) -> subprocess.CompletedProcess:
  """Waits for a `start_module` process; killed if it is still running after `timeout` s."""
  try:
    stdout, stderr = process.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    process.kill()
    process.communicate()
    raise
  return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_module(*args, **extra_env) -> subprocess.CompletedProcess:
  """`python -m args...` from the repository root, run to its end."""
  return finish(start_module(*args, **extra_env))
