import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import pytest


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


def pytest_terminal_summary(terminalreporter):
  """The bad-input campaign's tally (tests/mutations.py), when RB_FUZZ_EXAMPLES asks for it."""
  if not os.environ.get("RB_FUZZ_EXAMPLES"):
    return
  from tests import mutations

  for (fmt, outcome), count in sorted(mutations.TALLY.items()):
    terminalreporter.write_line(f"bad-input campaign: {fmt}: {outcome}: {count}")
