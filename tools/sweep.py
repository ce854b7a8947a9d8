r"""Fine-tuning sweep: models × tasks × learning rates × seeds, and the papers' tables.

Every run is a subprocess of `python -m recurrent_bert.finetune_glue` (GLUE, SuperGLUE
BoolQ/MultiRC, custom TSV tasks) or `recurrent_bert.finetune_squad` (SQuAD), in
--mode=train_and_eval, with its own model dir

  OUTPUT_DIR/runs/<model>/<task>/lr<lr>_seed<seed>/   (log.txt: the run's stdout+stderr;
                                                       sweep_command.json: its flags)

A run whose eval_results.json holds a final evaluation is skipped, so re-running the same
command resumes an interrupted sweep (an unfinished run resumes from its last checkpoint);
a run dir made with other flags is reported, never silently reused. A failed run is
reported with the end of its log and the sweep goes on; the exit status is then 1. A run
that exits with status 2 (bad input: flags or data, no work done) would fail the same way at
every lr and seed, so the remaining runs of its model × task are not started.

Outputs in OUTPUT_DIR (each written atomically; they describe this invocation's grid):
  results.csv   one row per finished run: model, task, learning_rate, seed, main_metric,
                value, every metric of the first eval split, seconds_per_train_step,
                num_train_steps, eval_split, run_dir.
  summary.md    per model × task × learning rate: mean ± sample std over seeds, with n
  summary.csv   (the SwishRNN paper's protocol); per model × task: best of restarts, the
                best dev score over every lr × seed and where it came from (the BERT
                paper's); per model: median time per fine-tuning step over its runs.
  lr_sweep.png  per task, the main metric (mean, std error bars) against the learning rate
                (log axis), one line per model (the SwishRNN paper's Figure 3).

--models: NAME=SPEC, where SPEC is a pretrained encoder (an existing directory or checkpoint
prefix: --init_checkpoint), a ModelConfig JSON file or a preset name such as bert_tiny
(--model_config, random initialisation). --tasks: TASK=DATA_DIR for finetune_glue (a GLUE
or SuperGLUE task name, or custom), squad=TRAIN_FILE:PREDICT_FILE (squad_v2=... for v2.0)
for finetune_squad. Flags for the runs: --entry_flags (every run), --glue_flags /
--squad_flags (runs of that entry point), --entry_flagfile (a --flagfile for every run, e.g.
a paper's protocol; the sweep's own flags win over it). The flags the sweep sets itself
(task, data, model, model_dir, learning_rate, seed, mode) cannot be passed through.

Example (tiny models from scratch on a generated task):
  python -m tools.sweep --models=bert=bert_tiny,swishrnn=swishrnn_tiny \
      --tasks=rte=/data/rte --learning_rates=1e-3,3e-4,1e-4 --seeds=0,1,2 \
      --entry_flags="--vocab_file=/data/vocab.txt --max_seq_length=32 \
      --train_batch_size=16 --max_train_steps=100" --parallel=2 --output_dir=/tmp/sweep
"""

import collections
import csv
import dataclasses
import io
import json
import math
import os
import re
import shlex
import signal
import statistics
import sys
import time
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

if __package__ in (None, ""):  # run as `python tools/NAME.py`: make `tools` importable
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import flags

