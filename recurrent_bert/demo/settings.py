"""The demo's settings: its flags, resolved, and the check that keeps a work dir coherent.

The settings that shape the stage outputs are recorded in <work_dir>/demo_settings.json
by the first run; a later run with other ones is refused (the models, the seeds and the
run's own choices, such as --jobs, may change between runs). The pretraining recipe
(`RECIPE_SETTINGS`) shapes no data: it may change while no model has been pretrained or
fine-tuned there, so that data made once (--data_only) serves a recipe chosen afterwards
(demo/recipe_pilot.py); the new recipe is then recorded.
"""

import dataclasses
import json
import os
from typing import Dict, List, Optional

from recurrent_bert import io_utils

SETTINGS_FILE = "demo_settings.json"

# One model of each paper with that paper's baseline: TRANS-BLSTM-SMALL-2 against BERT-orig,
# SwishRNN-BERT against BERT-rab (the same relative attention bias, an FFN in place of the
# recurrence).
DEFAULT_FAMILIES = ("bert", "bert_rab", "trans_blstm_small_2", "swishrnn")
# Enough paired seeds for a verdict on both MLM claims at the default steps and batch
# (README, "Why these defaults"; tests/demo/test_claims.py simulates both).
DEFAULT_PRETRAIN_SEEDS = (1, 2, 3)
# Fine-tuning long enough to separate the models (100 steps left them at 0.39-0.48 test
# accuracy, SwishRNN-BERT and BERT-rab equal), with as many paired seeds as a 30-minute
# demo affords: a verdict on the TRANS-BLSTM accuracy claim in 96% of simulated runs; the
# SwishRNN one needs about 15 (docs/demo.md, "Why these defaults"; tests/demo/test_claims.py
# simulates both from the measured runs).
DEFAULT_FINETUNE_STEPS = 300
DEFAULT_FINETUNE_SEEDS = (1, 2, 3, 4)
# The pretraining recipe: settings that shape the pretrained models and what follows from
# them, but no data stage (the steps do: the data stage reports the epochs they read).
RECIPE_SETTINGS = frozenset(
    {"learning_rate", "warmup_steps", "adam_beta2", "adam_epsilon", "clip_norm"}
)


def expand_number(value: str, kind) -> list:
  """One item of a list flag: a number, or for integers a range "A-B" (both included).

  Raises:
    ValueError: not a `kind`, or a range that falls.
  """
  first, dash, last = value.partition("-")
  if kind is int and dash and first:
    low, high = int(first), int(last)
    if low > high:
      raise ValueError(f"{value}: a range must rise")
    return list(range(low, high + 1))
  return [kind(value)]


class SettingsMismatch(Exception):
  """The work dir holds a demo made with other settings: the message names them."""


@dataclasses.dataclass
class Settings:
  """The flags, resolved; `fingerprint()` is what must not change within a work_dir.

  Attributes mirror the demo's flags, except: presets (--models as preset names),
  max_predictions_per_seq and warmup_steps (their defaults resolved), pretrain_seeds and
  finetune_seeds (sorted integers), finetune_learning_rates (sorted floats), queries
  (--query), redo (--redo, blanks dropped) and tokenizers (--tokenizers, in their order,
  each once).
  """

  work_dir: str
  input_files: List[str]
  cache_dir: Optional[str]
  corpus_max_bytes: int
  presets: List[str]
  size: str
  vocab_size: int
  vocab_max_lines: int
  seq_length: int
  max_predictions_per_seq: int
  dupe_factor: int
  batch_size: int
  pretrain_steps: int
  learning_rate: float
  warmup_steps: int
  pretrain_seeds: List[int]
  eval_sequences: int
  finetune_seeds: List[int]
  finetune_steps: int
  finetune_batch_size: int
  finetune_learning_rates: List[float]
  task_train_examples: int
  task_eval_examples: int
  eval_documents_fraction: float
  seed: int
  jobs: int = 1
  num_workers: int = 2
  task_classes: int = 4
  queries: Optional[List[str]] = None
  redo: List[str] = dataclasses.field(default_factory=list)
  tokenizers: List[str] = dataclasses.field(default_factory=list)
  backend: str = "tensorflow"
  pretraining_only: bool = False
  data_only: bool = False
  prepared_data: bool = False
  parallel_pretraining: bool = False
  vocabulary: str = "wordpiece"
  adam_beta2: float = 0.999
  adam_epsilon: float = 1e-6
  clip_norm: float = 1.0

  def fingerprint(self) -> Dict:
    """Settings that shape the stage outputs (the models, seeds and learning rates may
    change: new ones are trained, the old ones' runs stay)."""
    skip = {
        "work_dir",
        "presets",
        "pretrain_seeds",
        "finetune_seeds",
        "finetune_learning_rates",
        "jobs",
        "num_workers",
        "queries",
        "cache_dir",
        "size",
        "redo",
        "tokenizers",
        "pretraining_only",
        "data_only",
        "prepared_data",
        "parallel_pretraining",
    }
    return {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}

  def path(self, *parts: str) -> str:
    """A path inside the work dir."""
    return os.path.join(self.work_dir, *parts)


def check_settings(settings: Settings) -> None:
  """Records the settings of a new work_dir; refuses to mix settings in an old one.

  A work_dir where nothing has finished yet (say, the corpus stage failed on a bad
  --input_files) takes the new settings.

  Args:
    settings: this run's settings.

  Raises:
    SettingsMismatch: the work dir holds results made with other settings.
  """
  path = settings.path(SETTINGS_FILE)
  current = settings.fingerprint()
  made = lambda *dirs: any(
      os.listdir(settings.path(d)) for d in dirs if os.path.isdir(settings.path(d))
  )
  trained = made("pretrain", "finetune")
  if os.path.exists(path) and (trained or made("stages")):
    with open(path, encoding="utf-8") as f:
      recorded = json.load(f)
    # A setting added since the work dir was made has its default there.
    defaults = {
        "backend": "tensorflow",
        "vocabulary": "wordpiece",
        "adam_beta2": 0.999,
        "adam_epsilon": 1e-6,
        "clip_norm": 1.0,
    }
    changed = {
        k: (recorded.get(k, defaults.get(k)), v)
        for k, v in current.items()
        if recorded.get(k, defaults.get(k)) != v and (trained or k not in RECIPE_SETTINGS)
    }
    if not changed:
      io_utils.atomic_write_json(path, current)  # a new recipe over data made before
    if changed:
      lines = [f"  --{k}: {old!r} there, {new!r} now" for k, (old, new) in changed.items()]
      raise SettingsMismatch(
          f"{settings.work_dir} holds a demo made with other settings:\n"
          + "\n".join(lines)
          + "\nRe-run with the same settings to resume it, or give "
          "another --work_dir (or delete this one) to start afresh."
      )
  else:
    os.makedirs(settings.work_dir, exist_ok=True)
    io_utils.atomic_write_json(path, current)
