"""The demo's report folder: report.md, mlm_loss.png, tensorboard/, results.json.

  python -m recurrent_bert.demo.report <work_dir>/report/inputs.json

Run by the demo's report stage in its own process (it imports TensorFlow and matplotlib,
which the demo's driver never does). Reads only what the entry points wrote:
metrics.jsonl (per-step losses), the TensorBoard event files (the training loop's own step
timer), eval_results.json and the test predictions (through the demo's stage results),
model_config.json (parameter counts). Also the models' display names, which the demo's
progress lines use too.
"""

import datetime
import glob
import json
import math
import os
import platform
import shutil
import statistics
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from recurrent_bert import config
from recurrent_bert import io_utils
from recurrent_bert import jobs
from recurrent_bert import model_dir as layout

DISPLAY_NAMES = {
    "bert": "BERT-orig",
    "bert_rab": "BERT-rab",
    "trans_blstm_1": "TRANS-BLSTM-1",
    "trans_blstm_2": "TRANS-BLSTM-2",
    "trans_blstm_small_1": "TRANS-BLSTM-SMALL-1",
    "trans_blstm_small_2": "TRANS-BLSTM-SMALL-2",
    "swishrnn": "SwishRNN-BERT",
    "blstm": "BLSTM-only",
}


def family_of(preset: str) -> str:
  """bert_rab_mini -> bert_rab."""
  return preset.rsplit("_", 1)[0]


def display_name(preset: str) -> str:
  return DISPLAY_NAMES.get(family_of(preset), preset)


