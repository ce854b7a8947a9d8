"""The demo's report folder: report.md (the papers' claims checked), mlm_loss.png,
stability.png, tensorboard/, results.json.

  python -m recurrent_bert.demo.report <work_dir>/report/inputs.json

Run by the demo's report stage in its own process (it imports TensorFlow and matplotlib,
which the demo's driver never does). Reads only what the entry points wrote:
metrics.jsonl (per-step and held-out losses), the TensorBoard event files (the training
loop's own step timer), the pretraining runs' eval_results.json, the fine-tuning sweep's
runs (through the demo's stage results), model_config.json (parameter
counts), through run_results.py.
"""

import datetime
import json
import os
import platform
import shutil
import statistics
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from recurrent_bert import io_utils
from recurrent_bert import progress
from recurrent_bert.demo import claims
from recurrent_bert.demo import claims_report
from recurrent_bert.demo import figures
from recurrent_bert.demo import plateau
from recurrent_bert.demo import run_results
from recurrent_bert.demo import task_floor
from recurrent_bert.demo import tokenizer_report
from recurrent_bert.demo.run_results import plus_minus

FLOOR_NAMES = {"majority": "majority class", "bag_of_words": "bag-of-words logistic regression"}


def copy_tensorboard(source: str, target: str) -> bool:
  if not os.path.isdir(source):
    return False
  if os.path.isdir(target):
    shutil.rmtree(target)
  shutil.copytree(source, target)
  return True


def task_title(inputs: Dict) -> str:
  """The fine-tuning task in words, e.g. "Which library is a passage from? 4 classes ..."."""
  s, results = inputs["settings"], inputs["results"]
  unit = "library" if results.get("corpus", {}).get("builtin") else "file"
  classes = results.get("task", {}).get("classes", [])
  return (
      f"Which {unit} is a passage from? {len(classes)} classes ({', '.join(classes)})\n"
      f"dev passages of held-out documents; {s['finetune_steps']} fine-tuning steps of "
      f"{s['finetune_batch_size']} from each model's pretrained encoder"
  )


def write_report(inputs: Dict) -> Dict:
  """Writes the report folder; returns its paths (and the results table).

  `inputs` (written by the demo as report/inputs.json): "settings" (the demo's Settings
  as a dict), "results" ({stage name: result}; "finetune" holds every fine-tuning run),
  "timings" ([{stage, status, seconds, cpu_seconds}]), "pretrain_dirs" ({preset: {seed:
  dir}}), "out_dir", "eval_every_steps" (of the held-out evaluations), "train_data" and
  "eval_data" (the training and held-out records, glob patterns), "task_dir" (the
  fine-tuning task's folder).
  """
  s = inputs["settings"]
  results = inputs["results"]
  out_dir = inputs["out_dir"]
  os.makedirs(out_dir, exist_ok=True)
  rows = [run_results.model_row(inputs, preset) for preset in s["presets"]]
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

  unigram = plateau.held_out_unigram(inputs)
  plateau.flag_rows(rows, unigram[0])
  floors = task_floor.task_floors(inputs["task_dir"])

  png = figures.plot_mlm_figure(rows, s, out_dir)
  stability_png = os.path.join(out_dir, "stability.png")
  figures.plot_stability(rows, stability_png, task_title(inputs))

  finetune_runs = results["finetune"]["runs"]
  ft_stage = next((t for t in inputs["timings"] if t["stage"] == "finetune"), None)
  run_seconds = ft_stage["seconds"] / len(finetune_runs) if ft_stage else float("nan")
  checked = claims.paper_claims(
      rows, {r["preset"]: r["pretrain_seconds"] for r in rows}, run_seconds
  )

  tensorboard_dir = os.path.join(out_dir, "tensorboard")
  for preset, by_seed in inputs["pretrain_dirs"].items():
    for seed, model_dir in by_seed.items():
      for part in ("train", "eval"):
        copy_tensorboard(
            os.path.join(model_dir, part),
            os.path.join(tensorboard_dir, preset, f"pretrain_seed{seed}", part),
        )
  for run in finetune_runs:
    for part in ("train", "eval"):
      copy_tensorboard(
          os.path.join(run["model_dir"], part),
          os.path.join(
              tensorboard_dir,
              run["preset"],
              f"finetune_lr{run['learning_rate']:g}_seed{run['seed']}",
              part,
          ),
      )

  table = results_table(rows, floors)
  lines = _report_lines(inputs, rows, reference, table, checked, tensorboard_dir, unigram)
  tokenizers = None
  if inputs.get("tokenizers"):
    # --tokenizers: the comparison's section, after the main runs' tables.
    seconds = [
        run_results.stage_seconds(inputs["timings"], f"tokenizer_finetune:{t}")
        / max(1, len(e["runs"]))
        for t, e in inputs["tokenizers"].items()
    ]
    tokenizers = tokenizer_report.write_section(inputs, statistics.fmean(seconds))
    at = lines.index("## Exported model and query")
    lines[at:at] = tokenizers["lines"]
  report_md = os.path.join(out_dir, "report.md")
  io_utils.atomic_write_text(report_md, "\n".join(lines))
  results_json = os.path.join(out_dir, "results.json")
  io_utils.atomic_write_json(
      results_json,
      {
          "models": [
              {k: v for k, v in r.items() if k not in ("train_curves", "by_learning_rate")}
              | {"by_learning_rate": {f"{lr:g}": v for lr, v in r["by_learning_rate"].items()}}
              for r in rows
          ],
          "claims": [claims_report.as_dict(c) for c in checked],
          "unigram_plateau_loss": unigram[0],
          "floors": floors,
          "reference": reference["preset"],
          "finetune_runs": finetune_runs,
          "export": results.get("export", {}),
          "answers": results.get("query", {}).get("answers", []),
          "task": results.get("task", {}),
          "stage_timings": inputs["timings"],
          "settings": s,
          **({"tokenizers": tokenizers["results"]} if tokenizers else {}),
      },
  )
  return {
      "report_md": report_md,
      "mlm_loss_png": png,
      "stability_png": stability_png,
      "tensorboard_dir": tensorboard_dir,
      "results_json": results_json,
      "table": table,
      "claims": [f"{c.verdict}: {c.statement}" for c in checked],
  }


