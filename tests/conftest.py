import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# tests/backends under JAX: XLA:CPU compiles each tiny step in ~15 CPU-seconds at its
# default optimisation level, a third less at 0, with the same results (read when JAX
# starts its backend, after this).
if os.environ.get("KERAS_BACKEND") == "jax":
  os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
# tests/backends under PyTorch off a GPU: the Triton kernels run in Triton's interpreter.
# Triton reads the switch as it defines each kernel, its library's too, and Keras' PyTorch
# backend imports Triton: so it is set here, before Keras.
if os.environ.get("KERAS_BACKEND") == "torch":
  import torch

  if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import keras
import numpy as np
import pytest

# tests/backends/ runs in a session of its own per non-TensorFlow backend (`make test`:
# KERAS_BACKEND=jax / torch); every other test needs TensorFlow and runs in this one.
BACKENDS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "backends")


def pytest_ignore_collect(collection_path):
  in_backends = str(collection_path).startswith(BACKENDS_DIR)
  if keras.backend.backend() == "tensorflow":
    return True if in_backends else None
  if not in_backends and collection_path.suffix == ".py":
    return True
  return None


@pytest.fixture(autouse=True)
def _seed_and_float32():
  """Every test starts float32 and seeded, whatever the previous one changed."""
  keras.config.set_dtype_policy("float32")
  keras.utils.set_random_seed(1234)
  yield
  keras.config.set_dtype_policy("float32")


@pytest.fixture
def rng():
  return np.random.default_rng(0)


# Slowness is declared where it is: a file whose tests all take long says
# `pytestmark = pytest.mark.slow(seconds=N)`, N the whole file's seconds on 2 busy CI cores,
# roughly; a slow test among quick ones carries `@pytest.mark.slow(seconds=N)`, N its own
# (all its parameters together). Update N when a cost changes a lot (`make test` prints
# the slowest tests). `make test` starts the slowest files first, so that the two
# pytest-xdist workers (--dist loadfile --no-loadscope-reorder) end together; left to
# xdist's own order (most tests first), the few-but-slow files came last and kept one
# worker busy alone. `make test-fast` leaves every slow test out (-m "not slow").


def _slow_seconds(marks) -> float:
  """The seconds of the `slow` marks among `marks` (a mark, a decorator or a list of them)."""
  marks = [getattr(m, "mark", m) for m in (marks if isinstance(marks, list) else [marks])]
  return sum(m.kwargs.get("seconds", 0) for m in marks if m.name == "slow")


def file_seconds(items) -> dict:
  """{file: its declared seconds}: the file's own marker plus its slow tests' markers."""
  seconds, counted = {}, set()
  for item in items:
    path = item.nodeid.split("::")[0]
    if path not in seconds:
      seconds[path] = _slow_seconds(getattr(item.module, "pytestmark", []))
    function = (path, getattr(item, "originalname", item.name))
    if function not in counted:  # a parametrized test's marker covers all its parameters
      counted.add(function)
      seconds[path] += _slow_seconds(getattr(item.function, "pytestmark", []))
  return seconds


def pytest_collection_modifyitems(items):
  """Slowest files first (their `slow` markers), each file's tests together and in order."""
  position = {}
  for item in items:
    position.setdefault(item.nodeid.split("::")[0], len(position))
  seconds = file_seconds(items)
  items.sort(
      key=lambda item: (-seconds[item.nodeid.split("::")[0]], position[item.nodeid.split("::")[0]])
  )


def pytest_terminal_summary(terminalreporter):
  """The bad-input campaign's tally (tests/support/mutations.py), when RB_FUZZ_EXAMPLES
  asks for it."""
  if not os.environ.get("RB_FUZZ_EXAMPLES"):
    return
  from tests.support import mutations

  for (fmt, outcome), count in sorted(mutations.TALLY.items()):
    terminalreporter.write_line(f"bad-input campaign: {fmt}: {outcome}: {count}")
