"""One demo run's results as the report reads them: the models' display names, final and
held-out losses, step times from the TensorBoard scalars, parameter counts, and the
pretraining row of a preset (its seeds' numbers together).

Reads only what the entry points wrote (metrics.jsonl, events files, eval_results.json,
model_config.json). The demo's progress lines use the display names too.
"""

import glob
import json
import math
import os
import statistics
from typing import Dict, List, Optional, Sequence, Tuple

from recurrent_bert import config
from recurrent_bert import io_utils
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
  try:
    import tensorflow as tf
    from tensorflow.core.util import event_pb2
  except ImportError:  # a JAX run on a machine without TensorFlow wrote no events
    return float("nan"), 0, True

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


def plus_minus(values: Sequence[float]) -> str:
  mean, std = mean_std(values)
  if not math.isfinite(mean):
    return "n/a"
  return f"{mean:.3f} ± {std:.3f}" if len(values) > 1 else f"{mean:.3f}"


def pretraining_row(inputs: Dict, preset: str) -> Dict:
  """One model's pretraining numbers over its seeds (what --pretraining_only reports)."""
  s, results, timings = inputs["settings"], inputs["results"], inputs["timings"]
  seeds = s["pretrain_seeds"]
  dirs = [inputs["pretrain_dirs"][preset][str(seed)] for seed in seeds]
  records = [io_utils.read_metrics_log(d) for d in dirs]
  held_out = [eval_results(d) for d in dirs]
  timed = [step_time(os.path.join(d, "train")) for d in dirs]
  stages = [f"pretrain:{preset}:seed{seed}" for seed in seeds]
  cores = [cores_used(timings, stage) for stage in stages]
  cores = [c for c in cores if c]
  return {
      "preset": preset,
      "model": display_name(preset),
      "family": family_of(preset),
      "parameters": count_parameters(os.path.join(dirs[0], layout.MODEL_CONFIG_FILE)),
      "pretrain_seeds": list(seeds),
      # The median over seeds of each run's median interval.
      "pretrain_seconds_per_step": statistics.median(t[0] for t in timed),
      "pretrain_steps_timed": sum(t[1] for t in timed),
      "step_time_includes_tracing": any(t[2] for t in timed),
      "pretrain_steps": max(records[0]) if records[0] else 0,
      "pretrain_seconds": statistics.fmean(stage_seconds(timings, st) for st in stages),
      "final_mlm_loss": [final_loss(r, "mlm_loss") for r in records],
      "eval_mlm_loss": [h["eval"]["mlm_loss"] for h in held_out],
      "eval_mlm_accuracy": [h["eval"]["mlm_accuracy"] for h in held_out],
      "eval_step": held_out[0]["global_step"],
      "train_curves": {
          seed: {step: float(r["mlm_loss"]) for step, r in rec.items() if "mlm_loss" in r}
          for seed, rec in zip(seeds, records)
      },
      "eval_curves": {
          seed: {step: float(r["eval/mlm_loss"]) for step, r in rec.items() if "eval/mlm_loss" in r}
          for seed, rec in zip(seeds, records)
      },
      "load_average": statistics.fmean(results[st].get("load_average") or 0.0 for st in stages),
      "pretrain_cores_used": min(cores) if cores else None,
  }


def model_row(inputs: Dict, preset: str) -> Dict:
  """One model's numbers: pretraining over its seeds, fine-tuning over lr x seed."""
  runs = [r for r in inputs["results"]["finetune"]["runs"] if r["preset"] == preset]
  by_lr = {}
  for run in runs:
    entry = by_lr.setdefault(run["learning_rate"], {"dev": [], "test": [], "seeds": []})
    entry["dev"].append(run["dev_accuracy"])
    entry["test"].append(run["test_accuracy"])
    entry["seeds"].append(run["seed"])
  best_lr = max(by_lr, key=lambda lr: statistics.fmean(by_lr[lr]["dev"]))
  ft_steps = [r["seconds_per_train_step"] for r in runs]
  ft_steps = [v for v in ft_steps if v is not None and math.isfinite(v)]
  return {
      **pretraining_row(inputs, preset),
      "by_learning_rate": by_lr,
      "best_learning_rate": best_lr,
      "dev_accuracy": by_lr[best_lr]["dev"],
      "test_accuracy": by_lr[best_lr]["test"],
      "seeds": by_lr[best_lr]["seeds"],
      "finetune_seconds_per_step": statistics.fmean(ft_steps) if ft_steps else None,
  }


def eval_results(model_dir: str) -> Dict:
  with open(os.path.join(model_dir, layout.EVAL_RESULTS_FILE), encoding="utf-8") as f:
    return json.load(f)


def stage_seconds(timings: List[Dict], stage: str) -> float:
  return next((t["seconds"] for t in timings if t["stage"] == stage), float("nan"))


def cores_used(timings: List[Dict], stage: str) -> Optional[float]:
  """CPU seconds / wall seconds of a stage's process: how much CPU it actually got."""
  for t in timings:
    if t["stage"] == stage and t.get("cpu_seconds") and t.get("seconds"):
      return t["cpu_seconds"] / t["seconds"]
  return None