def _report_lines(
    inputs: Dict,
    rows: List[Dict],
    reference: Dict,
    table: str,
    checked: Sequence,
    tensorboard_dir: str,
    unigram: Tuple[float, int],
) -> List[str]:
  s = inputs["settings"]
  results = inputs["results"]
  work_dir = s["work_dir"]
  export = results.get("export", {})
  answers = results.get("query", {}).get("answers", [])
  corpus = results.get("corpus", {})
  data = results.get("pretrain_data", {})
  eval_data = results.get("eval_data", {})
  task = results.get("task", {})
  classes = task.get("classes", [])
  vocab = results.get("vocab", {})
  n_last = run_results.last_n(s["pretrain_steps"])
  log_steps = max(1, s["pretrain_steps"] // 15)
  splits = corpus.get("splits", {})
  pretrain_seeds, seeds, lrs = (
      s["pretrain_seeds"],
      s["finetune_seeds"],
      s["finetune_learning_rates"],
  )
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
      "## The papers' claims at this budget",
      "",
      *claims_report.claims_section(checked, s),
      "",
      plateau.describe_rule(*unigram),
      "",
      "Small models on a small corpus for a few hundred steps are not the papers' setting "
      "(base and large models, Wikipedia + BookCorpus, hundreds of thousands of steps, "
      "GLUE and SQuAD): a claim reproduced here is the same effect at this scale, one not "
      "reproduced is evidence only about this scale.",
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
      f"{s['dupe_factor']}). Every model, for each pretraining seed "
      f"({', '.join(map(str, pretrain_seeds))}; the seed sets the initial weights and the "
      "record order, the same order for every model): "
      f"{s['pretrain_steps']} steps of {s['batch_size']} sequences "
      f"({s['pretrain_steps'] * s['batch_size'] * s['seq_length']:,} token positions, "
      f"{data.get('epochs', float('nan')):.2f} epochs); AdamW, peak learning rate "
      f"{s['learning_rate']:g}, {s['warmup_steps']} warmup steps, linear decay. Held out: "
      f"{eval_data.get('read_per_evaluation', 0):,} sequences of the dev documents (masks "
      "drawn once, the same for every model), evaluated every "
      f"{inputs['eval_every_steps']} steps and after the last.",
      f"- **Fine-tuning task**: which {'library' if corpus.get('builtin') else 'file'} "
      f"does a passage (consecutive sentences, 20-40 words) come from? {len(classes)} "
      f"classes ({', '.join(classes)}), balanced, so chance is {1 / max(1, len(classes)):.3f}; "
      + ", ".join(
          f"{k} {v['examples']:,} passages from {v['documents']:,} documents"
          for k, v in task.get("splits", {}).items()
      )
      + ". The test labels are kept apart (`task/test_labels.tsv`): fine-tuning only "
      "writes test predictions. Every model (from its first pretraining seed's encoder) "
      f"at each learning rate ({', '.join(f'{lr:g}' for lr in lrs)}) and seed "
      f"({', '.join(map(str, seeds))}): {s['finetune_steps']} steps of "
      f"{s['finetune_batch_size']}, run by `rbert-sweep` ({s.get('jobs', 1)} at a time).",
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
      "median over the intervals (the first interval of each process left out: it "
      "includes tf.function tracing), then over the seeds. "
      + _pretraining_sharing(s)
      + _load_note(rows)
      + ". *CPU cores used*: CPU time over wall time of the pretraining processes (the "
      "lowest over seeds; lower than its share of the cores means the process had to "
      "share the CPU with other work). *vs BERT*: the ratio to "
      f"{reference['model']} (`{reference['preset']}`).",
      f"- *training MLM loss*: the per-step masked-LM loss averaged over the last {n_last} "
      "steps (`metrics.jsonl`; NSP not included); *held-out MLM loss*: on the held-out "
      "records at the last step (`eval_results.json`); both mean ± std over the "
      "pretraining seeds.",
      "- *best lr*: the learning rate of the highest mean dev accuracy; *dev / test "
      "accuracy*: at that learning rate, mean ± sample std over the fine-tuning seeds; "
      "test accuracy from `predictions/test_predictions.tsv` against the held-out labels. "
      "*fine-tune s/step*: `seconds_per_train_step` of `eval_results.json` (tracing "
      "excluded), mean over the runs"
      + (
          f"; fine-tuning ran {s['jobs']} runs at a time, each with its share of the cores"
          if s.get("jobs", 1) > 1
          else ""
      )
      + ".",
      "",
      "![MLM loss](mlm_loss.png)",
      "",
      "`mlm_loss.png`: the MLM loss of every model against the step, training (left) and "
      "held-out (right), as in Figure 3 of the TRANS-BLSTM paper and Figure 4 of the "
      "SwishRNN paper; the band spans the pretraining seeds.",
      "",
      "![Fine-tuning stability](stability.png)",
      "",
      "`stability.png`: dev accuracy against the fine-tuning learning rate, the mean over "
      "the fine-tuning seeds inside the band from the lowest to the highest, as in Figure 3 "
      "of the SwishRNN paper.",
      "",
      "## Fine-tuning at every learning rate",
      "",
      "| model | learning rate | dev accuracy | test accuracy |",
      "|---|---:|---:|---:|",
  ]
  for row in rows:
    for lr, entry in sorted(row["by_learning_rate"].items()):
      mark = " (best)" if lr == row["best_learning_rate"] else ""
      lines.append(
          f"| {row['model']} | {lr:g}{mark} | {plus_minus(entry['dev'])} "
          f"| {plus_minus(entry['test'])} |"
      )
  lines += [
      "",
      "## Pretraining seeds",
      "",
      "| model | seed | training MLM loss | held-out MLM loss | held-out MLM accuracy | flag |",
      "|---|---:|---:|---:|---:|---|",
  ]
  for row in rows:
    for seed, train, held, accuracy, flag in zip(
        row["pretrain_seeds"],
        row["final_mlm_loss"],
        row["eval_mlm_loss"],
        row["eval_mlm_accuracy"],
        row["plateau_flags"],
    ):
      lines.append(
          f"| {row['model']} | {seed} | {train:.3f} | {held:.3f} | {accuracy:.3f} | "
          f"{flag or '—'} |"
      )
  lines += [
      "",
      f"*flag*: where the run ended against the unigram plateau, U = {unigram[0]:.3f} nats "
      "(the rule is under the claims above).",
  ]
  lines += ["", "## Exported model and query", ""]
  if export:
    lines.append(
        f"Best run by dev accuracy: {run_results.display_name(export['preset'])} "
        f"(`{export['preset']}`), learning rate {export['learning_rate']:g}, seed "
        f"{export['seed']}: dev {export['dev_accuracy']:.3f}, test "
        f"{export['test_accuracy']:.3f}. SavedModel: `{export['export_dir']}` (raw text in; "
        "signatures `classify`, `classify_pair`, `encode`, ...)."
    )
    lines.append("")
  if answers and answers[0].get("shown_as"):
    lines += [
        "Three held-out test passages, chosen by the exported run's own test predictions: "
        "its most confident answer, its most confident wrong one (if any) and its least "
        "confident one.",
        "",
    ]
  for a in answers:
    verdict = ""
    if a.get("truth"):
      verdict = f"; truth: {a['truth']}, " + ("right" if a["label"] == a["truth"] else "wrong")
    lines.append(
        (f"- *{a['shown_as']}*: " if a.get("shown_as") else "- ")
        + f"`classify(text={a['text']!r})` → **{a['label']}** (probability "
        f"{a['probability']:.2f}){verdict}"
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
        f"| {t['stage']} | {t['status']} | {progress.format_duration(t['seconds'])} | "
        + (progress.format_duration(cpu) if cpu is not None else "")
        + " |"
    )
  lines += [
      "",
      "## Files",
      "",
      f"- TensorBoard: `tensorboard --logdir {tensorboard_dir}` "
      "(`<preset>/pretrain_seed<N>/{train,eval}`, "
      "`<preset>/finetune_lr<LR>_seed<N>/{train,eval}`).",
      f"- Model dirs: `{work_dir}/pretrain/<preset>/seed<N>` (checkpoints, `metrics.jsonl`, "
      f"`eval_results.json`, `encoder/` export); the fine-tuning sweep in `{work_dir}/finetune` "
      "(`results.csv`, `summary.md`, `runs/<preset>/custom/lr<LR>_seed<N>`).",
      f"- Logs of every stage: `{work_dir}/logs/`; machine-readable results (claims "
      "included): `results.json` beside this file.",
      "",
  ]
  return lines