def last_n(num_steps: int) -> int:
  """How many final steps the 'final loss' averages: 10% of the run, 1 to 50."""
  return max(1, min(50, num_steps // 10))


def final_loss(records: Dict[int, Dict], key: str = "mlm_loss") -> float:
  steps = sorted(records)
  if not steps:
    return float("nan")
  tail = steps[-last_n(len(steps)) :]
  return sum(float(records[s][key]) for s in tail) / len(tail)


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


def step_time(train_dir: str) -> Tuple[float, int, bool]:
  """Seconds per training step from the loop's `steps_per_second` TensorBoard scalars.

  Each log interval records steps/second of its own steps (wall time of the training
  calls; logging and checkpoints outside). The first interval of every process (events
  file) includes tf.function tracing and is left out, unless nothing else is there. The
  median over the intervals is returned: a burst of other work on the machine moves it
  less than the mean.

  Returns:
    (seconds per step, steps measured, whether tracing had to be included).
  """
  # TensorFlow only here: the demo's driver imports this module for its names.
  import tensorflow as tf
  from tensorflow.core.util import event_pb2

  measured: List[float] = []
  first_intervals: List[float] = []
  steps_measured = 0
  for path in sorted(glob.glob(os.path.join(train_dir, "events.out.tfevents.*"))):
    points = []
    for record in tf.data.TFRecordDataset(path):
      event = event_pb2.Event.FromString(record.numpy())
      for value in event.summary.value:
        if value.tag == "steps_per_second":
          points.append((event.step, float(tf.make_ndarray(value.tensor))))
    points = [(step, rate) for step, rate in sorted(points) if rate > 0]
    if points:
      first_intervals.append(1.0 / points[0][1])
    for (previous, _), (step, rate) in zip(points, points[1:]):
      measured.append(1.0 / rate)
      steps_measured += step - previous
  if measured:
    return statistics.median(measured), steps_measured, False
  if first_intervals:
    return statistics.median(first_intervals), 0, True
  return float("nan"), 0, True


def count_parameters(model_config_file: str) -> int:
  """The encoder's parameters (embeddings, blocks, pooler) of a model_config.json."""
  # The models (hence TensorFlow) only here: the driver imports this module too.
  from recurrent_bert.models import count_parameters as count

  total, _ = count(config.ModelConfig.from_file(model_config_file))
  return int(total)


def mean_std(values: Sequence[float]) -> Tuple[float, float]:
  values = [v for v in values if v is not None]
  if not values:
    return float("nan"), float("nan")
  return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def _pm(values: Sequence[float]) -> str:
  mean, std = mean_std(values)
  if not math.isfinite(mean):
    return "n/a"
  return f"{mean:.3f} ± {std:.3f}" if len(values) > 1 else f"{mean:.3f}"


def plot_losses(curves: Dict[str, Dict[int, float]], path: str, title: str) -> None:
  """All models' MLM training loss in one figure: raw (faint) and smoothed."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
  for i, (label, points) in enumerate(curves.items()):
    steps = sorted(points)
    values = [points[s] for s in steps]
    color = f"C{i}"
    window = max(1, len(steps) // 25) | 1
    ax.plot(steps, values, color=color, alpha=0.15, linewidth=0.8)
    ax.plot(steps, smooth(values, window), color=color, linewidth=2.0, label=label)
  ax.set_xlabel("training step")
  ax.set_ylabel("masked-LM loss")
  ax.set_title(title, fontsize=10)
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  with io_utils.atomic_write(path, "wb") as f:
    fig.savefig(f, format="png")
  plt.close(fig)


def copy_tensorboard(source: str, target: str) -> bool:
  if not os.path.isdir(source):
    return False
  if os.path.isdir(target):
    shutil.rmtree(target)
  shutil.copytree(source, target)
  return True


def write_report(inputs: Dict) -> Dict:
  """Writes the report folder; returns its paths (and the results table).

  `inputs` (written by the demo as report/inputs.json): "settings" (the demo's Settings
  as a dict), "results" ({stage name: result}), "timings" ([{stage, status, seconds,
  cpu_seconds}]), "pretrain_dirs" ({preset: dir}), "finetune_dirs" ({preset: {seed:
  dir}}), "out_dir".
  """
  s = inputs["settings"]
  results = inputs["results"]
  out_dir = inputs["out_dir"]
  presets, seeds = s["presets"], s["finetune_seeds"]
  os.makedirs(out_dir, exist_ok=True)
  rows = []
  curves = {}
  for preset in presets:
    model_dir = inputs["pretrain_dirs"][preset]
    records = io_utils.read_metrics_log(model_dir)
    seconds, measured, with_tracing = step_time(os.path.join(model_dir, "train"))
    runs = [results[f"finetune:{preset}:seed{seed}"] for seed in seeds]
    ft_steps = [r.get("seconds_per_train_step") for r in runs]
    ft_steps = [v for v in ft_steps if v is not None and math.isfinite(v)]
    rows.append(
        {
            "preset": preset,
            "model": display_name(preset),
            "family": family_of(preset),
            "parameters": count_parameters(os.path.join(model_dir, layout.MODEL_CONFIG_FILE)),
            "pretrain_seconds_per_step": seconds,
            "pretrain_steps_timed": measured,
            "step_time_includes_tracing": with_tracing,
            "pretrain_steps": max(records) if records else 0,
            "final_mlm_loss": final_loss(records, "mlm_loss"),
            "final_loss": final_loss(records, "loss"),
            "load_average": results[f"pretrain:{preset}"].get("load_average"),
            "pretrain_cores_used": _cores_used(inputs["timings"], f"pretrain:{preset}"),
            "dev_accuracy": [r["dev_accuracy"] for r in runs],
            "test_accuracy": [r["test_accuracy"] for r in runs],
            "seeds": list(seeds),
            "finetune_seconds_per_step": statistics.fmean(ft_steps) if ft_steps else None,
        }
    )
    curves[f"{display_name(preset)} ({preset})"] = {
        step: float(r["mlm_loss"]) for step, r in records.items()
    }
  reference = next((r for r in rows if r["family"] == "bert"), rows[0])
  for row in rows:
    row["step_time_ratio"] = (
        row["pretrain_seconds_per_step"] / reference["pretrain_seconds_per_step"]
    )
    ft_ref = reference["finetune_seconds_per_step"]
    row["finetune_step_time_ratio"] = (
        row["finetune_seconds_per_step"] / ft_ref
        if ft_ref and row["finetune_seconds_per_step"]
        else None
    )

  png = os.path.join(out_dir, "mlm_loss.png")
  plot_losses(
      curves,
      png,
      f"MLM training loss: {s['size']} models, the same data, "
      f"{s['pretrain_steps']} steps x {s['batch_size']} x {s['seq_length']} tokens\n"
      f"(faint: every step; bold: centred moving average of "
      f"{max(1, s['pretrain_steps'] // 25) | 1} steps)",
  )

  tensorboard_dir = os.path.join(out_dir, "tensorboard")
  for preset in presets:
    copy_tensorboard(
        os.path.join(inputs["pretrain_dirs"][preset], "train"),
        os.path.join(tensorboard_dir, preset, "pretrain", "train"),
    )
    for seed in seeds:
      for part in ("train", "eval"):
        copy_tensorboard(
            os.path.join(inputs["finetune_dirs"][preset][str(seed)], part),
            os.path.join(tensorboard_dir, preset, f"finetune_seed{seed}", part),
        )

  table = results_table(rows)
  lines = _report_lines(inputs, rows, reference, table, tensorboard_dir)
  report_md = os.path.join(out_dir, "report.md")
  io_utils.atomic_write_text(report_md, "\n".join(lines))
  results_json = os.path.join(out_dir, "results.json")
  io_utils.atomic_write_json(
      results_json,
      {
          "models": rows,
          "reference": reference["preset"],
          "export": results.get("export", {}),
          "answers": results.get("query", {}).get("answers", []),
          "task": results.get("task", {}),
          "stage_timings": inputs["timings"],
          "settings": s,
      },
  )
  return {
      "report_md": report_md,
      "mlm_loss_png": png,
      "tensorboard_dir": tensorboard_dir,
      "results_json": results_json,
      "table": table,
  }


def _report_lines(
    inputs: Dict, rows: List[Dict], reference: Dict, table: str, tensorboard_dir: str
) -> List[str]:
  s = inputs["settings"]
  results = inputs["results"]
  work_dir = s["work_dir"]
  export = results.get("export", {})
  answers = results.get("query", {}).get("answers", [])
  corpus = results.get("corpus", {})
  data = results.get("pretrain_data", {})
  task = results.get("task", {})
  classes = task.get("classes", [])
  vocab = results.get("vocab", {})
  n_last = last_n(s["pretrain_steps"])
  log_steps = max(1, s["pretrain_steps"] // 15)
  splits = corpus.get("splits", {})
  seeds = s["finetune_seeds"]
  source = (
      "the built-in corpus: docstrings of the installed Python (standard library "
      "and packages), one module per document, labelled with its library"
      if corpus.get("builtin")
      else "your files (" + ", ".join(s["input_files"]) + "), each document labelled "
      "with its file"
  )
  lines = [
      "# recurrent_bert demo report",
      "",
      f"{datetime.datetime.now():%Y-%m-%d %H:%M}, {platform.node() or 'this machine'}: "
      f"{os.cpu_count()} CPU cores, Python {platform.python_version()}. "
      f"Work dir `{work_dir}`.",
      "",
      "## Setup",
      "",
      f"- **Corpus**: {source}"
      + (f"; capped at ~{s['corpus_max_bytes'] / 1e6:.1f} MB" if s["corpus_max_bytes"] else "")
      + ". Documents split at random within each source: "
      + ", ".join(
          f"{k} {v['documents']:,} documents ({v['bytes'] / 1e6:.2f} MB)" for k, v in splits.items()
      )
      + ". Dev and test documents are used nowhere in training (neither pretraining nor "
      "fine-tuning).",
      f"- **Vocabulary**: {vocab.get('tokens', s['vocab_size'])} WordPiece tokens, "
      "uncased, learned from the train documents"
      + (f" (first {s['vocab_max_lines']:,} lines)" if s["vocab_max_lines"] else "")
      + ".",
      f"- **Pretraining**: MLM + NSP, BERT's recipe (15% of tokens masked, 80/10/10), "
      f"{data.get('instances', 0):,} sequences of {s['seq_length']} tokens (dupe factor "
      f"{s['dupe_factor']}). Every model reads the same records in the same order: "
      f"{s['pretrain_steps']} steps of {s['batch_size']} sequences "
      f"({s['pretrain_steps'] * s['batch_size'] * s['seq_length']:,} token positions, "
      f"{data.get('epochs', float('nan')):.2f} epochs); AdamW, peak learning rate "
      f"{s['learning_rate']:g}, {s['warmup_steps']} warmup steps, linear decay.",
      f"- **Fine-tuning task**: which {'library' if corpus.get('builtin') else 'file'} "
      f"does a passage (consecutive sentences, 20-40 words) come from? {len(classes)} "
      f"classes ({', '.join(classes)}), balanced, so chance is {1 / max(1, len(classes)):.3f}; "
      + ", ".join(
          f"{k} {v['examples']:,} passages from {v['documents']:,} documents"
          for k, v in task.get("splits", {}).items()
      )
      + ". The test labels are kept apart (`task/test_labels.tsv`): fine-tuning only "
      f"writes test predictions. {len(seeds)} seed(s) per model "
      f"({', '.join(map(str, seeds))}): {s['finetune_steps']} steps of "
      f"{s['finetune_batch_size']}, peak learning rate {s['finetune_learning_rate']:g}; "
      "the model evaluated is the one at the end of training.",
      "",
      "## Results",
      "",
      table,
      "",
      "How the columns were measured:",
      "",
      "- *parameters*: the encoder (embeddings, blocks, pooler; no MLM/NSP heads) as "
      "trained, with this vocabulary.",
      "- *pretrain s/step*: wall-clock seconds per training step from the training loop's "
      f"own timer (TensorBoard `steps_per_second`, one value per {log_steps} steps): the "
      "median over the intervals, the first interval of each process left out (it "
      "includes tf.function tracing). Models "
      "are pretrained one at a time" + _load_note(rows) + ". *CPU cores used*: CPU time "
      "over wall time of the pretraining process (about 1.7 on 2 idle cores; lower means "
      "the process had to share the CPU). *vs BERT*: the ratio to "
      f"{reference['model']} (`{reference['preset']}`).",
      f"- *final MLM loss*: the per-step masked-LM loss averaged over the last {n_last} "
      "steps (`metrics.jsonl`; NSP not included).",
      "- *dev / test accuracy*: mean ± sample standard deviation over the seeds; test "
      "accuracy from `predictions/test_predictions.tsv` against the held-out labels. "
      "*fine-tune s/step*: `seconds_per_train_step` of `eval_results.json` (tracing "
      "excluded), mean over seeds"
      + (
          f"; {s['jobs']} fine-tuning runs shared the CPU at "
          "a time, so these are slower and noisier than the "
          "pretraining times"
          if s.get("jobs", 1) > 1
          else ""
      )
      + ".",
      "",
      "![MLM training loss](mlm_loss.png)",
      "",
      "`mlm_loss.png`: the MLM training loss of every model (as in Figure 3 of the "
      "TRANS-BLSTM paper and Figure 4 of the SwishRNN paper).",
      "",
      "## Per-seed fine-tuning results",
      "",
      "| model | seed | dev accuracy | test accuracy |",
      "|---|---|---:|---:|",
  ]
  for row in rows:
    for seed, dev, test in zip(row["seeds"], row["dev_accuracy"], row["test_accuracy"]):
      lines.append(f"| {row['model']} | {seed} | {dev:.3f} | {test:.3f} |")
  lines += ["", "## Exported model and query", ""]
  if export:
    lines.append(
        f"Best run by dev accuracy: {display_name(export['preset'])} "
        f"(`{export['preset']}`), seed {export['seed']}: dev "
        f"{export['dev_accuracy']:.3f}, test {export['test_accuracy']:.3f}. "
        f"SavedModel: `{export['export_dir']}` (raw text in; signatures "
        "`classify`, `classify_pair`, `encode`, ...)."
    )
    lines.append("")
  for a in answers:
    lines.append(
        f"- `classify(text={a['text']!r})` → **{a['label']}** (probability "
        f"{a['probability']:.2f})" + (f"; truth: {a['truth']}" if a.get("truth") else "")
    )
  lines += [
      "",
      "Answered in a fresh process that imports only `tensorflow` and `tensorflow_text`.",
      "",
      "## Stage timings",
      "",
      "Wall time on this machine; cpu = user + sys time of the stage's processes. "
      "Reused stages show the time of the run that made them.",
      "",
      "| stage | status | wall | cpu |",
      "|---|---|---:|---:|",
  ]
  for t in inputs["timings"]:
    cpu = t.get("cpu_seconds")
    lines.append(
        f"| {t['stage']} | {t['status']} | {jobs.format_duration(t['seconds'])} | "
        + (jobs.format_duration(cpu) if cpu is not None else "")
        + " |"
    )
  lines += [
      "",
      "## Files",
      "",
      f"- TensorBoard: `tensorboard --logdir {tensorboard_dir}` "
      "(`<preset>/pretrain/train`, `<preset>/finetune_seed<N>/{train,eval}`).",
      f"- Model dirs: `{work_dir}/pretrain/<preset>` (checkpoints, `metrics.jsonl`, "
      f"`encoder/` export), `{work_dir}/finetune/<preset>/seed<N>`.",
      f"- Logs of every stage: `{work_dir}/logs/`; machine-readable results: "
      "`results.json` beside this file.",
      "",
  ]
  return lines


def _cores_used(timings: List[Dict], stage: str) -> Optional[float]:
  """CPU seconds / wall seconds of a stage's process: how much CPU it actually got."""
  for t in timings:
    if t["stage"] == stage and t.get("cpu_seconds") and t.get("seconds"):
      return t["cpu_seconds"] / t["seconds"]
  return None


def contended(rows: List[Dict]) -> List[str]:
  """Presets whose pretraining got clearly less CPU than the others (a busy machine)."""
  used = {r["preset"]: r.get("pretrain_cores_used") for r in rows}
  known = [u for u in used.values() if u]
  if len(known) < 2:
    return []
  best = max(known)
  return [p for p, u in used.items() if u and u < 0.8 * best]


def _load_note(rows: List[Dict]) -> str:
  loads = [r["load_average"] for r in rows if r.get("load_average") is not None]
  if not loads:
    return ""
  return (
      f"; the 5-minute load average at the end of each was {min(loads):.1f} to "
      f"{max(loads):.1f} on {os.cpu_count()} cores (TensorFlow's own threads count "
      "too; *CPU cores used* tells whether a model got its share)"
  )


def results_table(rows: List[Dict]) -> str:
  busy = contended(rows)
  lines = [
      "| model | preset | parameters | pretrain s/step | vs BERT | CPU cores used | "
      "final MLM loss | dev accuracy | test accuracy | fine-tune s/step |",
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
  ]
  for r in rows:
    step = r["pretrain_seconds_per_step"]
    mark = ("*" if r["step_time_includes_tracing"] else "") + ("†" if r["preset"] in busy else "")
    ft = r["finetune_seconds_per_step"]
    cores = r.get("pretrain_cores_used")
    lines.append(
        f"| {r['model']} | `{r['preset']}` | {r['parameters'] / 1e6:.2f}M | "
        f"{step:.3f}{mark} | {r['step_time_ratio']:.2f}x | "
        + (f"{cores:.2f}" if cores else "n/a")
        + f" | {r['final_mlm_loss']:.3f} | "
        f"{_pm(r['dev_accuracy'])} | {_pm(r['test_accuracy'])} | "
        + (f"{ft:.3f}" if ft else "n/a")
        + " |"
    )
  if any(r["step_time_includes_tracing"] for r in rows):
    lines += ["", "\\* too few log intervals to leave out the first: includes tracing."]
  if busy:
    lines += [
        "",
        "† this model's pretraining got clearly less CPU than the others' "
        "(CPU cores used < 80% of the best): other work was running on the machine "
        "and its step time, and the ratios against it, are inflated. Re-run the demo "
        "on a quiet machine for clean ratios.",
    ]
  return "\n".join(lines)


def main(argv):
  if len(argv) != 2:
    raise SystemExit("usage: python -m recurrent_bert.demo.report <report inputs.json>")
  with open(argv[1], encoding="utf-8") as f:
    inputs = json.load(f)
  paths = write_report(inputs)
  io_utils.atomic_write_json(os.path.join(inputs["out_dir"], "paths.json"), paths)
  print(f"wrote {paths['report_md']}, {paths['mlm_loss_png']}, {paths['tensorboard_dir']}")


if __name__ == "__main__":
  main(sys.argv)
