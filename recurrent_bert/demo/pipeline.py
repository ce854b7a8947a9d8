"""The demo's stages: what each one does, in which order, and how long it should take.

`Demo` plans the stages for the settings (corpus, vocab, pretrain_data, eval_data, task,
one pretraining per model and pretraining seed, the fine-tuning sweep, export, query,
report) and runs them with the stage engine. The in-process stages build the corpus splits
and the task (origin_task); the others are the package's own commands, run as
subprocesses (`python -m`, so an installed package serves as well as a checkout):
rbert-build-vocab, rbert-create-pretraining-data (train
documents, then the held-out dev documents), recurrent_bert.pretrain,
rbert-sweep (recurrent_bert.finetune_glue per model x learning rate x seed),
recurrent_bert.export, the query program (query_saved_model.py, by its path) and the
report (recurrent_bert.demo.report).
"""

import csv
import dataclasses
import json
import os
import re
import shlex
import sys
from typing import Dict, List, Optional, Tuple

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

QUERY_PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "query_saved_model.py")

# The lines of each command's output that the demo echoes.
ECHO_PRETRAIN = re.compile(r"^step \d+/\d+|^eval step|resumed from|already at step|error|Error")
ECHO_SWEEP = re.compile(r"^\[ *\d+/\d+\]|^running \d+ of|^  end of|error|Error")
ECHO_VOCAB = re.compile(r"distinct words|^wrote|error|Error")
ECHO_DATA = re.compile(
    r"create_pretraining_data:|^documents |^instances |^truncation |"
    r"^random next |^masked |^throughput |^wrote|error|Error"
)
ECHO_EXPORT = re.compile(r"SavedModel written|^classify|^encode|error|Error")
ECHO_QUERY = re.compile(r".")
ECHO_REPORT = re.compile(r"^wrote|Error|error")

# The tokenizer comparison (--tokenizers): its stages' outputs go to <work_dir>/tokenizers/.
TOKENIZERS_DIR = "tokenizers"
WORDPIECE = "wordpiece"
TOKENIZERS = (WORDPIECE, "unigram", "bpe")