def contended(rows: List[Dict]) -> List[str]:
  """Presets whose pretraining got clearly less CPU than the others (a busy machine)."""
  used = {r["preset"]: r.get("pretrain_cores_used") for r in rows}
  known = [u for u in used.values() if u]
  if len(known) < 2:
    return []
  best = max(known)
  return [p for p, u in used.items() if u and u < 0.8 * best]


def _pretraining_sharing(settings: Dict) -> str:
  """How the pretraining runs shared the machine, for the step-time column's note."""
  runs_at_once = settings.get("jobs", 1)
  if settings.get("parallel_pretraining") and runs_at_once > 1:
    return (
        f"Pretraining ran {runs_at_once} runs at a time, each with 1/{runs_at_once} of the "
        "cores (TF_NUM_INTRAOP_THREADS, unless the environment set it), so a step time is a "
        "run's own under that sharing"
    )
  return "Pretraining ran one run at a time"


def _load_note(rows: List[Dict]) -> str:
  loads = [r["load_average"] for r in rows if r.get("load_average") is not None]
  if not loads:
    return ""
  return (
      f"; the 5-minute load average at the end of each was {min(loads):.1f} to "
      f"{max(loads):.1f} on {os.cpu_count()} cores (TensorFlow's own threads count "
      "too; *CPU cores used* tells whether a model got its share)"
  )