from recurrent_bert import cli
from recurrent_bert import config
from recurrent_bert import io_utils
from recurrent_bert import jobs
from recurrent_bert import model_dir as layout
from recurrent_bert import progress
from recurrent_bert.flags import execution

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The sweep's flags, defined when it runs as a program (not on import): tests import
  this module beside other tools whose flags share names (--output_dir)."""
  flags.DEFINE_list(
      "models",
      None,
      "NAME=SPEC, comma-separated; SPEC: a pretrained encoder "
      "dir / checkpoint prefix, a ModelConfig JSON, or a preset (bert_tiny).",
  )
  flags.DEFINE_list(
      "tasks",
      None,
      "TASK=DATA_DIR (finetune_glue: GLUE/SuperGLUE name or "
      "custom) or squad=TRAIN_FILE:PREDICT_FILE / squad_v2=... (finetune_squad).",
  )
  flags.DEFINE_list("learning_rates", None, "Peak learning rates, e.g. 1e-4,3e-4,1e-3.")
  flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (restarts) per learning rate.")
  flags.DEFINE_string("output_dir", None, "Where runs/ and the tables go.")
  flags.DEFINE_multi_string(
      "entry_flags",
      [],
      "Flags for every run, e.g. "
      "--entry_flags='--max_seq_length=128 --train_batch_size=32' "
      "(repeatable; split like a shell line).",
  )
  flags.DEFINE_multi_string("glue_flags", [], "Flags only for the finetune_glue runs.")
  flags.DEFINE_multi_string("squad_flags", [], "Flags only for the finetune_squad runs.")
  flags.DEFINE_string("entry_flagfile", None, "Passed as --flagfile to every run.")
  flags.DEFINE_integer("parallel", 1, "Runs at once (each is a TensorFlow process).")
  flags.DEFINE_boolean("dry_run", False, "Print the runs' commands and exit.")
  flags.DEFINE_integer("log_tail_lines", 15, "Lines of a failed run's log that are printed.")
  flags.mark_flags_as_required(["models", "tasks", "learning_rates", "output_dir"])


GLUE_MODULE = "recurrent_bert.finetune_glue"
SQUAD_MODULE = "recurrent_bert.finetune_squad"
SQUAD_TASKS = {"squad": [], "squad_v2": ["--version=2.0"]}
EVAL_RESULTS_FILE = layout.EVAL_RESULTS_FILE
COMMAND_FILE = "sweep_command.json"
LOG_FILE = "log.txt"
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
# The entry points' exit status for bad input (flags, data; no work done).
BAD_INPUT_STATUS = 2
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


# -- one run's results -----------------------------------------------------------------


def read_eval_results(run_dir: str) -> Optional[dict]:
  """The run's final eval_results.json, or None while it has none / only an interim one.

  The final evaluation (of the best checkpoint, after training) is the one that records
  the training time per step; the evaluations during training do not.
  """
  path = os.path.join(run_dir, EVAL_RESULTS_FILE)
  try:
    with open(path, encoding="utf-8") as f:
      results = json.load(f)
  except (FileNotFoundError, json.JSONDecodeError):
    return None
  if "main_metric_value" not in results or "seconds_per_train_step" not in results:
    return None
  return results


def main_eval_split(results: dict) -> str:
  """The first eval split (the main one; MNLI: dev_matched) of an eval_results dict.

  finetuning records the splits in order under "eval_splits"; for files without that
  key, the split whose main metric equals main_metric_value (the first by name).
  """
  if results.get("eval_splits"):
    return results["eval_splits"][0]
  splits = sorted(k for k, v in results.items() if isinstance(v, dict))
  if not splits:
    raise ValueError("eval_results.json has no eval split")
  metric, value = results["main_metric"], results["main_metric_value"]
  matching = [s for s in splits if _same(results[s].get(metric), value)]
  return (matching or splits)[0]


def _same(a, b) -> bool:
  if a is None or b is None:
    return False
  return a == b or (
      isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
  )


def result_row(run: Run, results: dict) -> dict:
  """One results row (the input of the aggregation functions)."""
  split = main_eval_split(results)
  return {
      "model": run.model,
      "task": run.task,
      "learning_rate": run.learning_rate,
      "seed": run.seed,
      "main_metric": results["main_metric"],
      "value": float(results["main_metric_value"]),
      "metrics": dict(results[split]),
      "eval_split": split,
      "seconds_per_train_step": float(results.get("seconds_per_train_step", math.nan)),
      "num_train_steps": results.get("num_train_steps"),
      "run_dir": run.run_dir,
  }


# -- aggregation (pure: rows → tables) -------------------------------------------------


def mean_std(values: Sequence[float]) -> Tuple[float, float]:
  """Mean and sample standard deviation (ddof=1; NaN for fewer than two values)."""
  values = [float(v) for v in values]
  if not values:
    return math.nan, math.nan
  mean = math.fsum(values) / len(values)
  if len(values) < 2:
    return mean, math.nan
  return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _ordered(rows, key) -> list:
  """Distinct values of `key` in order of first appearance."""
  return list(dict.fromkeys(row[key] for row in rows))


def summarize_by_learning_rate(rows: Sequence[dict]) -> List[dict]:
  """Per model × task × learning rate: n, mean and sample std of the main metric over seeds.

  Models and tasks keep the rows' order; learning rates ascend.
  """
  groups = collections.defaultdict(list)
  for row in rows:
    groups[(row["model"], row["task"], row["learning_rate"])].append(row)
  out = []
  for model in _ordered(rows, "model"):
    for task in _ordered(rows, "task"):
      for lr in sorted({k[2] for k in groups if k[:2] == (model, task)}):
        group = sorted(groups[(model, task, lr)], key=lambda r: r["seed"])
        mean, std = mean_std([r["value"] for r in group])
        out.append(
            {
                "model": model,
                "task": task,
                "main_metric": group[0]["main_metric"],
                "learning_rate": lr,
                "n": len(group),
                "mean": mean,
                "std": std,
                "seeds": [r["seed"] for r in group],
                "values": [r["value"] for r in group],
            }
        )
  return out


def best_of_restarts(rows: Sequence[dict]) -> List[dict]:
  """Per model × task: the best main metric over every learning rate × seed, and its run.

  Ties go to the smaller learning rate, then the smaller seed; NaN never wins.
  """
  out = []
  for model in _ordered(rows, "model"):
    for task in _ordered(rows, "task"):
      group = [r for r in rows if r["model"] == model and r["task"] == task]
      if not group:
        continue
      finite = [r for r in group if not math.isnan(r["value"])]
      best = None
      for row in sorted(finite, key=lambda r: (r["learning_rate"], r["seed"])):
        if best is None or row["value"] > best["value"]:
          best = row
      out.append(
          {
              "model": model,
              "task": task,
              "main_metric": group[0]["main_metric"],
              "best": best["value"] if best else math.nan,
              "learning_rate": best["learning_rate"] if best else None,
              "seed": best["seed"] if best else None,
              "n": len(group),
          }
      )
  return out


def best_mean_learning_rate(by_lr: Sequence[dict]) -> Dict[Tuple[str, str], dict]:
  """Per (model, task): the by-lr entry with the best mean (ties: the smaller lr)."""
  best = {}
  for entry in by_lr:
    key = (entry["model"], entry["task"])
    if math.isnan(entry["mean"]):
      continue
    if key not in best or entry["mean"] > best[key]["mean"]:
      best[key] = entry
  return best


def step_time_by_model(rows: Sequence[dict]) -> List[dict]:
  """Per model: the median seconds per training step over its runs (NaN entries skipped)."""
  out = []
  for model in _ordered(rows, "model"):
    times = [
        r["seconds_per_train_step"]
        for r in rows
        if r["model"] == model and not math.isnan(r["seconds_per_train_step"])
    ]
    out.append(
        {
            "model": model,
            "median_seconds_per_train_step": statistics.median(times) if times else math.nan,
            "n": len(times),
        }
    )
  return out


def _num(value) -> str:
  """A CSV cell: full precision, empty for missing."""
  if value is None:
    return ""
  return repr(value) if isinstance(value, float) else str(value)


def _csv_text(header: Sequence[str], body: Sequence[Sequence]) -> str:
  buffer = io.StringIO()
  writer = csv.writer(buffer, lineterminator="\n")
  writer.writerow(header)
  for line in body:
    writer.writerow([_num(v) for v in line])
  return buffer.getvalue()


def results_csv(rows: Sequence[dict], output_dir: Optional[str] = None) -> str:
  """results.csv: a row per run; the metric columns are the union over the rows."""
  metric_names = sorted({name for row in rows for name in row["metrics"]})
  header = [
      "model",
      "task",
      "learning_rate",
      "seed",
      "main_metric",
      "value",
      *metric_names,
      "seconds_per_train_step",
      "num_train_steps",
      "eval_split",
      "run_dir",
  ]
  body = []
  for row in rows:
    run_dir = row.get("run_dir", "")
    if output_dir and run_dir:
      run_dir = os.path.relpath(run_dir, output_dir)
    body.append(
        [
            row["model"],
            row["task"],
            row["learning_rate"],
            row["seed"],
            row["main_metric"],
            row["value"],
            *[row["metrics"].get(name) for name in metric_names],
            row["seconds_per_train_step"],
            row["num_train_steps"],
            row.get("eval_split", ""),
            run_dir,
        ]
    )
  return _csv_text(header, body)


def summary_csv(rows: Sequence[dict]) -> str:
  """summary.csv: a row per model × task × lr, with the per-task and per-model columns."""
  by_lr = summarize_by_learning_rate(rows)
  best = {(b["model"], b["task"]): b for b in best_of_restarts(rows)}
  best_mean = best_mean_learning_rate(by_lr)
  times = {t["model"]: t["median_seconds_per_train_step"] for t in step_time_by_model(rows)}
  header = [
      "model",
      "task",
      "main_metric",
      "learning_rate",
      "n",
      "mean",
      "std",
      "is_best_mean_learning_rate",
      "best_of_restarts",
      "best_of_restarts_learning_rate",
      "best_of_restarts_seed",
      "runs",
      "model_median_seconds_per_train_step",
  ]
  body = []
  for e in by_lr:
    b = best[(e["model"], e["task"])]
    body.append(
        [
            e["model"],
            e["task"],
            e["main_metric"],
            e["learning_rate"],
            e["n"],
            e["mean"],
            e["std"],
            int(best_mean.get((e["model"], e["task"])) is e),
            b["best"],
            b["learning_rate"],
            b["seed"],
            b["n"],
            times[e["model"]],
        ]
    )
  return _csv_text(header, body)


def _fmt(value: float) -> str:
  return "n/a" if value is None or math.isnan(value) else f"{value:.4f}"


def _mean_std_cell(entry: dict) -> str:
  std = "n/a" if math.isnan(entry["std"]) else f"{entry['std']:.4f}"
  return f"{_fmt(entry['mean'])} ± {std} (n={entry['n']})"


def _table(header: Sequence[str], body: Sequence[Sequence[str]]) -> List[str]:
  lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
  lines += ["| " + " | ".join(str(c) for c in line) + " |" for line in body]
  return lines


def summary_markdown(
    rows: Sequence[dict], failed: Sequence[str] = (), notes: Sequence[str] = ()
) -> str:
  """summary.md: the mean ± std table, best of restarts, step times, failed runs."""
  lines = ["# Fine-tuning sweep", ""]
  lines += [
      f"{len(rows)} finished runs" + (f", {len(failed)} failed or not run" if failed else "") + "."
  ]
  lines += list(notes)
  if not rows:
    lines += ["", "No results."]
  else:
    by_lr = summarize_by_learning_rate(rows)
    best_mean = best_mean_learning_rate(by_lr)
    lrs = sorted({e["learning_rate"] for e in by_lr})
    cells = {(e["model"], e["task"], e["learning_rate"]): e for e in by_lr}
    lines += [
        "",
        "## Mean ± std over seeds, per learning rate (SwishRNN paper protocol)",
        "",
        "Sample standard deviation (ddof=1) over the seeds; n = finished seeds. "
        "Bold: the learning rate with the best mean.",
        "",
    ]
    body = []
    for model in _ordered(rows, "model"):
      for task in _ordered(rows, "task"):
        row_cells = []
        for lr in lrs:
          entry = cells.get((model, task, lr))
          cell = _mean_std_cell(entry) if entry else "–"
          if entry is not None and best_mean.get((model, task)) is entry:
            cell = f"**{cell}**"
          row_cells.append(cell)
        if any(c != "–" for c in row_cells):
          metric = next(r["main_metric"] for r in rows if r["model"] == model and r["task"] == task)
          body.append([model, task, metric, *row_cells])
    lines += _table(["model", "task", "metric", *[f"lr={lr:g}" for lr in lrs]], body)
    lines += [
        "",
        "## Best of restarts (BERT paper protocol)",
        "",
        "The best dev score over every learning rate × seed, and the run that gave it.",
        "",
    ]
    lines += _table(
        ["model", "task", "metric", "best", "lr", "seed", "runs"],
        [
            [
                b["model"],
                b["task"],
                b["main_metric"],
                _fmt(b["best"]),
                "n/a" if b["learning_rate"] is None else f"{b['learning_rate']:g}",
                "n/a" if b["seed"] is None else b["seed"],
                b["n"],
            ]
            for b in best_of_restarts(rows)
        ],
    )
    lines += [
        "",
        "## Time per fine-tuning step",
        "",
        "Median over the model's runs of seconds_per_train_step (training steps after "
        "the first loop call, which traces).",
        "",
    ]
    lines += _table(
        ["model", "median s/step", "ms/step", "runs"],
        [
            [
                t["model"],
                _fmt(t["median_seconds_per_train_step"]),
                "n/a"
                if math.isnan(t["median_seconds_per_train_step"])
                else f"{1000 * t['median_seconds_per_train_step']:.1f}",
                t["n"],
            ]
            for t in step_time_by_model(rows)
        ],
    )
  if failed:
    lines += ["", "## Failed or not run", ""] + [f"- {f}" for f in failed]
  return "\n".join(lines) + "\n"


def plot_lr_sweep(rows: Sequence[dict], path: str) -> None:
  """lr_sweep.png: per task, mean ± std of the main metric against the lr, a line per model."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  by_lr = summarize_by_learning_rate(rows)
  tasks = _ordered(rows, "task")
  ncols = min(3, len(tasks))
  nrows = math.ceil(len(tasks) / ncols)
  fig, axes = plt.subplots(nrows, ncols, figsize=(4.8 * ncols, 3.8 * nrows), squeeze=False)
  for ax, task in zip(axes.flat, tasks):
    metric = next(r["main_metric"] for r in rows if r["task"] == task)
    all_lrs = set()
    for model in _ordered(rows, "model"):
      entries = [e for e in by_lr if e["model"] == model and e["task"] == task]
      if not entries:
        continue
      lrs = [e["learning_rate"] for e in entries]
      all_lrs.update(lrs)
      ax.errorbar(
          lrs,
          [e["mean"] for e in entries],
          yerr=[0.0 if math.isnan(e["std"]) else e["std"] for e in entries],
          marker="o",
          capsize=3,
          label=model,
      )
    ax.set_xscale("log")
    ax.set_xticks(sorted(all_lrs))
    ax.set_xticklabels([f"{lr:g}" for lr in sorted(all_lrs)])
    ax.minorticks_off()
    ax.set_xlabel("learning rate")
    ax.set_ylabel(f"{metric} (mean ± std over seeds)")
    ax.set_title(task)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
  for ax in list(axes.flat)[len(tasks) :]:
    ax.set_visible(False)
  fig.tight_layout()
  with io_utils.atomic_write(path, "wb") as f:
    fig.savefig(f, format="png", dpi=100)
  plt.close(fig)


