"""The demo's model stages: their command lines, and how their results are read back.

Pretraining (recurrent_bert.pretrain, one run per model and pretraining seed), the
fine-tuning sweep (rbert-sweep), the export of the best fine-tuned model
(recurrent_bert.export), the query program (query_saved_model.py, by its path) and the
report (recurrent_bert.demo.report, or `pretraining_report` in this process). The later
stages read the results of the earlier ones, which the stage engine keeps.
"""

import csv
import dataclasses
import json
import os
import re
import shlex
import sys
from typing import Dict, List, Optional

from recurrent_bert import io_utils
from recurrent_bert import jobs
from recurrent_bert import model_dir as layout
from recurrent_bert.demo import origin_task
from recurrent_bert.demo import run_results
from recurrent_bert.demo.settings import Settings
from recurrent_bert.demo.stages import StageRunner
from recurrent_bert.demo.stages import say
from recurrent_bert.demo.work_paths import WORDPIECE
from recurrent_bert.demo.work_paths import WorkPaths

QUERY_PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "query_saved_model.py")

# The lines of each command's output that the demo echoes.
ECHO_PRETRAIN = re.compile(r"^step \d+/\d+|^eval step|resumed from|already at step|error|Error")
ECHO_SWEEP = re.compile(r"^\[ *\d+/\d+\]|^running \d+ of|^  end of|error|Error")
ECHO_EXPORT = re.compile(r"SavedModel written|^classify|^encode|error|Error")
ECHO_QUERY = re.compile(r".")
ECHO_REPORT = re.compile(r"^wrote|Error|error")


def under_backend(
    backend: str, module: str, *args: str, compilation_cache: Optional[str] = None
) -> List[str]:
  """`python -m module args` with KERAS_BACKEND=backend (through `env`, so the job log
  shows it).

  `compilation_cache`: under JAX, the folder of JAX's persistent compilation cache that
  the demo's JAX jobs share, so the seeds of a model compile its programs once (every
  program is kept: the small ones add up too).
  """
  cache = []
  if backend == "jax" and compilation_cache:
    cache = [
        f"JAX_COMPILATION_CACHE_DIR={compilation_cache}",
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0",
    ]
  return ["env", f"KERAS_BACKEND={backend}", *cache, *jobs.python_module(module, *args)]


