"""An unknown KERAS_BACKEND: every command says so in one line and exits 2; a library user
gets an ImportError with the same line (Keras' own error is a traceback at `import keras`).

Real processes, not the fork server: what matters happens while the package is imported.
"""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINE = "KERAS_BACKEND=nonsense is not a Keras backend (tensorflow, jax, torch)"


def run(*args):
  env = dict(os.environ, KERAS_BACKEND="nonsense", PYTHONPATH=REPO)
  return subprocess.run(
      [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
  )


@pytest.mark.parametrize(
    "command",
    [
        ["-m", "recurrent_bert.pretrain", "--model_dir=/nonexistent"],
        ["-m", "recurrent_bert.finetune_glue", "--help"],
        ["-m", "recurrent_bert.tools.create_pretraining_data"],
    ],
)
def test_a_command_prints_one_line_and_exits_2(command):
  result = run(*command)
  assert (result.returncode, result.stderr, result.stdout) == (2, f"error: {LINE}\n", "")


def test_a_library_import_raises_import_error_naming_it():
  result = run("-c", "import recurrent_bert.models")
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1] == f"ImportError: {LINE}"