def write_outputs(
    rows: Sequence[dict], output_dir: str, failed: Sequence[str] = (), notes: Sequence[str] = ()
) -> List[str]:
  """results.csv, summary.md, summary.csv and (with results) lr_sweep.png; their paths."""
  paths = {
      name: os.path.join(output_dir, name)
      for name in (
          layout.SWEEP_RESULTS_FILE,
          layout.SWEEP_SUMMARY_MD,
          layout.SWEEP_SUMMARY_CSV,
          layout.SWEEP_PLOT,
      )
  }
  io_utils.atomic_write_text(paths[layout.SWEEP_RESULTS_FILE], results_csv(rows, output_dir))
  io_utils.atomic_write_text(paths[layout.SWEEP_SUMMARY_MD], summary_markdown(rows, failed, notes))
  io_utils.atomic_write_text(paths[layout.SWEEP_SUMMARY_CSV], summary_csv(rows))
  if rows:
    plot_lr_sweep(rows, paths[layout.SWEEP_PLOT])
  else:  # no stale plot beside tables that have no results
    if os.path.exists(paths[layout.SWEEP_PLOT]):
      os.remove(paths[layout.SWEEP_PLOT])
    paths.pop(layout.SWEEP_PLOT)
  return list(paths.values())


# -- running ---------------------------------------------------------------------------


