"""The demo's stages: what each one does, in which order, and how long it should take.

`Demo` plans the stages for the settings (corpus, vocab, pretrain_data, task, one
pretraining per model, one fine-tuning per model and seed, export, query, report) and runs
them with the stage engine. The in-process stages build the corpus splits and the task
(origin_task); the others are the project's own commands, run as subprocesses from the
repository root: tools.build_vocab, tools.create_pretraining_data, recurrent_bert.pretrain,
recurrent_bert.finetune_glue, recurrent_bert.export, the query program
(query_saved_model.py, by its path) and the report (recurrent_bert.demo.report).
"""

import dataclasses
import json
import os
import re
import sys
from typing import Dict, List, Tuple

from recurrent_bert import io_utils
from recurrent_bert import jobs
from recurrent_bert import model_dir as layout
from recurrent_bert.data import builtin_corpus
from recurrent_bert.demo import origin_task
from recurrent_bert.demo import report
from recurrent_bert.demo.settings import Settings
from recurrent_bert.demo.stages import Stage
from recurrent_bert.demo.stages import StageRunner
from recurrent_bert.demo.stages import say

# The repository root: the stages run `python -m tools.*`, which only a source checkout has.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUERY_PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "query_saved_model.py")

# The lines of each command's output that the demo echoes.
ECHO_PRETRAIN = re.compile(r"^step \d+/\d+|resumed from|already at step|error|Error")
ECHO_FINETUNE = re.compile(
    r"^step \d+/\d+|^eval dev|resumed from|already at step|training examples|error|Error"
)
ECHO_VOCAB = re.compile(r"distinct words|^wrote|error|Error")
ECHO_DATA = re.compile(
    r"create_pretraining_data:|^documents |^instances |^truncation |"
    r"^random next |^masked |^throughput |^wrote|error|Error"
)
ECHO_EXPORT = re.compile(r"SavedModel written|^classify|^encode|error|Error")
ECHO_QUERY = re.compile(r".")
ECHO_REPORT = re.compile(r"^wrote|Error|error")


