"""The fine-tuning sweep's results (rbert-sweep): one run's eval_results.json read as a
row, the rows aggregated into the papers' tables (mean ± std over seeds per learning rate,
best of restarts, step times), and the files written from them: results.csv, summary.md,
summary.csv and lr_sweep.png.

`read_eval_results`, `plot_lr_sweep` and `write_outputs` touch files; the rest is pure (rows
in, text out).
"""

import collections
import csv
import io
import json
import math
import os
import statistics
from typing import Dict, List, Optional, Sequence, Tuple

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert.tools.sweep_grid import Run

EVAL_RESULTS_FILE = layout.EVAL_RESULTS_FILE


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
