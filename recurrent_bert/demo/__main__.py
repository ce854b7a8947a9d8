r"""The whole reproduction, end to end, in one command (`make demo`).

  python -m recurrent_bert.demo [--work_dir=demo_output] [--models=bert,swishrnn]
      [--input_files='my_corpus/*.txt'] [--pretrain_steps=2000] [--size=mini] ...

Stages, each run by the project's own entry points (subprocesses, one log file each):

  corpus         the built-in corpus (docstrings of the installed Python, each module
                 labelled with its library) or --input_files (each document labelled with
                 its file); documents are split into train / dev / test per source. Dev and
                 test documents are never trained on: not in pretraining, not in fine-tuning.
  vocab          a WordPiece vocabulary learned from the train documents (rbert-build-vocab)
  pretrain_data  MLM + NSP TFRecords of the train documents (rbert-create-pretraining-data)
  eval_data      the same of the dev documents: the held-out records every model is
                 evaluated on during pretraining (masks drawn once)
  task           the fine-tuning task "which library (or file) is this passage from?":
                 passages of consecutive sentences, balanced over the --task_classes
                 sources with the most text; train / dev / test from the three document
                 splits, as a custom-task TSV folder (test labels kept apart)
  pretrain       every model x every --pretrain_seeds on the same records, batch and
                 steps (python -m recurrent_bert.pretrain), evaluated on the held-out
                 records 4 times along the way
  finetune       every model x --finetune_learning_rates x --finetune_seeds from its
                 first pretraining seed's encoder (rbert-sweep, which runs
                 recurrent_bert.finetune_glue --task=custom); test accuracy from each
                 run's test predictions and the held-out labels
  export         the best run by dev accuracy -> raw-text SavedModel (recurrent_bert.export)
  query          the SavedModel classifies raw text in a fresh process that imports only
                 tensorflow and tensorflow_text
  tokenizers     with --tokenizers=wordpiece,unigram,bpe (any of them), the tokenisation
                 lecture's comparison: per tokenizer a vocabulary of --vocab_size from the
                 train documents, whole-word-masked records of the train and dev
                 documents, one pretraining of the first of --models (its first seed)
                 and fine-tuning at the middle learning rate x --finetune_seeds, in
                 <work_dir>/tokenizers/<tokenizer>/; the report compares the held-out MLM
                 loss per word and the accuracies
  report         report/report.md (the papers' three claims -- lower MLM loss, stabler
                 fine-tuning across learning rates, better downstream accuracy -- each
                 with its interval over seeds and a verdict; a table per model),
                 report/mlm_loss.png (training and held-out MLM loss, band over seeds),
                 report/stability.png (dev accuracy against learning rate),
                 report/tensorboard/ (event files), report/results.json

Restarting: a finished stage leaves <work_dir>/stages/<stage>.json (written last,
atomically) and is reused by the next run; an interrupted pretraining or fine-tuning run
resumes from the checkpoints in its model dir. The settings that shape the outputs are
recorded in <work_dir>/demo_settings.json: re-running with different ones stops with the
difference named (use another --work_dir). --models, the seeds and the learning rates may
change between runs: new ones are trained, the report covers the ones asked for.
"""

import os
import sys

from absl import flags