class ModelStages(WorkPaths):
  """The commands and results of the pretraining, fine-tuning, export, query and report
  stages.

  Attributes:
    engine: the stage engine (markers, results, timings).
  """

  def __init__(self, settings: Settings):
    super().__init__(settings)
    self.engine = StageRunner(settings.work_dir, settings.jobs)

  @property
  def results(self) -> Dict[str, Dict]:
    """{stage name: its result}, of the stages finished or reused so far."""
    return self.engine.results

  # -- pretraining and fine-tuning ---------------------------------------------------

  def pretrain_command(self, preset: str, seed: int, tokenizer: Optional[str] = None) -> List[str]:
    """recurrent_bert.pretrain of one preset and seed on the records (the main ones, or a
    compared tokenizer's), evaluating the held-out ones as it goes."""
    s = self.s
    log_steps = max(1, s.pretrain_steps // 15)
    return under_backend(
        s.backend,
        "recurrent_bert.pretrain",
        f"--model_config={preset}",
        f"--input_files={os.path.join(self.data_dir('train', tokenizer), '*.tfrecord')}",
        f"--vocab_file={self.vocab_file(tokenizer)}",
        "--do_lower_case=true",
        f"--model_dir={self.pretrain_dir(preset, seed, tokenizer)}",
        f"--max_seq_length={s.seq_length}",
        f"--max_predictions_per_seq={s.max_predictions_per_seq}",
        f"--train_batch_size={s.batch_size}",
        f"--num_train_steps={s.pretrain_steps}",
        f"--learning_rate={s.learning_rate}",
        f"--warmup_steps={s.warmup_steps}",
        f"--adam_beta2={s.adam_beta2:g}",
        f"--adam_epsilon={s.adam_epsilon:g}",
        f"--clip_norm={s.clip_norm:g}",
        f"--log_steps={log_steps}",
        f"--steps_per_loop={log_steps}",
        f"--save_checkpoints_steps={max(log_steps, s.pretrain_steps // 4)}",
        "--keep_checkpoint_max=2",
        f"--seed={seed}",
        f"--eval_input_files={os.path.join(self.data_dir('dev', tokenizer), '*.tfrecord')}",
        "--eval_batch_size=64",
        f"--max_eval_steps={self._eval_batches()}",
        f"--eval_every_steps={self.eval_every_steps}",
        compilation_cache=self.compilation_cache,
    )

  def pretrain_result(self, preset: str, seed: int, tokenizer: Optional[str] = None) -> Dict:
    """The final training and held-out MLM losses; the encoder export must be there."""
    model_dir = self.pretrain_dir(preset, seed, tokenizer)
    if not os.path.isfile(os.path.join(model_dir, layout.EXPORT_DIR, layout.EXPORT_INFO_FILE)):
      raise ValueError(f"no encoder export in {model_dir}")
    with open(os.path.join(model_dir, layout.EVAL_RESULTS_FILE), encoding="utf-8") as f:
      held_out = json.load(f)
    losses = io_utils.read_metrics_log(model_dir)
    final = run_results.final_loss(losses, "mlm_loss")
    eval_loss = held_out["eval"]["mlm_loss"]
    return {
        "model_dir": model_dir,
        "steps": max(losses) if losses else 0,
        "final_mlm_loss": final,
        "eval_mlm_loss": eval_loss,
        "eval_step": held_out["global_step"],
        "load_average": os.getloadavg()[1],
        "summary": f"MLM loss {final:.3f} (mean of the last "
        f"{run_results.last_n(len(losses))} steps), held-out {eval_loss:.3f}",
    }

  def sweep_command(self, tokenizer: Optional[str] = None) -> List[str]:
    """rbert-sweep: finetune_glue --task=custom for every preset x learning rate x seed,
    each from the preset's pretrained encoder (or the runs of a compared tokenizer's
    `finetune_grid`, from its encoder, which carries its vocabulary)."""
    s = self.s
    grid = self.finetune_grid(tokenizer)
    presets = list(dict.fromkeys(p for p, _, _ in grid))
    rates = list(dict.fromkeys(lr for _, lr, _ in grid))
    log_steps = max(1, s.finetune_steps // 5)
    run_flags = [
        f"--max_seq_length={s.seq_length}",
        f"--train_batch_size={s.finetune_batch_size}",
        "--eval_batch_size=64",
        f"--max_train_steps={s.finetune_steps}",
        "--warmup_proportion=0.1",
        f"--log_steps={log_steps}",
        f"--steps_per_loop={log_steps}",
        f"--save_checkpoints_steps={max(log_steps, s.finetune_steps // 2)}",
        "--keep_checkpoint_max=1",
        "--shuffle_buffer_size=10000",
    ]
    # The sweep's fine-tuning runs inherit its KERAS_BACKEND.
    return under_backend(
        s.backend,
        "recurrent_bert.tools.sweep",
        "--models=" + ",".join(f"{p}={self.encoder_dir(p, tokenizer)}" for p in presets),
        f"--tasks=custom={s.path('task')}",
        "--learning_rates=" + ",".join(repr(lr) for lr in rates),
        "--seeds=" + ",".join(str(seed) for seed in s.finetune_seeds),
        f"--output_dir={self.finetune_dir(tokenizer)}",
        f"--parallel={s.jobs}",
        f"--entry_flags={shlex.join(run_flags)}",
        compilation_cache=self.compilation_cache,
    )

  def sweep_result(self, tokenizer: Optional[str] = None) -> Dict:
    """Every run's dev accuracy (the sweep's results.csv) and test accuracy (its test
    predictions against the held-out labels)."""
    out_dir = self.finetune_dir(tokenizer)
    with open(os.path.join(out_dir, layout.SWEEP_RESULTS_FILE), encoding="utf-8") as f:
      rows = list(csv.DictReader(f))
    runs = []
    for row in rows:
      run_dir = os.path.join(out_dir, row["run_dir"])
      accuracy, num_test = origin_task.accuracy_on_test(
          os.path.join(run_dir, layout.PREDICTIONS_DIR, "test_predictions.tsv"),
          self.s.path("task", "test_labels.tsv"),
      )
      runs.append(
          {
              "preset": row["model"],
              "learning_rate": float(row["learning_rate"]),
              "seed": int(row["seed"]),
              "dev_accuracy": float(row["accuracy"]),
              "test_accuracy": accuracy,
              "num_test": num_test,
              "seconds_per_train_step": float(row["seconds_per_train_step"]),
              "model_dir": run_dir,
          }
      )
    asked = len(self.finetune_grid(tokenizer))
    if len(runs) != asked:
      raise ValueError(f"{len(runs)} finished runs in {out_dir}, {asked} asked")
    best = max(runs, key=lambda r: r["dev_accuracy"])
    return {
        "runs": runs,
        "lr_sweep_png": os.path.join(out_dir, layout.SWEEP_PLOT),
        "summary": f"{len(runs)} runs; dev accuracy {min(r['dev_accuracy'] for r in runs):.3f}"
        f" to {best['dev_accuracy']:.3f}",
    }

  # -- export, query, report ---------------------------------------------------------

  def best_run(self) -> Dict:
    """The fine-tuning run of the best dev accuracy (the first in grid order on ties)."""
    return max(self.results["finetune"]["runs"], key=lambda r: r["dev_accuracy"])

  def export_command(self) -> List[str]:
    """recurrent_bert.export of the best fine-tuning run."""
    best = self.best_run()
    say(
        f"    best run by dev accuracy: {best['preset']}, learning rate "
        f"{best['learning_rate']:g}, seed {best['seed']}"
    )
    # A SavedModel is TensorFlow's, whatever backend trained the model.
    return under_backend(
        "tensorflow",
        "recurrent_bert.export",
        f"--model_dir={best['model_dir']}",
        f"--export_dir={self.s.path('export', 'saved_model')}",
    )

  def export_result(self) -> Dict:
    """Where the SavedModel is and which run it is."""
    best = self.best_run()
    export_dir = self.s.path("export", "saved_model")
    if not os.path.isfile(os.path.join(export_dir, "saved_model.pb")):
      raise ValueError(f"no saved_model.pb in {export_dir}")
    return {
        "export_dir": export_dir,
        **{k: best[k] for k in ("preset", "learning_rate", "seed")},
        **{k: best[k] for k in ("dev_accuracy", "test_accuracy")},
        "summary": f"{export_dir} ({run_results.display_name(best['preset'])}, learning rate "
        f"{best['learning_rate']:g}, seed {best['seed']}, dev accuracy "
        f"{best['dev_accuracy']:.3f})",
    }

  def queries(self) -> List[Dict]:
    """--query texts, else three held-out test passages the exported run saw right and
    wrong: its most confident answer, its most confident wrong one (else its median
    one) and its least confident one, each with its truth and the run's own answer."""
    if self.s.queries:
      return [{"text": text, "truth": None} for text in self.s.queries]
    passages = {
        r["index"]: r["sentence"] for r in origin_task.read_tsv(self.s.path("task", "test.tsv"))
    }
    labels = origin_task.read_labels(self.s.path("task", "test_labels.tsv"))
    predictions = origin_task.read_tsv(
        os.path.join(self.best_run()["model_dir"], layout.PREDICTIONS_DIR, "test_predictions.tsv")
    )
    by_confidence = sorted(predictions, key=lambda r: -float(r["probability"]))
    wrong = [r for r in by_confidence[1:-1] if r["prediction"] != labels[r["index"]]]
    middle = wrong[0] if wrong else by_confidence[len(by_confidence) // 2]
    return [
        {
            "text": passages[row["index"]],
            "truth": labels[row["index"]],
            "shown_as": shown_as,
            "run_answer": row["prediction"],
        }
        for shown_as, row in (
            ("most confident", by_confidence[0]),
            ("most confident wrong" if wrong else "median confidence", middle),
            ("least confident", by_confidence[-1]),
        )
    ]

  def query_command(self) -> List[str]:
    """Writes the queries; the query program by path, in a fresh interpreter."""
    queries_file = self.s.path("export", "queries.json")
    io_utils.atomic_write_json(queries_file, self.queries())
    # -P: the program's own directory (this package) stays off sys.path.
    return [
        sys.executable,
        "-P",
        QUERY_PROGRAM,
        self.s.path("export", "saved_model"),
        queries_file,
        self.s.path("export", "answers.json"),
    ]

  def query_result(self) -> Dict:
    """The answers of the query program."""
    with open(self.s.path("export", "answers.json"), encoding="utf-8") as f:
      answers = json.load(f)
    return {
        "answers": answers,
        "summary": "; ".join(f"{a['label']} (p={a['probability']:.2f})" for a in answers),
    }

  def stage_pretraining_report(self) -> Dict:
    """--pretraining_only: report/claims.md and mlm_loss.png (`pretraining_report`)."""
    from recurrent_bert.demo import pretraining_report

    paths = pretraining_report.write_pretraining_report(self.report_inputs())
    for line in paths["claims"]:
      say(f"    {line}")
    return {**paths, "summary": paths["claims_md"]}

  def report_inputs(self) -> Dict:
    """What the reports read: settings, stage results and timings, the pretraining dirs,
    how often pretraining evaluated, the records and the task folder."""
    s = self.s
    settings = dataclasses.asdict(s)
    if not s.tokenizers:
      del settings["tokenizers"]  # the report of a demo without the comparison is unchanged
    for name, default in (
        ("backend", "tensorflow"),
        ("pretraining_only", False),
        ("vocabulary", WORDPIECE),
    ):
      if settings[name] == default:
        del settings[name]  # nor is the report of a TensorFlow demo
    inputs = {
        "settings": settings,
        "results": self.results,
        "timings": self.engine.timings,
        "pretrain_dirs": {
            p: {str(r): self.pretrain_dir(p, r) for r in s.pretrain_seeds} for p in s.presets
        },
        "out_dir": s.path("report"),
        "eval_every_steps": self.eval_every_steps,
        "train_data": os.path.join(self.data_dir("train"), "*.tfrecord"),
        "eval_data": os.path.join(self.data_dir("dev"), "*.tfrecord"),
        "task_dir": s.path("task"),
    }
    if s.tokenizers:
      inputs["tokenizers"] = self.tokenizer_inputs()
    return inputs

  def report_command(self) -> List[str]:
    """Writes report/inputs.json for recurrent_bert.demo.report and runs it."""
    inputs = self.report_inputs()
    path = self.s.path("report", "inputs.json")
    io_utils.atomic_write_json(path, inputs)
    return jobs.python_module("recurrent_bert.demo.report", path)

  def tokenizer_inputs(self) -> Dict[str, Dict]:
    """{tokenizer: what the report's comparison section reads of it}."""
    preset, seed = self.tokenizer_preset, self.s.pretrain_seeds[0]
    return {
        t: {
            "vocab_file": self.vocab_file(t),
            "eval_data": os.path.join(self.data_dir("dev", t), "*.tfrecord"),
            "pretrain_dir": self.pretrain_dir(preset, seed, t),
            "preset": preset,
            "seed": seed,
            "learning_rate": self.tokenizer_learning_rate,
            "runs": self.results[f"tokenizer_finetune:{t}"]["runs"],
        }
        for t in self.s.tokenizers
    }

  def report_result(self) -> Dict:
    """The report's paths and results table."""
    with open(self.s.path("report", "paths.json"), encoding="utf-8") as f:
      paths = json.load(f)
    return {**paths, "summary": paths["report_md"]}