def results_table(rows: List[Dict], floors: Optional[Dict] = None) -> str:
  """The results table, one row per model, then the task's floors (`task_floor`)."""
  busy = contended(rows)
  lines = [
      "| model | preset | parameters | pretrain s/step | vs BERT | CPU cores used | "
      "training MLM loss | held-out MLM loss | best lr | dev accuracy | test accuracy | "
      "fine-tune s/step |",
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
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
        + f" | {plus_minus(r['final_mlm_loss'])} | {plus_minus(r['eval_mlm_loss'])} | "
        f"{r['best_learning_rate']:g} | {plus_minus(r['dev_accuracy'])} | "
        f"{plus_minus(r['test_accuracy'])} | " + (f"{ft:.3f}" if ft else "n/a") + " |"
    )
  for name, floor in (floors or {}).items():
    lines.append(
        f"| *floor: {FLOOR_NAMES[name]}* | — | — | — | — | — | — | — | — | "
        f"{floor['dev']:.3f} | {floor['test']:.3f} | — |"
    )
  if floors:
    lines += [
        "",
        "*floor*: the same task without a pretrained encoder, on the same train / dev / "
        f"test passages: {task_floor.describe(floors)}. A model that does not beat the "
        "bag of words has not shown that its pretraining helps this task.",
    ]
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
