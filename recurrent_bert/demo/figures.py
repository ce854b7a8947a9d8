"""The demo's figures: the MLM loss curves (mlm_loss.png) and fine-tuning stability
(stability.png), from the report's rows. matplotlib is imported when a figure is drawn.
"""

import os
import statistics
from typing import Dict, List, Sequence

from recurrent_bert import io_utils
from recurrent_bert.demo import claims


def smooth(values: Sequence[float], window: int) -> List[float]:
  """Centred moving average over `window` points (fewer at the ends), so no lag."""
  prefix = [0.0]
  for value in values:
    prefix.append(prefix[-1] + value)
  half = window // 2
  out = []
  for i in range(len(values)):
    lo, hi = max(0, i - half), min(len(values), i + half + 1)
    out.append((prefix[hi] - prefix[lo]) / (hi - lo))
  return out


def plot_losses(
    curves: Dict[str, Dict[str, Dict[int, float]]], path: str, title: str, window: int
) -> None:
  """The MLM figure: training loss (left) and held-out loss (right) against the step.

  Args:
    curves: {model label: {"train": {seed: {step: loss}}, "eval": {seed: {step: loss}}}}.
    path: the PNG to write (atomically).
    title: the figure's title.
    window: of the centred moving average of the training losses (odd).

  Each model is a line, the mean over its seeds, inside a band from the lowest to the
  highest seed (of the smoothed losses, for training).
  """
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, 2, figsize=(12, 5), dpi=110)
  panels = (("train", "training MLM loss (smoothed)"), ("eval", "held-out MLM loss"))
  for ax, (part, ylabel) in zip(axes, panels):
    for i, (label, runs) in enumerate(curves.items()):
      by_seed = [points for points in runs[part].values() if points]
      if not by_seed:
        continue
      steps = sorted(set.intersection(*(set(points) for points in by_seed)))
      values = [[points[step] for step in steps] for points in by_seed]
      if part == "train":
        values = [smooth(v, window) for v in values]
      columns = list(zip(*values))
      mean = [statistics.fmean(c) for c in columns]
      seeds = len(by_seed)
      marker = "o" if part == "eval" else None
      ax.plot(
          steps,
          mean,
          color=f"C{i}",
          linewidth=2.0,
          marker=marker,
          markersize=3,
          label=f"{label} ({seeds} seed{'s' if seeds > 1 else ''})",
      )
      if seeds > 1:
        ax.fill_between(
            steps,
            [min(c) for c in columns],
            [max(c) for c in columns],
            color=f"C{i}",
            alpha=0.25,
            linewidth=0,
        )
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
  # One legend for both panels, below them, where no curve runs.
  handles, labels = max((ax.get_legend_handles_labels() for ax in axes), key=lambda h: len(h[1]))
  fig.legend(handles, labels, loc="lower center", ncol=2, fontsize="small", frameon=False)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout(rect=(0, 0.04 + 0.035 * ((len(labels) + 1) // 2), 1, 1))
  with io_utils.atomic_write(path, "wb") as f:
    fig.savefig(f, format="png")
  plt.close(fig)


def model_labels(rows: List[Dict]) -> Dict[str, str]:
  """{preset: legend label}: the model's name and preset, and for a baseline the models
  whose claims it is the baseline of."""
  baseline_of = {}
  for row, base in claims.claim_pairs(rows):
    baseline_of.setdefault(base["preset"], []).append(row["model"])
  return {
      r["preset"]: f"{r['model']} ({r['preset']})"
      + (
          f", baseline of {', '.join(baseline_of[r['preset']])}"
          if r["preset"] in baseline_of
          else ""
      )
      for r in rows
  }


def plot_mlm_figure(rows: List[Dict], s: Dict, out_dir: str) -> str:
  """out_dir/mlm_loss.png of the models' rows (`pretraining_row`); returns its path."""
  window = max(1, s["pretrain_steps"] // 25) | 1
  png = os.path.join(out_dir, "mlm_loss.png")
  labels = model_labels(rows)
  plot_losses(
      {labels[r["preset"]]: {"train": r["train_curves"], "eval": r["eval_curves"]} for r in rows},
      png,
      f"MLM loss: {s['size']} models, the same records, {s['pretrain_steps']} steps x "
      f"{s['batch_size']} x {s['seq_length']} tokens; line: mean over pretraining seeds, "
      f"band: lowest to highest seed\n(training: centred moving average of {window} steps; "
      "held-out: the same records of held-out documents for every model)",
      window,
  )
  return png


def plot_stability(rows: List[Dict], path: str, title: str) -> None:
  """stability.png: each model's dev accuracy against the fine-tuning learning rate.

  Args:
    rows: the report's rows ("model", "preset", "by_learning_rate": {lr: {"dev": [...]}}).
    path: the PNG to write (atomically).
    title: what the task is, in words (the figure's title).

  A line per model through its mean over the fine-tuning seeds, inside a band from the
  lowest to the highest seed, as in Figure 3 of the SwishRNN paper.
  """
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(8.5, 5), dpi=110)
  rates = sorted({lr for r in rows for lr in r["by_learning_rate"]})
  labels = model_labels(rows)
  for i, row in enumerate(rows):
    by_lr = row["by_learning_rate"]
    lrs = sorted(by_lr)
    dev = [by_lr[lr]["dev"] for lr in lrs]
    seeds = min(len(d) for d in dev)
    ax.plot(
        lrs,
        [statistics.fmean(d) for d in dev],
        color=f"C{i}",
        marker="o",
        label=f"{labels[row['preset']]} ({seeds} seed{'s' if seeds > 1 else ''})",
    )
    if seeds > 1:
      ax.fill_between(lrs, [min(d) for d in dev], [max(d) for d in dev], color=f"C{i}", alpha=0.2)
  ax.set_xscale("log")
  ax.set_xticks(rates)
  ax.set_xticklabels([f"{lr:g}" for lr in rates])
  ax.minorticks_off()
  ax.set_xlabel("fine-tuning peak learning rate")
  ax.set_ylabel("dev accuracy")
  ax.set_title(
      title + "\nline: mean over fine-tuning seeds, band: lowest to highest seed", fontsize=9
  )
  ax.grid(alpha=0.3)
  ax.legend(fontsize="small")
  fig.tight_layout()
  with io_utils.atomic_write(path, "wb") as f:
    fig.savefig(f, format="png")
  plt.close(fig)