class Demo:
  """Plans the stages for the settings and runs them, reusing the finished ones.

  Attributes:
    s: the settings.
    engine: the stage engine (markers, results, timings).
  """

  # Seconds on 2 CPU cores, calibrated as stages finish. Per-step costs relative to
  # bert_mini at 64 tokens x 32 sequences; sizes and token counts scale them.
  STEP_COST = {
      "bert": 1.0,
      "bert_rab": 1.0,
      "swishrnn": 1.1,
      "trans_blstm_small_1": 1.6,
      "trans_blstm_small_2": 1.7,
      "trans_blstm_1": 2.6,
      "trans_blstm_2": 2.8,
      "blstm": 2.2,
  }
  SIZE_COST = {"tiny": 0.15, "mini": 1.0, "base": 12.0, "large": 40.0}
  BERT_MINI_STEP = 0.32  # seconds per step of 2048 tokens (32 x 64), 2 idle cores

  def __init__(self, settings: Settings):
    self.s = settings
    self.engine = StageRunner(settings.work_dir, settings.jobs, cwd=REPO)

  @property
  def results(self) -> Dict[str, Dict]:
    """{stage name: its result}, of the stages finished or reused so far."""
    return self.engine.results

  # -- paths -----------------------------------------------------------------------

  def pretrain_dir(self, preset: str) -> str:
    """The pretraining model dir of a preset."""
    return self.s.path("pretrain", preset)

  def finetune_dir(self, preset: str, seed: int) -> str:
    """The fine-tuning model dir of a preset and seed."""
    return self.s.path("finetune", preset, f"seed{seed}")

  # -- cost model ------------------------------------------------------------------

  def step_cost(self, preset: str, tokens: int) -> float:
    """Expected seconds of one training step of `tokens` token positions, idle 2 cores."""
    family, size = report.family_of(preset), preset.rsplit("_", 1)[1]
    return (
        self.BERT_MINI_STEP
        * self.STEP_COST.get(family, 2.0)
        * self.SIZE_COST.get(size, 1.0)
        * tokens
        / 2048
    )

  def _startup(self, preset: str) -> float:
    # TensorFlow's import and the first trace; the BLSTM blocks trace longer.
    return 10.0 + (10.0 if "blstm" in preset else 0.0)

  # -- the plan --------------------------------------------------------------------

  def plan(self) -> List[Stage]:
    """Every stage of the settings, in order, with its estimate in seconds."""
    s = self.s
    corpus_mb = s.corpus_max_bytes / 1e6 if s.corpus_max_bytes else (14.0 if self.builtin else 10.0)
    stages = [
        Stage(
            "corpus",
            "corpus: read, split documents train/dev/test",
            5 + 2 * corpus_mb,
            run=self.stage_corpus,
        ),
        Stage(
            "vocab",
            f"vocabulary: WordPiece, {s.vocab_size} tokens (tools.build_vocab)",
            15 + 6e-4 * (s.vocab_max_lines or 15000 * corpus_mb),
            command=self.vocab_command,
            echo=ECHO_VOCAB,
            after=self.vocab_result,
        ),
        Stage(
            "pretrain_data",
            f"pretraining data: MLM + NSP TFRecords, {s.seq_length} "
            "tokens (tools.create_pretraining_data)",
            10 + 2 * corpus_mb * s.dupe_factor,
            command=self.data_command,
            echo=ECHO_DATA,
            after=self.data_result,
        ),
        Stage("task", "fine-tuning task: which source is a passage from?", 2, run=self.stage_task),
    ]
    tokens = s.batch_size * s.seq_length
    for preset in s.presets:
      stages.append(
          Stage(
              f"pretrain:{preset}",
              f"pretrain {report.display_name(preset)} ({preset}): "
              f"{s.pretrain_steps} steps x {s.batch_size} x {s.seq_length} tokens",
              self._startup(preset) + s.pretrain_steps * self.step_cost(preset, tokens),
              command=lambda p=preset: self.pretrain_command(p),
              echo=ECHO_PRETRAIN,
              after=lambda p=preset: self.pretrain_result(p),
              output_dir=self.pretrain_dir(preset),
          )
      )
    ft_tokens = s.finetune_batch_size * s.seq_length
    for preset in s.presets:
      for seed in s.finetune_seeds:
        stages.append(
            Stage(
                f"finetune:{preset}:seed{seed}",
                f"fine-tune {report.display_name(preset)} "
                f"({preset}), seed {seed}: {s.finetune_steps} steps",
                (
                    self._startup(preset)
                    + 10
                    + 0.9 * s.finetune_steps * self.step_cost(preset, ft_tokens)
                )
                / min(s.jobs, 2) ** 0.5,
                command=lambda p=preset, r=seed: self.finetune_command(p, r),
                echo=ECHO_FINETUNE,
                after=lambda p=preset, r=seed: self.finetune_result(p, r),
                parallel_group="finetune",
                output_dir=self.finetune_dir(preset, seed),
            )
        )
    runs = [(p, r) for p in s.presets for r in s.finetune_seeds]
    stages += [
        Stage(
            "export",
            "export the best fine-tuned model (recurrent_bert.export)",
            30,
            key={"runs": runs},
            command=self.export_command,
            echo=ECHO_EXPORT,
            after=self.export_result,
        ),
        Stage(
            "query",
            "query the SavedModel with raw text (TF + tf-text only)",
            15,
            key={"runs": runs, "queries": s.queries},
            command=self.query_command,
            echo=ECHO_QUERY,
            after=self.query_result,
        ),
        Stage(
            "report",
            "report: report.md, mlm_loss.png, tensorboard/",
            15,
            key={"runs": runs, "queries": s.queries},
            command=self.report_command,
            echo=ECHO_REPORT,
            after=self.report_result,
        ),
    ]
    return stages

  @property
  def builtin(self) -> bool:
    """Whether the corpus is (or includes) the built-in one."""
    return any(builtin_corpus.is_builtin(f) for f in self.s.input_files)

  # -- the driver ------------------------------------------------------------------

  def run(self) -> None:
    """Runs every stage not finished yet (after --redo dropped the ones it names).

    Raises:
      StageError: a stage failed, or --redo names no stage.
    """
    stages = self.plan()
    self.engine.forget(self.s.redo, stages)
    say(
        f"recurrent_bert demo: {len(stages)} stages in {self.s.work_dir} "
        f"(models: {', '.join(self.s.presets)}; seeds: "
        f"{', '.join(map(str, self.s.finetune_seeds))})"
    )
    self.engine.run(stages)

  # -- corpus, vocabulary, data, task ------------------------------------------------

  def stage_corpus(self) -> Dict:
    """Reads the corpus as documents with their sources; writes the three splits."""
    s = self.s
    documents: List[origin_task.Document] = []
    files = []
    for entry in s.input_files:
      if builtin_corpus.is_builtin(entry):
        say(
            "    reading the built-in corpus (docstrings of the installed Python, labelled "
            "by library; cached after the first time)"
        )
        documents.extend(origin_task.builtin_documents(s.cache_dir, s.corpus_max_bytes))
      else:
        files.extend(io_utils.expand_input_patterns([entry], "input_files"))
    if files:
      documents.extend(origin_task.file_documents(files, s.corpus_max_bytes))
    splits = origin_task.split_documents(documents, s.eval_documents_fraction, s.seed)
    for split, docs in splits.items():
      origin_task.write_documents(s.path("corpus"), split, docs)
    stats = {
        split: {
            "documents": len(docs),
            "sentences": sum(len(d.sentences) for d in docs),
            "bytes": sum(len(x.encode("utf-8")) + 1 for d in docs for x in d.sentences),
            "sources": len({d.source for d in docs}),
        }
        for split, docs in splits.items()
    }
    total_mb = sum(v["bytes"] for v in stats.values()) / 1e6
    return {
        "input_files": files,
        "builtin": self.builtin,
        "splits": stats,
        "summary": f"{sum(v['documents'] for v in stats.values()):,} documents from "
        f"{stats['train']['sources']} sources, {total_mb:.1f} MB; held out "
        f"{stats['dev']['documents']} dev + {stats['test']['documents']} "
        "test documents",
    }

  def vocab_command(self) -> List[str]:
    """tools.build_vocab on the train documents."""
    s = self.s
    return jobs.python_module(
        "tools.build_vocab",
        f"--input_files={s.path('corpus', 'train_documents.txt')}",
        f"--vocab_size={s.vocab_size}",
        f"--max_lines={s.vocab_max_lines}",
        "--do_lower_case=true",
        f"--output_file={s.path('vocab', 'vocab.txt')}",
    )

  def vocab_result(self) -> Dict:
    """The vocabulary's size and its [unused] padding."""
    with open(self.s.path("vocab", "vocab.txt"), encoding="utf-8") as f:
      tokens = [line.rstrip("\n") for line in f]
    unused = sum(t.startswith("[unused") for t in tokens)
    return {
        "tokens": len(tokens),
        "unused": unused,
        "summary": f"{len(tokens)} tokens ({unused} [unused] padding)",
    }

  def data_command(self) -> List[str]:
    """tools.create_pretraining_data on the train documents."""
    s = self.s
    return jobs.python_module(
        "tools.create_pretraining_data",
        f"--input_files={s.path('corpus', 'train_documents.txt')}",
        f"--vocab_file={s.path('vocab', 'vocab.txt')}",
        "--do_lower_case=true",
        f"--output_dir={s.path('pretrain_data')}",
        f"--max_seq_length={s.seq_length}",
        f"--max_predictions_per_seq={s.max_predictions_per_seq}",
        f"--dupe_factor={s.dupe_factor}",
        f"--random_seed={s.seed}",
        f"--num_output_shards={max(1, s.num_workers)}",
        f"--num_workers={s.num_workers}",
    )

  def data_result(self) -> Dict:
    """The records' statistics and how many epochs pretraining reads."""
    with open(self.s.path("pretrain_data", "stats.json"), encoding="utf-8") as f:
      stats = json.load(f)
    consumed = self.s.pretrain_steps * self.s.batch_size
    return {
        "instances": stats["instances"],
        "instance_tokens": stats["instance_tokens"],
        "masked_fraction": stats["masked_fraction"],
        "epochs": consumed / max(1, stats["instances"]),
        "summary": f"{stats['instances']:,} sequences; pretraining reads {consumed:,} "
        f"of them ({consumed / max(1, stats['instances']):.2f} epochs)",
    }

  def stage_task(self) -> Dict:
    """Writes the task folder from the three splits."""
    s = self.s
    splits = {
        split: origin_task.load_split(s.path("corpus"), split) for split in ("train", "dev", "test")
    }
    classes = origin_task.choose_classes(splits, s.task_classes)
    counts = origin_task.write_task(
        s.path("task"), splits, classes, s.task_train_examples, s.task_eval_examples, s.seed
    )
    return {
        "classes": classes,
        "splits": counts,
        "summary": f"{len(classes)} classes ({', '.join(classes)}); "
        + ", ".join(f"{split} {c['examples']:,} passages" for split, c in counts.items()),
    }

  # -- pretraining and fine-tuning ---------------------------------------------------

  def pretrain_command(self, preset: str) -> List[str]:
    """recurrent_bert.pretrain of one preset on the records."""
    s = self.s
    log_steps = max(1, s.pretrain_steps // 15)
    return jobs.python_module(
        "recurrent_bert.pretrain",
        f"--model_config={preset}",
        f"--input_files={s.path('pretrain_data', '*.tfrecord')}",
        f"--vocab_file={s.path('vocab', 'vocab.txt')}",
        "--do_lower_case=true",
        f"--model_dir={self.pretrain_dir(preset)}",
        f"--max_seq_length={s.seq_length}",
        f"--max_predictions_per_seq={s.max_predictions_per_seq}",
        f"--train_batch_size={s.batch_size}",
        f"--num_train_steps={s.pretrain_steps}",
        f"--learning_rate={s.learning_rate}",
        f"--warmup_steps={s.warmup_steps}",
        f"--log_steps={log_steps}",
        f"--steps_per_loop={log_steps}",
        f"--save_checkpoints_steps={max(log_steps, s.pretrain_steps // 4)}",
        "--keep_checkpoint_max=2",
        "--seed=0",
    )

  def pretrain_result(self, preset: str) -> Dict:
    """The final MLM loss; the encoder export must be there."""
    model_dir = self.pretrain_dir(preset)
    if not os.path.isfile(os.path.join(model_dir, layout.EXPORT_DIR, layout.EXPORT_INFO_FILE)):
      raise ValueError(f"no encoder export in {model_dir}")
    losses = io_utils.read_metrics_log(model_dir)
    final = report.final_loss(losses, "mlm_loss")
    return {
        "model_dir": model_dir,
        "steps": max(losses) if losses else 0,
        "final_mlm_loss": final,
        "load_average": os.getloadavg()[1],
        "summary": f"MLM loss {final:.3f} (mean of the last "
        f"{report.last_n(len(losses))} steps)",
    }

  def finetune_command(self, preset: str, seed: int) -> List[str]:
    """finetune_glue --task=custom from a preset's pretrained encoder."""
    s = self.s
    log_steps = max(1, s.finetune_steps // 5)
    return jobs.python_module(
        "recurrent_bert.finetune_glue",
        "--task=custom",
        f"--data_dir={s.path('task')}",
        f"--init_checkpoint={os.path.join(self.pretrain_dir(preset), 'encoder')}",
        f"--model_dir={self.finetune_dir(preset, seed)}",
        f"--seed={seed}",
        f"--max_seq_length={s.seq_length}",
        f"--train_batch_size={s.finetune_batch_size}",
        "--eval_batch_size=64",
        f"--learning_rate={s.finetune_learning_rate}",
        f"--max_train_steps={s.finetune_steps}",
        "--warmup_proportion=0.1",
        f"--log_steps={log_steps}",
        f"--steps_per_loop={log_steps}",
        f"--save_checkpoints_steps={max(log_steps, s.finetune_steps // 2)}",
        "--keep_checkpoint_max=1",
        "--shuffle_buffer_size=10000",
    )

  def finetune_result(self, preset: str, seed: int) -> Dict:
    """Dev accuracy (eval_results.json) and test accuracy (against the held-out labels)."""
    model_dir = self.finetune_dir(preset, seed)
    with open(os.path.join(model_dir, layout.EVAL_RESULTS_FILE), encoding="utf-8") as f:
      results = json.load(f)
    accuracy, num_test = origin_task.accuracy_on_test(
        os.path.join(model_dir, layout.PREDICTIONS_DIR, "test_predictions.tsv"),
        self.s.path("task", "test_labels.tsv"),
    )
    dev = results["dev"]["accuracy"]
    return {
        "model_dir": model_dir,
        "dev_accuracy": dev,
        "test_accuracy": accuracy,
        "num_test": num_test,
        "num_dev": results["dev"].get("num_examples"),
        "seconds_per_train_step": results.get("seconds_per_train_step"),
        "summary": f"dev accuracy {dev:.3f}, test accuracy {accuracy:.3f}",
    }

  # -- export, query, report ---------------------------------------------------------

  def best_run(self) -> Tuple[str, int, Dict]:
    """(preset, seed, fine-tuning result) of the best dev accuracy (the first on ties)."""
    best = None
    for preset in self.s.presets:
      for seed in self.s.finetune_seeds:
        result = self.results[f"finetune:{preset}:seed{seed}"]
        if best is None or result["dev_accuracy"] > best[2]["dev_accuracy"]:
          best = (preset, seed, result)
    return best

  def export_command(self) -> List[str]:
    """recurrent_bert.export of the best fine-tuning run."""
    preset, seed, _ = self.best_run()
    say(f"    best run by dev accuracy: {preset}, seed {seed}")
    return jobs.python_module(
        "recurrent_bert.export",
        f"--model_dir={self.finetune_dir(preset, seed)}",
        f"--export_dir={self.s.path('export', 'saved_model')}",
    )

  def export_result(self) -> Dict:
    """Where the SavedModel is and which run it is."""
    preset, seed, result = self.best_run()
    export_dir = self.s.path("export", "saved_model")
    if not os.path.isfile(os.path.join(export_dir, "saved_model.pb")):
      raise ValueError(f"no saved_model.pb in {export_dir}")
    return {
        "export_dir": export_dir,
        "preset": preset,
        "seed": seed,
        "dev_accuracy": result["dev_accuracy"],
        "test_accuracy": result["test_accuracy"],
        "summary": f"{export_dir} ({report.display_name(preset)}, seed {seed}, dev "
        f"accuracy {result['dev_accuracy']:.3f})",
    }

  def queries(self) -> List[Dict]:
    """--query texts, else a passage of a held-out test document of three classes."""
    if self.s.queries:
      return [{"text": text, "truth": None} for text in self.s.queries]
    rows = origin_task.read_tsv(self.s.path("task", "test.tsv"))
    labels = {
        r["index"]: r["label"] for r in origin_task.read_tsv(self.s.path("task", "test_labels.tsv"))
    }
    chosen = []
    for wanted in self.results["task"]["classes"][:3]:
      row = next(r for r in rows if labels[r["index"]] == wanted)
      chosen.append({"text": row["sentence"], "truth": wanted})
    return chosen

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

  def report_command(self) -> List[str]:
    """Writes report/inputs.json for recurrent_bert.demo.report and runs it."""
    s = self.s
    inputs = {
        "settings": dataclasses.asdict(s),
        "results": self.results,
        "timings": self.engine.timings,
        "pretrain_dirs": {p: self.pretrain_dir(p) for p in s.presets},
        "finetune_dirs": {
            p: {str(r): self.finetune_dir(p, r) for r in s.finetune_seeds} for p in s.presets
        },
        "out_dir": s.path("report"),
    }
    path = s.path("report", "inputs.json")
    io_utils.atomic_write_json(path, inputs)
    return jobs.python_module("recurrent_bert.demo.report", path)

  def report_result(self) -> Dict:
    """The report's paths and results table."""
    with open(self.s.path("report", "paths.json"), encoding="utf-8") as f:
      paths = json.load(f)
    return {**paths, "summary": paths["report_md"]}

  def print_summary(self) -> None:
    """The stage timings, then where the outputs are (after a finished run)."""
    self.engine.print_timings()
    outputs = self.results.get("report", {})
    if outputs:
      if outputs.get("table"):
        say("\n" + outputs["table"])
      answers = self.results.get("query", {}).get("answers", [])
      for a in answers:
        say(
            f"query: {a['text'][:100]!r}\n"
            f"  -> {a['label']} (p={a['probability']:.2f})"
            + (f", truth: {a['truth']}" if a.get("truth") else "")
        )
      say(f"\nreport:       {outputs['report_md']}")
      say(f"loss curves:  {outputs['mlm_loss_png']}")
      say(
          f"TensorBoard:  {outputs['tensorboard_dir']}  (tensorboard --logdir "
          f"{outputs['tensorboard_dir']})"
      )
      say(f"SavedModel:   {self.results.get('export', {}).get('export_dir')}")