from recurrent_bert import cli
from recurrent_bert import config as config_lib
from recurrent_bert.demo import pipeline
from recurrent_bert.demo import settings as settings_lib
from recurrent_bert.demo import stages
from recurrent_bert.demo import work_paths

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines the demo's flags (once, from this entry module: they are the demo's alone)."""
  flags.DEFINE_string(
      "work_dir",
      "demo_output",
      "Where everything goes (created; re-running "
      "with the same --work_dir reuses finished stages).",
  )
  flags.DEFINE_list(
      "input_files",
      ["builtin"],
      "Your corpus instead of the built-in one: "
      "text files or globs, one sentence per line, a blank line between "
      "documents. `builtin` = the docstrings of the installed Python.",
  )
  flags.DEFINE_string(
      "cache_dir",
      None,
      "Where the built-in corpus is built once (default "
      "$RECURRENT_BERT_CACHE or ~/.cache/recurrent_bert).",
  )
  flags.DEFINE_integer(
      "corpus_max_bytes",
      0,
      "Use only the first ~N bytes of the corpus (whole documents); 0 = all of it.",
  )
  flags.DEFINE_list(
      "models",
      list(settings_lib.DEFAULT_FAMILIES),
      "Model families (" + ", ".join(config_lib.FAMILIES) + ") or full preset names.",
  )
  flags.DEFINE_enum("size", "tiny", list(config_lib.SIZES), "Preset size of every family.")
  flags.DEFINE_integer(
      "vocab_size", 8000, "WordPiece vocabulary size (and of each --tokenizers vocabulary)."
  )
  flags.DEFINE_integer(
      "vocab_max_lines",
      60000,
      "Learn the vocabulary from the first N "
      "lines of the (shuffled) train documents; 0 = all (the learner is "
      "slow: ~1.5 min for the whole built-in corpus).",
  )
  flags.DEFINE_integer("seq_length", 64, "Tokens per sequence, pretraining and fine-tuning.")
  flags.DEFINE_integer(
      "max_predictions_per_seq",
      None,
      "Masked positions per sequence (default: 15.6% of --seq_length, BERT's 20 of 128).",
  )
  flags.DEFINE_integer("dupe_factor", 1, "Passes over the corpus with fresh masks.")
  flags.DEFINE_integer("batch_size", 16, "Pretraining batch (sequences per step).")
  flags.DEFINE_integer("pretrain_steps", 800, "Pretraining steps, the same for every model.")
  flags.DEFINE_float("learning_rate", 2e-3, "Pretraining peak learning rate.")
  flags.DEFINE_integer("warmup_steps", None, "Pretraining warmup (default: 10% of steps).")
  flags.DEFINE_float("adam_beta2", 0.999, "Pretraining: Adam's beta_2.")
  flags.DEFINE_float("adam_epsilon", 1e-6, "Pretraining: Adam's epsilon.")
  flags.DEFINE_float("clip_norm", 1.0, "Pretraining: global-norm gradient clipping (0: none).")
  flags.DEFINE_list(
      "pretrain_seeds",
      [str(seed) for seed in settings_lib.DEFAULT_PRETRAIN_SEEDS],
      "One pretraining run per model and seed (the seed sets the weights, the record "
      "order and the dynamic choices; one seed gives every model the same record order, "
      "so the MLM claims pair the models' runs by seed); the loss curves draw the band "
      "between seeds.",
  )
  flags.DEFINE_integer(
      "eval_sequences",
      1024,
      "Held-out pretraining sequences (records of the dev documents) read by each of the "
      "evaluations during pretraining; the same ones for every model.",
  )
  flags.DEFINE_list(
      "finetune_seeds",
      [str(seed) for seed in settings_lib.DEFAULT_FINETUNE_SEEDS],
      "Fine-tuning runs per model and learning rate, one per seed (a range such as 1-8 "
      "counts every seed in it).",
  )
  flags.DEFINE_integer(
      "finetune_steps", settings_lib.DEFAULT_FINETUNE_STEPS, "Fine-tuning steps per run."
  )
  flags.DEFINE_integer("finetune_batch_size", 16, "Fine-tuning batch.")
  flags.DEFINE_list(
      "finetune_learning_rates",
      ["1e-3", "3e-3"],
      "Fine-tuning peak learning rates, every one run for every model and seed "
      "(rbert-sweep): the stability figure draws accuracy against them.",
  )
  flags.DEFINE_integer(
      "task_classes",
      4,
      "Sources (libraries, or your files) the task tells apart: the ones with the most text.",
  )
  flags.DEFINE_integer("task_train_examples", 6000, "Passages in train.tsv (balanced).")
  flags.DEFINE_integer("task_eval_examples", 600, "Passages in dev.tsv and in test.tsv.")
  flags.DEFINE_float(
      "eval_documents_fraction",
      0.08,
      "Fraction of the documents held out for dev, and again for test.",
  )
  flags.DEFINE_integer(
      "seed", 12345, "Seed of the document split, the task passages and the pretraining data."
  )
  flags.DEFINE_integer(
      "jobs",
      2,
      "Runs at a time: fine-tuning runs, and pretraining runs with "
      "--parallel_pretraining. Side by side, each gets an equal share of the cores "
      "(TF_NUM_INTRAOP_THREADS).",
  )
  flags.DEFINE_integer("num_workers", 2, "Worker processes of the pretraining-data tool.")
  flags.DEFINE_list(
      "redo",
      [],
      "Stages to run again although finished, e.g. "
      "pretrain:bert_tiny:seed1 (its model dir is deleted first) or report; later "
      "stages are not redone unless named too. Pretraining and fine-tuning are "
      "seeded, so a redone stage repeats its numbers; only its timing changes.",
  )
  flags.DEFINE_list(
      "tokenizers",
      [],
      "The tokenisation lecture's comparison, after the main runs: for each of these "
      "tokenizers (wordpiece, unigram, bpe) a vocabulary of --vocab_size, one "
      "pretraining of the first of --models on whole-word-masked records and fine-tuning "
      "at the middle learning rate; the report compares the held-out MLM loss per word "
      "and the fine-tuning accuracies. Empty: no comparison.",
  )
  flags.DEFINE_enum(
      "backend",
      "tensorflow",
      ["tensorflow", "jax", "torch"],
      "Keras backend of the pretraining and fine-tuning runs (their KERAS_BACKEND); "
      "export and the query run under TensorFlow whichever it is.",
  )
  flags.DEFINE_bool(
      "pretraining_only",
      False,
      "Stop after the pretraining runs: report/claims.md and mlm_loss.png hold the "
      "papers' MLM claims (no fine-tuning, export or full report; TensorFlow not needed "
      "with --backend=jax).",
  )
  flags.DEFINE_bool(
      "data_only",
      False,
      "Stop after the data stages (corpus, vocabulary, training and held-out records, the "
      "task without --pretraining_only, --tokenizers' vocabularies and records): one "
      "machine prepares them, and a run with the same --work_dir and settings on another "
      "(a GPU machine, say) only trains.",
  )
  flags.DEFINE_bool(
      "prepared_data",
      False,
      "Run no data stage: they must be finished in --work_dir (by --data_only with the "
      "same settings); otherwise stop, in one line, before anything runs.",
  )
  flags.DEFINE_enum(
      "vocabulary",
      "wordpiece",
      ["wordpiece", "unigram", "bpe"],
      "The main vocabulary: WordPiece (tensorflow-text's learner, the papers' choice) or "
      "a SentencePiece model (learned without TensorFlow).",
  )
  flags.DEFINE_bool(
      "parallel_pretraining",
      True,
      "Run --jobs pretraining runs side by side, each on its share of the cores (or of "
      "a GPU shared by several small runs): on 2 CPU cores, two 1-thread runs finished "
      "1.34x the runs per hour of one 2-thread run at a time (benchmarks/side_by_side.py). "
      "Step times are then each run's own under that sharing; --noparallel_pretraining "
      "runs one at a time.",
  )
  flags.DEFINE_multi_string(
      "query",
      None,
      "Your own raw-text query for the exported model "
      "(repeatable; default: passages of held-out test documents).",
  )

  for name in (
      "vocab_size",
      "seq_length",
      "dupe_factor",
      "batch_size",
      "pretrain_steps",
      "finetune_steps",
      "finetune_batch_size",
      "eval_sequences",
      "task_train_examples",
      "task_eval_examples",
      "jobs",
      "num_workers",
  ):
    flags.register_validator(name, lambda v: v >= 1, f"--{name} must be >= 1")
  flags.register_validator("task_classes", lambda v: v >= 2, "--task_classes must be >= 2")
  flags.register_validator("corpus_max_bytes", lambda v: v >= 0, "--corpus_max_bytes >= 0")
  flags.register_validator("vocab_max_lines", lambda v: v >= 0, "--vocab_max_lines >= 0")
  flags.register_validator(
      "eval_documents_fraction",
      lambda v: 0 < v < 0.5,
      "--eval_documents_fraction must be in (0, 0.5)",
  )


def preset_name(model: str, size: str) -> str:
  """--models entry -> preset name: a family gets --size, a preset stays as it is."""
  if model in config_lib.FAMILIES:
    return f"{model}_{size}"
  if model in config_lib.PRESETS:
    return model
  raise ValueError(
      f"--models: unknown model {model!r}; give families "
      f"({', '.join(config_lib.FAMILIES)}) or preset names"
  )


def _numbers(name: str, kind, what: str) -> list:
  """A list flag's distinct values, sorted; at least one. Integers may be given as
  ranges: "1-4,7" is 1, 2, 3, 4, 7.

  Raises:
    ValueError: a value is not a `kind`, or there is none (the message names the flag).
  """
  values = [v.strip() for v in FLAGS[name].value if v.strip()]
  try:
    numbers = sorted({n for v in values for n in settings_lib.expand_number(v, kind)})
  except ValueError:
    raise ValueError(f"--{name}: {what} expected, got {values}") from None
  if not numbers:
    raise ValueError(f"--{name}: give at least one")
  return numbers


def settings_from_flags() -> settings_lib.Settings:
  """The parsed flags as Settings, checked and with their defaults resolved.

  Raises:
    ValueError: a flag's value is not usable (the message names the flag).
  """
  presets = []
  for model in FLAGS.models:
    name = preset_name(model.strip(), FLAGS.size)
    if name not in presets:
      presets.append(name)
  if not presets:
    raise ValueError("--models: give at least one model")
  pretrain_seeds = _numbers("pretrain_seeds", int, "integers")
  finetune_seeds = _numbers("finetune_seeds", int, "integers")
  learning_rates = _numbers("finetune_learning_rates", float, "numbers")
  for name, seeds in (("pretrain_seeds", pretrain_seeds), ("finetune_seeds", finetune_seeds)):
    if seeds[0] < 0:
      raise ValueError(f"--{name}: seeds are >= 0, got {seeds[0]}")
  if not all(0 < lr < 1 for lr in learning_rates):
    raise ValueError(f"--finetune_learning_rates: each must be in (0, 1), got {learning_rates}")
  max_predictions = FLAGS.max_predictions_per_seq or max(1, round(FLAGS.seq_length * 0.15625))
  if max_predictions > FLAGS.seq_length:
    raise ValueError("--max_predictions_per_seq must be <= --seq_length")
  warmup = FLAGS.warmup_steps if FLAGS.warmup_steps is not None else FLAGS.pretrain_steps // 10
  if not 0 <= warmup < FLAGS.pretrain_steps:
    raise ValueError("--warmup_steps must be in [0, --pretrain_steps)")
  if not 0 < FLAGS.adam_beta2 < 1 or FLAGS.adam_epsilon <= 0 or FLAGS.clip_norm < 0:
    raise ValueError("--adam_beta2 must be in (0, 1), --adam_epsilon > 0, --clip_norm >= 0")
  for preset in presets:
    config_lib.PRESETS[preset].check_sequence_length(FLAGS.seq_length, "--seq_length", preset)
  queries = list(FLAGS.query) if FLAGS.query else None
  tokenizers = list(dict.fromkeys(t.strip().lower() for t in FLAGS.tokenizers if t.strip()))
  unknown = [t for t in tokenizers if t not in work_paths.TOKENIZERS]
  if unknown:
    raise ValueError(
        f"--tokenizers: unknown {', '.join(unknown)}; give any of "
        f"{', '.join(work_paths.TOKENIZERS)}"
    )
  if tokenizers and FLAGS.vocabulary != work_paths.WORDPIECE:
    raise ValueError(
        "--tokenizers compares against a WordPiece main vocabulary: drop "
        f"--vocabulary={FLAGS.vocabulary} or --tokenizers"
    )
  if FLAGS.data_only and FLAGS.prepared_data:
    raise ValueError("--data_only makes the data and --prepared_data refuses to: give one")
  if not FLAGS.pretraining_only and FLAGS.backend != "tensorflow" and not FLAGS.data_only:
    try:
      import tensorflow  # noqa: F401  (fine-tuning, export and the query need it)
    except ImportError:
      raise ValueError(
          f"--backend={FLAGS.backend}: fine-tuning, export and the query run under "
          "TensorFlow, which is not installed here; add --pretraining_only for the MLM "
          "claims alone"
      ) from None
  return settings_lib.Settings(
      backend=FLAGS.backend,
      pretraining_only=FLAGS.pretraining_only,
      data_only=FLAGS.data_only,
      prepared_data=FLAGS.prepared_data,
      parallel_pretraining=FLAGS.parallel_pretraining,
      vocabulary=FLAGS.vocabulary,
      work_dir=os.path.abspath(FLAGS.work_dir),
      input_files=[f.strip() for f in FLAGS.input_files if f.strip()],
      cache_dir=FLAGS.cache_dir,
      corpus_max_bytes=FLAGS.corpus_max_bytes,
      presets=presets,
      size=FLAGS.size,
      vocab_size=FLAGS.vocab_size,
      vocab_max_lines=FLAGS.vocab_max_lines,
      seq_length=FLAGS.seq_length,
      max_predictions_per_seq=max_predictions,
      dupe_factor=FLAGS.dupe_factor,
      batch_size=FLAGS.batch_size,
      pretrain_steps=FLAGS.pretrain_steps,
      learning_rate=FLAGS.learning_rate,
      warmup_steps=warmup,
      adam_beta2=FLAGS.adam_beta2,
      adam_epsilon=FLAGS.adam_epsilon,
      clip_norm=FLAGS.clip_norm,
      pretrain_seeds=pretrain_seeds,
      eval_sequences=FLAGS.eval_sequences,
      finetune_seeds=finetune_seeds,
      finetune_steps=FLAGS.finetune_steps,
      finetune_batch_size=FLAGS.finetune_batch_size,
      finetune_learning_rates=learning_rates,
      task_train_examples=FLAGS.task_train_examples,
      task_eval_examples=FLAGS.task_eval_examples,
      eval_documents_fraction=FLAGS.eval_documents_fraction,
      seed=FLAGS.seed,
      task_classes=FLAGS.task_classes,
      jobs=FLAGS.jobs,
      num_workers=FLAGS.num_workers,
      queries=queries,
      redo=[r.strip() for r in FLAGS.redo if r.strip()],
      tokenizers=tokenizers,
  )


def main(argv):
  """Runs the demo: exit 0 when done, 1 when a stage failed, 2 for bad flags."""
  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  try:
    settings = settings_from_flags()
  except ValueError as e:
    cli.fail(str(e))
  # Quiet TensorFlow start-up in every stage's process (they inherit it); numerics unaffected.
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  # This process's own Keras (the reports count parameters) on --backend's, unless told
  # otherwise: a JAX machine need not have TensorFlow, Keras' default.
  os.environ.setdefault("KERAS_BACKEND", settings.backend)
  demo = pipeline.Demo(settings)
  try:
    settings_lib.check_settings(settings)
    demo.run()
  except (settings_lib.SettingsMismatch, stages.StageError) as e:
    stages.say(f"\ndemo stopped: {e}")
    stages.say("Fix the cause and run the same command again: finished stages are reused.")
    sys.exit(1)
  except KeyboardInterrupt:
    stages.say(
        "\ninterrupted: run the same command again to resume (finished stages are "
        "reused, pretraining and fine-tuning resume from their checkpoints)."
    )
    sys.exit(130)
  demo.print_summary()


define_flags()

if __name__ == "__main__":
  cli.run(main)
