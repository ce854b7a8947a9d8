"""The fine-tuning sweep's grid (rbert-sweep): its --models and --tasks parsed, and one
`Run` per model x task x learning rate x seed, with the command line of its entry point.

Nothing here runs a process or writes a file.
"""

import collections
import dataclasses
import math
import os
import re
import shlex
from typing import Dict, List, Optional, Sequence, Tuple

from recurrent_bert import config
from recurrent_bert import model_dir as layout

GLUE_MODULE = "recurrent_bert.finetune_glue"
SQUAD_MODULE = "recurrent_bert.finetune_squad"
SQUAD_TASKS = {"squad": [], "squad_v2": ["--version=2.0"]}
# What the sweep sets per run; passing them through would break the grid.
RESERVED_FLAGS = (
    "task",
    "data_dir",
    "train_file",
    "predict_file",
    "model_dir",
    "init_checkpoint",
    "model_config",
    "learning_rate",
    "seed",
    "mode",
    "flagfile",
    "version",
)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# -- the grid --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  name: str
  flag: str  # "init_checkpoint" or "model_config"
  value: str


@dataclasses.dataclass(frozen=True)
class SweepTask:
  name: str
  module: str
  flags: Tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Run:
  model: str
  task: str
  learning_rate: float
  seed: int
  module: str
  args: Tuple[str, ...]  # after `python -m module`
  run_dir: str

  @property
  def label(self) -> str:
    return f"{self.model}/{self.task} lr={self.learning_rate:g} seed={self.seed}"


def _split_pair(item: str, flag: str, what: str) -> Tuple[str, str]:
  name, sep, value = item.partition("=")
  name, value = name.strip(), value.strip()
  if not sep or not name or not value:
    raise ValueError(f"--{flag}: {item!r} is not {what}")
  if not _NAME_RE.match(name):
    raise ValueError(
        f"--{flag}: name {name!r} in {item!r} must be letters, digits, "
        f"'.', '_' or '-' (it names a directory)"
    )
  return name, value


def _check_unique(names: Sequence[str], flag: str) -> None:
  dupes = sorted(n for n, c in collections.Counter(names).items() if c > 1)
  if dupes:
    raise ValueError(f"--{flag}: {', '.join(dupes)} given more than once")


def parse_models(items: Sequence[str]) -> List[ModelSpec]:
  """NAME=SPEC items → ModelSpecs; SPEC: existing path → init_checkpoint, else preset."""
  specs = []
  for item in items:
    name, spec = _split_pair(item, "models", "NAME=SPEC (e.g. bert=bert_tiny)")
    if os.path.isfile(spec) and spec.endswith(".json"):
      specs.append(ModelSpec(name, "model_config", os.path.abspath(spec)))
    elif os.path.exists(spec) or os.path.exists(spec + ".index"):
      specs.append(ModelSpec(name, "init_checkpoint", os.path.abspath(spec)))
    elif spec in config.PRESETS:
      specs.append(ModelSpec(name, "model_config", spec))
    else:
      raise ValueError(
          f"--models: {item!r}: {spec!r} is neither an existing checkpoint "
          f"dir / prefix or config JSON nor a preset ("
          f"{', '.join(sorted(config.PRESETS))})"
      )
  _check_unique([s.name for s in specs], "models")
  return specs


def parse_tasks(items: Sequence[str]) -> List[SweepTask]:
  """TASK=DATA_DIR / squad=TRAIN:PREDICT items → SweepTasks, the data checked to exist."""
  specs = []
  for item in items:
    name, data = _split_pair(item, "tasks", "TASK=DATA_DIR or squad=TRAIN_FILE:PREDICT_FILE")
    if name.lower() in SQUAD_TASKS:
      train, sep, predict = data.partition(":")
      if not sep or not train or not predict:
        raise ValueError(f"--tasks: {item!r}: give {name}=TRAIN_FILE:PREDICT_FILE")
      for path in (train, predict):
        if not os.path.isfile(path):
          raise ValueError(f"--tasks: {item!r}: file {path!r} does not exist")
      specs.append(
          SweepTask(
              name,
              SQUAD_MODULE,
              (
                  f"--train_file={os.path.abspath(train)}",
                  f"--predict_file={os.path.abspath(predict)}",
                  *SQUAD_TASKS[name.lower()],
              ),
          )
      )
    else:
      if not os.path.isdir(data):
        raise ValueError(f"--tasks: {item!r}: data dir {data!r} does not exist")
      specs.append(
          SweepTask(name, GLUE_MODULE, (f"--task={name}", f"--data_dir={os.path.abspath(data)}"))
      )
  _check_unique([s.name for s in specs], "tasks")
  return specs


def parse_numbers(items: Sequence[str], flag: str, kind) -> list:
  """Learning rates (float, > 0) or seeds (int) from a list flag; no duplicates."""
  values = []
  for item in items:
    what = "an integer" if kind is int else "a number"
    try:
      value = kind(item.strip())
    except ValueError:
      raise ValueError(f"--{flag}: {item!r} is not {what}") from None
    if kind is float and not (math.isfinite(value) and value > 0):
      raise ValueError(f"--{flag}: {item!r} must be > 0")
    values.append(value)
  if not values:
    raise ValueError(f"--{flag}: give at least one value")
  _check_unique([repr(v) for v in values], flag)
  return values


def parse_pass_through(values: Sequence[str], flag: str) -> List[str]:
  """Shell-splits the values; each token must be a --name[=value] flag, not a reserved one."""
  tokens = []
  for value in values:
    try:
      tokens += shlex.split(value)
    except ValueError as e:
      raise ValueError(f"--{flag}: {value!r}: {e}") from None
  for token in tokens:
    if not token.startswith("-") or token.strip("-") == "":
      raise ValueError(f"--{flag}: {token!r} is not a flag; write --name=value")
    name = token.lstrip("-").split("=", 1)[0]
    if name in RESERVED_FLAGS or (name.startswith("no") and name[2:] in RESERVED_FLAGS):
      raise ValueError(
          f"--{flag}: {token!r}: the sweep sets --{name} itself (see --models, "
          f"--tasks, --learning_rates, --seeds, --entry_flagfile)"
      )
  return tokens


def run_dir_name(learning_rate: float, seed: int) -> str:
  return f"lr{learning_rate!r}_seed{seed}"


def build_runs(
    models: Sequence[ModelSpec],
    tasks: Sequence[SweepTask],
    learning_rates: Sequence[float],
    seeds: Sequence[int],
    output_dir: str,
    entry_flags: Sequence[str] = (),
    module_flags: Optional[Dict] = None,
    entry_flagfile: Optional[str] = None,
) -> List[Run]:
  """The grid in model, task, learning rate, seed order."""
  module_flags = module_flags or {}
  runs = []
  for model in models:
    for task in tasks:
      for lr in learning_rates:
        for seed in seeds:
          run_dir = os.path.join(
              output_dir, layout.SWEEP_RUNS_DIR, model.name, task.name, run_dir_name(lr, seed)
          )
          args = [f"--flagfile={entry_flagfile}"] if entry_flagfile else []
          args += [
              *entry_flags,
              *module_flags.get(task.module, ()),
              f"--{model.flag}={model.value}",
              *task.flags,
              f"--model_dir={run_dir}",
              f"--learning_rate={lr!r}",
              f"--seed={seed}",
              "--mode=train_and_eval",
          ]
          runs.append(Run(model.name, task.name, lr, seed, task.module, tuple(args), run_dir))
  return runs
