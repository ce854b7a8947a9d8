import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# tests/backends under JAX: XLA:CPU compiles each tiny step in ~15 CPU-seconds at its
# default optimisation level, a third less at 0, with the same results (read when JAX
# starts its backend, after this).
if os.environ.get("KERAS_BACKEND") == "jax":
  os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")

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


# Files whose tests take longest (their seconds on 2 busy CI cores, roughly): they are
# collected first, so that `make test` (pytest-xdist, --dist loadfile --no-loadscope-reorder)
# starts them first and the two workers end together; left to xdist's own order (most
# tests first), the few-but-slow files of tests/training/ came last and kept one worker
# busy alone. Files not listed keep their order, after these. Update when a file's cost
# changes a lot (`make test` prints the slowest tests).
SLOW_FILES = {
    "tests/demo/test_pipeline.py": 300,
    "tests/test_finetune.py": 220,
    "tests/test_readme.py": 230,
    "tests/training/test_strategies.py": 165,
    "tests/test_finetune_squad.py": 130,
    "tests/test_finetune_multiple_choice.py": 90,
    "tests/test_finetune_tagging.py": 90,
    "tests/test_finetune_squad_sentencepiece.py": 50,
    "tests/test_finetune_multiple_choice_sentencepiece.py": 45,
    "tests/test_finetune_tagging_sentencepiece.py": 45,
    "tests/test_finetune_glue_sentencepiece.py": 40,
    "tests/training/test_loop.py": 125,
    "tests/training/test_accumulation.py": 105,
    "tests/test_pretrain.py": 100,
    "tests/test_finetune_layer_mix.py": 80,
    "tests/test_export_tasks.py": 70,
    "tests/training/test_pretraining_eval.py": 60,
    "tests/test_export.py": 60,
    "tests/test_export_encode_layers.py": 50,
    "tests/test_extract_features.py": 45,
    "tests/tools/test_tools.py": 50,
    "tests/tools/test_sweep.py": 40,
    "tests/data/test_sentencepiece_pretraining_data.py": 35,
    "tests/test_readme_commands.py": 40,
    "tests/test_entry_points.py": 30,
    "tests/convert/test_exporters.py": 45,
    "tests/convert/test_keras_hub_preset.py": 30,
}


def pytest_collection_modifyitems(items):
  """Slowest files first (SLOW_FILES), each file's tests together and in their order."""
  position = {}
  for item in items:
    position.setdefault(item.nodeid.split("::")[0], len(position))
  items.sort(
      key=lambda item: (
          -SLOW_FILES.get(item.nodeid.split("::")[0], 0),
          position[item.nodeid.split("::")[0]],
      )
  )


def pytest_terminal_summary(terminalreporter):
  """The bad-input campaign's tally (tests/mutations.py), when RB_FUZZ_EXAMPLES asks for it."""
  if not os.environ.get("RB_FUZZ_EXAMPLES"):
    return
  from tests import mutations

  for (fmt, outcome), count in sorted(mutations.TALLY.items()):
    terminalreporter.write_line(f"bad-input campaign: {fmt}: {outcome}: {count}")