def under_backend(backend: str, module: str, *args: str) -> List[str]:
  """`python -m module args` with KERAS_BACKEND=backend (through `env`, so the job log
  shows it)."""
  return ["env", f"KERAS_BACKEND={backend}", *jobs.python_module(module, *args)]


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
  # Tiny models are dominated by per-step overheads, hence more than their FLOPs say.
  SIZE_COST = {"tiny": 0.35, "mini": 1.0, "base": 12.0, "large": 40.0}
  BERT_MINI_STEP = 0.32  # seconds per step of 2048 tokens (32 x 64), 2 idle cores
  # Two 1-thread pretraining runs side by side on 2 cores do this many times the steps of
  # one 2-thread run (README, "Why these defaults").
  SIDE_BY_SIDE_GAIN = 1.35

  def __init__(self, settings: Settings):
    self.s = settings
    self.engine = StageRunner(settings.work_dir, settings.jobs)

  @property
  def results(self) -> Dict[str, Dict]:
    """{stage name: its result}, of the stages finished or reused so far."""
    return self.engine.results

  # -- paths -----------------------------------------------------------------------

  def pretrain_dir(self, preset: str, seed: int, tokenizer: Optional[str] = None) -> str:
    """The pretraining model dir of a preset and pretraining seed (of the main runs, or of
    the tokenizer comparison's run with `tokenizer`)."""
    if tokenizer:
      return self.tokenizer_path(tokenizer, "pretrain", preset, f"seed{seed}")
    return self.s.path("pretrain", preset, f"seed{seed}")

  def encoder_dir(self, preset: str, tokenizer: Optional[str] = None) -> str:
    """The encoder every fine-tuning run of a preset starts from: its first pretraining
    seed's."""
    return os.path.join(
        self.pretrain_dir(preset, self.s.pretrain_seeds[0], tokenizer), layout.EXPORT_DIR
    )

  def tokenizer_path(self, tokenizer: str, *parts: str) -> str:
    """A path of the tokenizer comparison: <work_dir>/tokenizers/<tokenizer>/..."""
    return self.s.path(TOKENIZERS_DIR, tokenizer, *parts)

  def vocab_file(self, tokenizer: Optional[str] = None) -> str:
    """The main vocabulary, or a compared tokenizer's (WordPiece's is the main one: the
    same command would learn it again)."""
    if tokenizer is None and self.s.vocabulary != WORDPIECE:
      return self.s.path("vocab", "spm.model")  # --vocabulary: a SentencePiece model
    if tokenizer in (None, WORDPIECE):
      return self.s.path("vocab", "vocab.txt")
    return self.tokenizer_path(tokenizer, "vocab", "spm.model")

  def data_dir(self, split: str, tokenizer: Optional[str] = None) -> str:
    """The pretraining records of the train documents (split "train") or the held-out
    ones (any other split), of the main runs or of a compared tokenizer."""
    name = "pretrain_data" if split == "train" else "eval_data"
    return self.tokenizer_path(tokenizer, name) if tokenizer else self.s.path(name)

  @property
  def tokenizer_preset(self) -> str:
    """The model the tokenizer comparison pretrains: the first of --models."""
    return self.s.presets[0]

  @property
  def tokenizer_learning_rate(self) -> float:
    """The comparison's fine-tuning learning rate: the middle one of the main runs'."""
    rates = self.s.finetune_learning_rates
    return rates[len(rates) // 2]

  @property
  def evaluations(self) -> int:
    """Held-out evaluations per pretraining run: every eval_every_steps, and after the
    last step when that is not one of them."""
    every = self.eval_every_steps
    return self.s.pretrain_steps // every + (1 if self.s.pretrain_steps % every else 0)

  @property
  def eval_every_steps(self) -> int:
    """Pretraining evaluates the held-out records 4 times, the last after the last step
    (each evaluation costs about as much as 25 training steps of a tiny model)."""
    return max(1, self.s.pretrain_steps // 4)

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

  @property
  def corpus_mb(self) -> float:
    """The corpus's expected size in MB (for the estimates)."""
    s = self.s
    return s.corpus_max_bytes / 1e6 if s.corpus_max_bytes else (14.0 if self.builtin else 10.0)

  def pretrain_estimate(self, preset: str) -> float:
    """Expected seconds of one pretraining run of `preset`, held-out evaluations included."""
    s = self.s
    tokens = s.batch_size * s.seq_length
    evaluations = self.evaluations
    eval_steps = evaluations * self._eval_batches() * 64 * s.seq_length / tokens / 3
    return self._startup(preset) + (s.pretrain_steps + eval_steps) * self.step_cost(preset, tokens)

  def finetune_estimate(self, grid: List[Tuple[str, float, int]]) -> float:
    """Expected seconds of a sweep of the fine-tuning runs of `grid`, --jobs at a time."""
    s = self.s
    tokens = s.finetune_batch_size * s.seq_length
    run_seconds = sum(
        self._startup(preset) + 10 + 0.9 * s.finetune_steps * self.step_cost(preset, tokens)
        for preset, _, _ in grid
    )
    return run_seconds / min(s.jobs, 2) ** 0.5

  def _startup(self, preset: str) -> float:
    # TensorFlow's import and the first trace; the BLSTM blocks trace longer.
    return 10.0 + (10.0 if "blstm" in preset else 0.0)

  # -- the plan --------------------------------------------------------------------

  def plan(self) -> List[Stage]:
    """Every stage of the settings, in order, with its estimate in seconds."""
    s = self.s
    corpus_mb = self.corpus_mb
    stages = [
        Stage(
            "corpus",
            "corpus: read, split documents train/dev/test",
            5 + 2 * corpus_mb,
            run=self.stage_corpus,
        ),
        Stage(
            "vocab",
            f"vocabulary: {s.vocabulary}, {s.vocab_size} tokens (rbert-build-vocab)",
            15 + 6e-4 * (s.vocab_max_lines or 15000 * corpus_mb),
            command=self.vocab_command,
            echo=ECHO_VOCAB,
            after=self.vocab_result,
        ),
        Stage(
            "pretrain_data",
            f"pretraining data: MLM + NSP TFRecords, {s.seq_length} "
            "tokens (rbert-create-pretraining-data)",
            10 + 2 * corpus_mb * s.dupe_factor,
            command=self.data_command,
            echo=ECHO_DATA,
            after=self.data_result,
        ),
        Stage(
            "eval_data",
            "held-out pretraining data: the same records of the dev documents",
            5 + 2 * corpus_mb * s.eval_documents_fraction,
            command=self.eval_data_command,
            echo=ECHO_DATA,
            after=self.eval_data_result,
        ),
        Stage("task", "fine-tuning task: which source is a passage from?", 2, run=self.stage_task),
    ]
    evaluations = self.evaluations
    side_by_side = s.parallel_pretraining and s.jobs > 1
    side_by_side_gain = self.SIDE_BY_SIDE_GAIN if side_by_side else 1.0
    for preset in s.presets:
      for seed in s.pretrain_seeds:
        stages.append(
            Stage(
                f"pretrain:{preset}:seed{seed}",
                f"pretrain {report.display_name(preset)} ({preset}), seed {seed}: "
                f"{s.pretrain_steps} steps x {s.batch_size} x {s.seq_length} tokens, "
                f"{evaluations} held-out evaluations",
                self.pretrain_estimate(preset) / side_by_side_gain,
                command=lambda p=preset, r=seed: self.pretrain_command(p, r),
                echo=ECHO_PRETRAIN,
                after=lambda p=preset, r=seed: self.pretrain_result(p, r),
                output_dir=self.pretrain_dir(preset, seed),
                parallel_group="pretraining runs" if side_by_side else None,
            )
        )
    if s.pretraining_only:
      return stages + [
          Stage(
              "report",
              "report: report/claims.md, the papers' MLM claims, and mlm_loss.png",
              10,
              key={"pretrain_seeds": s.pretrain_seeds, "pretraining_only": True},
              run=self.stage_pretraining_report,
          )
      ]
    grid = self.finetune_grid()
    stages += [
        Stage(
            "finetune",
            f"fine-tune: {len(s.presets)} models x {len(s.finetune_learning_rates)} learning "
            f"rates x {len(s.finetune_seeds)} seeds = {len(grid)} runs of "
            f"{s.finetune_steps} steps, {s.jobs} at a time (rbert-sweep)",
            self.finetune_estimate(grid),
            key={"grid": grid},
            command=self.sweep_command,
            echo=ECHO_SWEEP,
            after=self.sweep_result,
            output_dir=s.path("finetune"),
        ),
        Stage(
            "export",
            "export the best fine-tuned model (recurrent_bert.export)",
            30,
            key={"grid": grid},
            command=self.export_command,
            echo=ECHO_EXPORT,
            after=self.export_result,
        ),
        Stage(
            "query",
            "query the SavedModel with raw text (TF + tf-text only)",
            15,
            key={"grid": grid, "queries": s.queries},
            command=self.query_command,
            echo=ECHO_QUERY,
            after=self.query_result,
        ),
        Stage(
            "report",
            "report: report.md, the papers' claims, mlm_loss.png, stability.png, tensorboard/",
            15,
            key={
                "grid": grid,
                "pretrain_seeds": s.pretrain_seeds,
                "queries": s.queries,
                **({"tokenizers": s.tokenizers} if s.tokenizers else {}),
            },
            command=self.report_command,
            echo=ECHO_REPORT,
            after=self.report_result,
        ),
    ]
    # The tokenizer comparison, before the report that covers it.
    stages[-1:-1] = [st for t in s.tokenizers for st in self.tokenizer_stages(t)]
    return stages

  def tokenizer_stages(self, tokenizer: str) -> List[Stage]:
    """The comparison's stages of one tokenizer: its vocabulary (but WordPiece's, the main
    one), whole-word-masked records of the train and dev documents, one pretraining of
    the comparison's model, fine-tuning at one learning rate x --finetune_seeds."""
    s = self.s
    corpus_mb = self.corpus_mb
    preset, seed = self.tokenizer_preset, s.pretrain_seeds[0]
    stages = []
    if tokenizer != WORDPIECE:
      stages.append(
          Stage(
              f"tokenizer_vocab:{tokenizer}",
              f"tokenizers: {tokenizer} SentencePiece model, {s.vocab_size} pieces "
              "(rbert-build-vocab)",
              10 + 2e-4 * (s.vocab_max_lines or 15000 * corpus_mb),
              command=lambda: self.vocab_command(tokenizer),
              echo=ECHO_VOCAB,
          )
      )
    grid = self.finetune_grid(tokenizer)
    stages += [
        Stage(
            f"tokenizer_data:{tokenizer}",
            f"tokenizers: {tokenizer} whole-word-masked pretraining data of the train documents",
            10 + 2 * corpus_mb * s.dupe_factor,
            command=lambda: self.data_command("train", tokenizer),
            echo=ECHO_DATA,
            after=lambda: self.data_result(tokenizer),
        ),
        Stage(
            f"tokenizer_eval_data:{tokenizer}",
            f"tokenizers: {tokenizer} whole-word-masked held-out data of the dev documents",
            5 + 2 * corpus_mb * s.eval_documents_fraction,
            command=lambda: self.data_command("dev", tokenizer),
            echo=ECHO_DATA,
            after=lambda: self.eval_data_result(tokenizer),
        ),
        Stage(
            f"tokenizer_pretrain:{tokenizer}",
            f"tokenizers: pretrain {report.display_name(preset)} ({preset}) with {tokenizer}, "
            f"seed {seed}: {s.pretrain_steps} steps x {s.batch_size} x {s.seq_length} tokens",
            self.pretrain_estimate(preset),
            key={"preset": preset, "seed": seed},
            command=lambda: self.pretrain_command(preset, seed, tokenizer),
            echo=ECHO_PRETRAIN,
            after=lambda: self.pretrain_result(preset, seed, tokenizer),
            output_dir=self.pretrain_dir(preset, seed, tokenizer),
        ),
        Stage(
            f"tokenizer_finetune:{tokenizer}",
            f"tokenizers: fine-tune the {tokenizer} model at learning rate "
            f"{self.tokenizer_learning_rate:g} x {len(s.finetune_seeds)} seeds (rbert-sweep)",
            self.finetune_estimate(grid),
            key={"grid": grid},
            command=lambda: self.sweep_command(tokenizer),
            echo=ECHO_SWEEP,
            after=lambda: self.sweep_result(tokenizer),
        ),
    ]
    return stages

  def finetune_grid(self, tokenizer: Optional[str] = None) -> List[Tuple[str, float, int]]:
    """(preset, learning rate, seed) of every fine-tuning run, in the sweep's order (of the
    main sweep, or of a compared tokenizer's)."""
    s = self.s
    if tokenizer:
      return [
          (self.tokenizer_preset, self.tokenizer_learning_rate, seed) for seed in s.finetune_seeds
      ]
    return [
        (preset, lr, seed)
        for preset in s.presets
        for lr in s.finetune_learning_rates
        for seed in s.finetune_seeds
    ]

  def _eval_batches(self) -> int:
    """Batches of 64 held-out sequences per evaluation."""
    return max(1, -(-self.s.eval_sequences // 64))

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
        f"(models: {', '.join(self.s.presets)}; pretraining seeds: "
        f"{', '.join(map(str, self.s.pretrain_seeds))}"
        + (
            ""
            if self.s.pretraining_only
            else f"; fine-tuning seeds: {', '.join(map(str, self.s.finetune_seeds))}"
        )
        + ")"
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

  def vocab_command(self, tokenizer: Optional[str] = None) -> List[str]:
    """rbert-build-vocab on the train documents (WordPiece, or `tokenizer`'s model)."""
    s = self.s
    output = self.vocab_file(tokenizer)
    tokenizer = tokenizer or s.vocabulary
    return jobs.python_module(
        "recurrent_bert.tools.build_vocab",
        f"--input_files={s.path('corpus', 'train_documents.txt')}",
        f"--vocab_size={s.vocab_size}",
        f"--max_lines={s.vocab_max_lines}",
        "--do_lower_case=true",
        f"--output_file={output}",
        *([f"--tokenizer={tokenizer}"] if tokenizer and tokenizer != WORDPIECE else []),
    )

  def vocab_result(self) -> Dict:
    """The vocabulary's size and its [unused] padding."""
    if self.s.vocabulary != WORDPIECE:
      from recurrent_bert.data import vocab as vocab_lib

      size = vocab_lib.read_vocabulary(self.vocab_file()).vocab_size
      return {"tokens": size, "unused": 0, "summary": f"{self.s.vocabulary} model, {size} pieces"}
    with open(self.s.path("vocab", "vocab.txt"), encoding="utf-8") as f:
      tokens = [line.rstrip("\n") for line in f]
    unused = sum(t.startswith("[unused") for t in tokens)
    return {
        "tokens": len(tokens),
        "unused": unused,
        "summary": f"{len(tokens)} tokens ({unused} [unused] padding)",
    }

  def data_command(self, split: str = "train", tokenizer: Optional[str] = None) -> List[str]:
    """rbert-create-pretraining-data on one split's documents (train, or dev: held out).

    The held-out records get one pass with their own seed: masks and NSP pairs are drawn
    once, so every model and evaluation reads the same ones. A compared `tokenizer`'s
    records mask whole words (every piece of a masked word), which makes the held-out
    loss per word mean what it says.
    """
    s = self.s
    held_out = split != "train"
    return jobs.python_module(
        "recurrent_bert.tools.create_pretraining_data",
        f"--input_files={s.path('corpus', f'{split}_documents.txt')}",
        f"--vocab_file={self.vocab_file(tokenizer)}",
        "--do_lower_case=true",
        *(["--do_whole_word_mask"] if tokenizer else []),
        f"--output_dir={self.data_dir(split, tokenizer)}",
        f"--max_seq_length={s.seq_length}",
        f"--max_predictions_per_seq={s.max_predictions_per_seq}",
        f"--dupe_factor={1 if held_out else s.dupe_factor}",
        f"--random_seed={s.seed + 1 if held_out else s.seed}",
        f"--num_output_shards={1 if held_out else max(1, s.num_workers)}",
        f"--num_workers={1 if held_out else s.num_workers}",
    )

  def eval_data_command(self) -> List[str]:
    """rbert-create-pretraining-data on the dev documents."""
    return self.data_command("dev")

  def eval_data_result(self, tokenizer: Optional[str] = None) -> Dict:
    """How many held-out sequences there are and how many each evaluation reads."""
    with open(os.path.join(self.data_dir("dev", tokenizer), "stats.json"), encoding="utf-8") as f:
      stats = json.load(f)
    read = min(stats["instances"], self._eval_batches() * 64)
    if not stats["instances"]:
      raise ValueError("the dev documents gave no pretraining sequences")
    return {
        "instances": stats["instances"],
        "read_per_evaluation": read,
        "summary": f"{stats['instances']:,} held-out sequences; each evaluation reads "
        f"{read:,} of them",
    }

  def data_result(self, tokenizer: Optional[str] = None) -> Dict:
    """The records' statistics and how many epochs pretraining reads."""
    with open(os.path.join(self.data_dir("train", tokenizer), "stats.json"), encoding="utf-8") as f:
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
        f"--log_steps={log_steps}",
        f"--steps_per_loop={log_steps}",
        f"--save_checkpoints_steps={max(log_steps, s.pretrain_steps // 4)}",
        "--keep_checkpoint_max=2",
        f"--seed={seed}",
        f"--eval_input_files={os.path.join(self.data_dir('dev', tokenizer), '*.tfrecord')}",
        "--eval_batch_size=64",
        f"--max_eval_steps={self._eval_batches()}",
        f"--eval_every_steps={self.eval_every_steps}",
    )

  def pretrain_result(self, preset: str, seed: int, tokenizer: Optional[str] = None) -> Dict:
    """The final training and held-out MLM losses; the encoder export must be there."""
    model_dir = self.pretrain_dir(preset, seed, tokenizer)
    if not os.path.isfile(os.path.join(model_dir, layout.EXPORT_DIR, layout.EXPORT_INFO_FILE)):
      raise ValueError(f"no encoder export in {model_dir}")
    with open(os.path.join(model_dir, layout.EVAL_RESULTS_FILE), encoding="utf-8") as f:
      held_out = json.load(f)
    losses = io_utils.read_metrics_log(model_dir)
    final = report.final_loss(losses, "mlm_loss")
    eval_loss = held_out["eval"]["mlm_loss"]
    return {
        "model_dir": model_dir,
        "steps": max(losses) if losses else 0,
        "final_mlm_loss": final,
        "eval_mlm_loss": eval_loss,
        "eval_step": held_out["global_step"],
        "load_average": os.getloadavg()[1],
        "summary": f"MLM loss {final:.3f} (mean of the last "
        f"{report.last_n(len(losses))} steps), held-out {eval_loss:.3f}",
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
    )

  def finetune_dir(self, tokenizer: Optional[str] = None) -> str:
    """The output dir of the main fine-tuning sweep, or of a compared tokenizer's."""
    return self.tokenizer_path(tokenizer, "finetune") if tokenizer else self.s.path("finetune")

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
        "summary": f"{export_dir} ({report.display_name(best['preset'])}, learning rate "
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
    labels = {
        r["index"]: r["label"] for r in origin_task.read_tsv(self.s.path("task", "test_labels.tsv"))
    }
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
    how often pretraining evaluated."""
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
      if self.s.pretraining_only:
        say(f"\nclaims:       {outputs['claims_md']}")
        say(f"loss curves:  {outputs['mlm_loss_png']}")
        return
      say(f"\nreport:       {outputs['report_md']}")
      say(f"loss curves:  {outputs['mlm_loss_png']}")
      say(f"stability:    {outputs['stability_png']}")
      say(
          f"TensorBoard:  {outputs['tensorboard_dir']}  (tensorboard --logdir "
          f"{outputs['tensorboard_dir']})"
      )
      say(f"SavedModel:   {self.results.get('export', {}).get('export_dir')}")