class _Interrupted(Exception):
  pass


def _recorded_command(run: Run) -> Optional[List[str]]:
  try:
    with open(os.path.join(run.run_dir, COMMAND_FILE), encoding="utf-8") as f:
      return json.load(f)["args"]
  except (FileNotFoundError, json.JSONDecodeError, KeyError):
    return None


def _comparable(args: Sequence[str]) -> List[str]:
  """A run's flags without --model_dir (a sweep dir may move), order-free."""
  return sorted(a for a in args if not a.startswith("--model_dir="))


def _command_mismatch(run: Run) -> Optional[str]:
  """Why the run dir cannot be reused with this run's flags (None if it can)."""
  recorded = _recorded_command(run)
  current = [run.module, *run.args]
  if recorded is None or _comparable(recorded) == _comparable(current):
    return None
  old, new = set(_comparable(recorded)), set(_comparable(current))
  return (
      f"{run.run_dir} was made with other flags (then: {sorted(old - new)}, now: "
      f"{sorted(new - old)}); remove it or use another --output_dir"
  )


class Sweep:
  """Runs the grid with up to `parallel` subprocesses, reporting each finished run."""

  def __init__(self, runs: Sequence[Run], parallel: int, tail_lines: int = 15, out=sys.stderr):
    self.runs = list(runs)
    self.parallel = parallel
    self.tail_lines = tail_lines
    self.out = out
    self.results: Dict[Run, dict] = {}
    self.failed: List[str] = []
    self.skipped = 0
    self.done = 0
    self.start = time.monotonic()
    # Every run is estimated at 1: the ETA is the mean run time so far per run left.
    self._eta = jobs.Eta()

  def _print(self, message: str) -> None:
    print(message, file=self.out, flush=True)

  def _progress(self, message: str, remaining_to_run: int) -> None:
    self.done += 1
    elapsed = time.monotonic() - self.start
    eta = ""
    seconds_left = self._eta.seconds_left([1.0] * remaining_to_run, self.parallel)
    if remaining_to_run and seconds_left is not None:
      eta = f", ETA {progress.format_duration(seconds_left)}"
    width = len(str(len(self.runs)))
    self._print(
        f"[{self.done:{width}d}/{len(self.runs)}] {message} | elapsed "
        f"{progress.format_duration(elapsed)}{eta}"
    )

  def _fail(self, run: Run, reason: str, remaining: int, log: bool = True) -> None:
    self.failed.append(f"{run.label}: {reason}")
    log_path = os.path.join(run.run_dir, LOG_FILE)
    self._progress(f"FAILED {run.label}: {reason}", remaining)
    if log:
      self._print(f"  end of {log_path}:\n{jobs.log_tail(log_path, self.tail_lines)}")

  def _job(self, run: Run) -> jobs.Job:
    """The run as a job of the pool, its flags recorded beside its log first."""
    os.makedirs(run.run_dir, exist_ok=True)
    io_utils.atomic_write_json(
        os.path.join(run.run_dir, COMMAND_FILE), {"args": [run.module, *run.args]}
    )
    return jobs.Job(
        run.run_dir, jobs.python_module(run.module, *run.args), os.path.join(run.run_dir, LOG_FILE)
    )

  def _finish(self, run: Run, status: int, seconds: float, remaining: int) -> None:
    self._eta.finished(1.0, seconds)
    results = read_eval_results(run.run_dir)
    if status != 0:
      self._fail(run, f"exit status {status} after {seconds:.1f} s", remaining)
    elif results is None:
      self._fail(run, f"finished without a final {EVAL_RESULTS_FILE}", remaining)
    else:
      row = self._row(run, results, remaining)
      if row:
        self._progress(
            f"{run.label}: {row['main_metric']}={row['value']:.4f} in {seconds:.1f} s",
            remaining,
        )

  def _row(self, run: Run, results: dict, remaining: int) -> Optional[dict]:
    try:
      row = result_row(run, results)
    except (ValueError, KeyError, TypeError) as e:
      self._fail(run, f"unreadable {EVAL_RESULTS_FILE}: {e!r}", remaining, log=False)
      return None
    self.results[run] = row
    return row

  def run(self) -> None:
    """Skips the finished runs, runs the others; a failure is reported and the rest go on.

    Raises:
      KeyboardInterrupt, _Interrupted: Ctrl-C or SIGTERM (the running runs are stopped).
    """
    pending = []
    for run in self.runs:
      mismatch = _command_mismatch(run)
      results = read_eval_results(run.run_dir)
      if mismatch:
        self._fail(run, mismatch, 0, log=False)
      elif results is not None:
        row = self._row(run, results, 0)
        if row:
          self.skipped += 1
          self._progress(
              f"skipped {run.label}: already finished ({row['main_metric']}="
              f"{row['value']:.4f})",
              0,
          )
      else:
        pending.append(run)
    if pending:
      self._print(
          f"running {len(pending)} of {len(self.runs)} runs, up to {self.parallel} "
          f"at once (logs: <run dir>/{LOG_FILE})"
      )
    by_dir = {run.run_dir: run for run in pending}
    handled = 0  # runs finished, failed or not run, of `pending`
    bad_input = set()  # (model, task) pairs whose runs failed with bad input

    def to_run() -> Iterator[jobs.Job]:
      nonlocal handled
      for run in pending:
        if (run.model, run.task) in bad_input:
          handled += 1
          self._fail(
              run,
              f"not run: a {run.model}/{run.task} run failed with bad input "
              f"(exit status {BAD_INPUT_STATUS})",
              len(pending) - handled,
              log=False,
          )
          continue
        yield self._job(run)

    def on_exit(job: jobs.Job, status: int, seconds: float, cpu: Optional[float]) -> None:
      del cpu
      nonlocal handled
      handled += 1
      run = by_dir[job.name]
      if status == BAD_INPUT_STATUS:
        bad_input.add((run.model, run.task))
      self._finish(run, status, seconds, len(pending) - handled)

    try:
      jobs.run_jobs(to_run(), self.parallel, on_exit, out=self.out)
    except (KeyboardInterrupt, _Interrupted):
      self._print("interrupted: the same command resumes the sweep")
      raise


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  if FLAGS.parallel < 1:
    cli.fail(f"--parallel={FLAGS.parallel}: must be >= 1")
  if FLAGS.log_tail_lines < 0:
    cli.fail(f"--log_tail_lines={FLAGS.log_tail_lines}: must be >= 0")
  for name in ("models", "tasks", "learning_rates", "seeds"):
    if not FLAGS[name].value:
      cli.fail(f"--{name} is empty: give at least one (see --help)")
  models = cli.run_checked(parse_models, FLAGS.models)
  tasks = cli.run_checked(parse_tasks, FLAGS.tasks)
  learning_rates = cli.run_checked(parse_numbers, FLAGS.learning_rates, "learning_rates", float)
  seeds = cli.run_checked(parse_numbers, FLAGS.seeds, "seeds", int)
  entry_flags = cli.run_checked(parse_pass_through, FLAGS.entry_flags, "entry_flags")
  module_flags = {
      GLUE_MODULE: cli.run_checked(parse_pass_through, FLAGS.glue_flags, "glue_flags"),
      SQUAD_MODULE: cli.run_checked(parse_pass_through, FLAGS.squad_flags, "squad_flags"),
  }
  entry_flagfile = None
  if FLAGS.entry_flagfile:
    if not os.path.isfile(FLAGS.entry_flagfile):
      cli.fail(f"--entry_flagfile: {FLAGS.entry_flagfile!r} does not exist")
    entry_flagfile = os.path.abspath(FLAGS.entry_flagfile)
  execution.check_output_path("output_dir")  # empty, a file, or under a file: refused
  output_dir = os.path.abspath(FLAGS.output_dir)
  runs = build_runs(
      models, tasks, learning_rates, seeds, output_dir, entry_flags, module_flags, entry_flagfile
  )
  if FLAGS.dry_run:
    for run in runs:
      print(shlex.join([sys.executable, "-m", run.module, *run.args]))
    return
  os.makedirs(output_dir, exist_ok=True)
  if not os.access(output_dir, os.W_OK):
    cli.fail(f"--output_dir: {output_dir!r} is not writable")

  def on_sigterm(signum, frame):
    del signum, frame
    raise _Interrupted()

  signal.signal(signal.SIGTERM, on_sigterm)
  sweep = Sweep(runs, FLAGS.parallel, FLAGS.log_tail_lines)
  try:
    sweep.run()
  except (KeyboardInterrupt, _Interrupted):
    sys.exit(130)
  rows = [sweep.results[run] for run in runs if run in sweep.results]
  notes = [
      f"Grid: {len(models)} models × {len(tasks)} tasks × {len(learning_rates)} "
      f"learning rates × {len(seeds)} seeds; up to {FLAGS.parallel} runs at once "
      f"(step times are measured with that sharing)."
  ]
  paths = write_outputs(rows, output_dir, sweep.failed, notes)
  print(
      f"{len(runs)} runs: {len(rows) - sweep.skipped} finished now, {sweep.skipped} "
      f"skipped (already finished), {len(sweep.failed)} failed or not run; wrote "
      f"{', '.join(paths)}",
      file=sys.stderr,
  )
  with open(os.path.join(output_dir, "summary.md"), encoding="utf-8") as f:
    print(f.read(), end="")
  if sweep.failed:
    sys.exit(1)


if __name__ == "__main__":
  define_flags()
  cli.run(main)
