"""The flags finetune_glue and finetune_squad share, and how they become a run's parts.

Where the encoder comes from, in order: the model_dir itself (a resumed run, or
--mode=eval/predict), else --init_checkpoint (any model dir the package writes, resolved by
`saving.open_model`, with its model_config.json, vocabulary and recorded
casing), else --model_config (random initialisation: tests, ablations). A model_dir that
already holds a fine-tuned model fixes the settings it was trained with (sequence length,
casing, vocabulary, SQuAD window settings): they are read back, and a flag that
contradicts them is refused naming both values.
"""

import dataclasses
import os
from typing import Optional, Sequence

from absl import flags

from recurrent_bert import cli
from recurrent_bert import model_dir as layout
from recurrent_bert.config import LAYER_MIXES
from recurrent_bert.flags import execution as run_flags
from recurrent_bert.flags import optimization as optimization_flags
from recurrent_bert.flags import vocabulary as vocabulary_flags

FLAGS = flags.FLAGS


def define_flags(
    *, learning_rate: float, train_batch_size: int, max_seq_length: int, num_train_epochs: float
) -> None:
  """Defines the shared flags; defaults are the entry point's paper protocol."""
  flags.DEFINE_enum(
      "mode",
      "train_and_eval",
      ["train", "eval", "predict", "train_and_eval"],
      "train: fine-tune only; eval: dev metrics of --checkpoint; predict: "
      "prediction files of --checkpoint; train_and_eval: fine-tune with "
      "evaluation, keep the best checkpoint, then evaluate and predict.",
  )
  flags.DEFINE_string(
      "model_dir",
      None,
      "Checkpoints, best/, eval_results.json, "
      "predictions/, TensorBoard logs (see training/finetuning_runner.py).",
  )
  flags.DEFINE_string(
      "init_checkpoint",
      None,
      "Encoder to start from: a pretraining model_dir or its encoder/ "
      "export, a recurrent_bert/tools/convert_checkpoint.py output dir, or a prefix.",
  )
  flags.DEFINE_string(
      "model_config", None, "Preset or ModelConfig JSON, for a run without --init_checkpoint."
  )
  flags.DEFINE_string(
      "checkpoint",
      None,
      "eval/predict: the checkpoint (prefix or dir); "
      "default: model_dir/best, else model_dir's latest.",
  )
  flags.DEFINE_string(
      "vocab_file",
      None,
      "vocab.txt or a SentencePiece .model; default: the one beside --init_checkpoint / in "
      "model_dir.",
  )
  flags.DEFINE_boolean(
      "do_lower_case",
      None,
      "Tokenizer casing; default: as recorded by the checkpoint, else true. A SentencePiece "
      "model's own casing is used (a contradicting flag is refused).",
  )
  flags.DEFINE_string("cache_dir", None, "Feature caches; default model_dir/features.")
  flags.DEFINE_boolean(
      "skip_bad_rows",
      False,
      "Skip task-data rows that fail validation (bad score or label, empty answer, duplicate "
      "id ...) instead of stopping at the first; the count skipped is reported per file.",
  )
  flags.DEFINE_enum(
      "layer_mix",
      "last",
      list(LAYER_MIXES),
      "Encoder layers the task head reads: last, second_to_last, sum_last_four, "
      "concat_last_four, mix_last_four or mix_all (ELMo's learned scalar mix); 'four' = "
      "min(4, layers).",
  )
  flags.DEFINE_boolean(
      "feature_based",
      False,
      "Classification and tagging: freeze the encoder and train a 2-layer BiLSTM on the "
      "--layer_mix features (BERT Table 7) instead of fine-tuning it.",
  )
  flags.DEFINE_integer("max_seq_length", max_seq_length, "Tokens per packed input.")
  flags.DEFINE_integer("train_batch_size", train_batch_size, "Global training batch.")
  flags.DEFINE_integer("eval_batch_size", 32, "Global evaluation batch.")
  flags.DEFINE_float("num_train_epochs", num_train_epochs, "Epochs (unless max steps).")
  flags.DEFINE_integer("max_train_steps", None, "Training steps; overrides epochs.")
  optimization_flags.define_flags(
      learning_rate=learning_rate, warmup_steps=None, warmup_proportion=0.1
  )
  flags.DEFINE_integer("seed", 0, "Seeds the head's weights, dropout and data order.")
  flags.DEFINE_integer("shuffle_buffer_size", 100000, "Training examples shuffled together.")
  flags.DEFINE_integer(
      "eval_every_steps",
      0,
      "train_and_eval: evaluate (and maybe keep as best) every N steps; 0 = at the end only.",
  )
  flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every N steps.")
  flags.DEFINE_integer("keep_checkpoint_max", 2, "Training checkpoints kept.")
  flags.DEFINE_integer("log_steps", 100, "Progress line every N steps.")
  flags.DEFINE_integer("steps_per_loop", 100, "Steps per tf.function call.")
  run_flags.define_flags()
  flags.mark_flags_as_required(["model_dir"])
  run_flags.register_size_validators(("train_batch_size", "eval_batch_size"))
  for name in (
      "max_seq_length",
      "save_checkpoints_steps",
      "keep_checkpoint_max",
      "log_steps",
      "steps_per_loop",
  ):
    flags.register_validator(name, lambda v: v >= 1, f"--{name} must be >= 1")
  flags.register_validator(
      "max_train_steps", lambda v: v is None or v >= 1, "--max_train_steps must be >= 1"
  )
  flags.register_validator("num_train_epochs", lambda v: v > 0, "--num_train_epochs must be > 0")
  flags.register_validator("eval_every_steps", lambda v: v >= 0, "--eval_every_steps must be >= 0")


@dataclasses.dataclass
class RunParts:
  """What the shared flags resolve to."""

  model_config: object
  vocab_file: str
  do_lower_case: bool
  init_checkpoint: Optional[str]
  cache_dir: str


def help_groups(task_flags):
  """--help groups of a fine-tuning command whose own flags are `task_flags`."""
  return {
      "task and data": (
          "run_dir",
          *task_flags,
          "max_seq_length",
          "cache_dir",
          "skip_bad_rows",
          "shuffle_buffer_size",
      ),
      "model": (
          "init_checkpoint",
          "model_config",
          "vocab_file",
          "do_lower_case",
          "layer_mix",
          "feature_based",
      ),
      "mode and output": (
          "mode",
          "model_dir",
          "checkpoint",
          "eval_every_steps",
          "save_checkpoints_steps",
          "keep_checkpoint_max",
          "log_steps",
      ),
      "optimisation": optimization_flags.OPTIMIZATION_HELP + ("seed",),
      "execution": run_flags.EXECUTION_HELP + ("steps_per_loop",),
  }


# Path flags every fine-tuning command has; --run_dir applies to these and the command's
# own (data files).
PATH_FLAGS = ("model_dir", "init_checkpoint", "checkpoint", "vocab_file", "cache_dir")
# Settings a fine-tuned model was trained with (task_info.json). eval, predict and a
# resumed run use the recorded value; a flag that contradicts it is refused.
RECORDED_SETTINGS = (
    "max_seq_length",
    "do_lower_case",
    "doc_stride",
    "max_query_length",
    "max_answer_length",
    "document_context",
    "layer_mix",
    "feature_based",
)


def _use_recorded_settings(info, model_dir: str) -> None:
  for name in RECORDED_SETTINGS:
    if name not in FLAGS:
      continue
    recorded = getattr(info, name)
    if FLAGS[name].present and FLAGS[name].value != recorded:
      cli.fail(
          f"--{name}={FLAGS[name].value} differs from {name}={recorded} recorded in "
          f"{os.path.join(model_dir, layout.TASK_INFO_FILE)} when the model was trained; "
          "drop the flag (the recorded value is used) or give a new --model_dir"
      )
    FLAGS[name].value = recorded


def _same_file(path_a: str, path_b: str) -> bool:
  from recurrent_bert.data import feature_cache

  return feature_cache.file_fingerprint(path_a) == feature_cache.file_fingerprint(path_b)


def resolve_run(worker_id: int = 0, path_flags: Sequence[str] = ()) -> RunParts:
  """Model config, vocabulary and casing from the flags (module docstring), checked.

  `path_flags`: the command's own path flags, taken relative to --run_dir too.
  Each MultiWorkerMirrored worker converts the data itself, into its own feature cache
  (worker 0 into --cache_dir), so no worker reads a cache another is rewriting.
  """

  from recurrent_bert import saving
  from recurrent_bert.config import ConfigError
  from recurrent_bert.config import resolve_config
  from recurrent_bert.data import vocab as vocab_lib

  run_flags.apply_run_dir(PATH_FLAGS + tuple(path_flags))
  run_flags.check_output_path("model_dir")
  run_flags.check_output_path("cache_dir")
  model_dir = FLAGS.model_dir
  resumed = layout.exists(os.path.join(model_dir, layout.MODEL_CONFIG_FILE))
  init = FLAGS.init_checkpoint
  recorded_vocab = recorded_casing = None
  try:
    if resumed:
      config = saving.read_model_config(model_dir)
      if layout.is_finetuning_dir(model_dir):
        _use_recorded_settings(layout.TaskInfo.read(model_dir), model_dir)
      tokenizer_info = layout.read_tokenizer_info(model_dir)
      recorded_casing = tokenizer_info and tokenizer_info.do_lower_case
      # vocab.txt, or sentencepiece.model as tokenizer.json names it.
      vocab_name = tokenizer_info.vocab_file if tokenizer_info else layout.VOCAB_FILE
      if layout.exists(os.path.join(model_dir, vocab_name)):
        recorded_vocab = os.path.join(model_dir, vocab_name)
    elif init:
      source = saving.open_model(init)
      config = source.config
      recorded_vocab, recorded_casing = source.vocab_file, source.do_lower_case
    elif FLAGS.model_config:
      config = resolve_config(FLAGS.model_config)
    else:
      cli.fail("give --init_checkpoint (a pretrained encoder) or --model_config")
  except (ConfigError, ValueError) as e:
    cli.fail(f"--init_checkpoint: {e}" if init and not resumed else str(e))
  if FLAGS.mode in ("eval", "predict") and not resumed and not FLAGS.checkpoint:
    cli.fail(f"--mode={FLAGS.mode} needs a trained --model_dir or --checkpoint")

  vocab_file = FLAGS.vocab_file
  if vocab_file is not None and not layout.exists(vocab_file):
    cli.fail(f"--vocab_file: {vocab_file!r} does not exist")
  if vocab_file is None:
    vocab_file = recorded_vocab
  elif resumed and recorded_vocab and not _same_file(vocab_file, recorded_vocab):
    cli.fail(
        f"--vocab_file={vocab_file} differs from {recorded_vocab}, the vocabulary "
        "the model in --model_dir was trained with; drop the flag or give a new "
        "--model_dir"
    )
  if vocab_file is None:
    where = model_dir if resumed else init
    cli.fail(
        f"{where!r} records no vocabulary ({layout.VOCAB_FILE} or "
        f"{layout.SENTENCEPIECE_MODEL_FILE}); pass --vocab_file (the "
        "vocabulary the encoder was pretrained with)"
        if where
        else "--model_config starts from random weights: pass --vocab_file"
    )
  try:
    vocabulary = vocab_lib.read_vocabulary(vocab_file)
  except ValueError as e:
    cli.fail(str(e))
  vocab_size = vocabulary.vocab_size
  if vocab_size > config.vocab_size:
    cli.fail(
        f"--vocab_file {vocab_file} has {vocab_size} tokens, the model only "
        f"{config.vocab_size} embeddings"
    )
  if not init and not resumed and vocab_size != config.vocab_size:
    config = config.replace(vocab_size=vocab_size)
  config.check_sequence_length(FLAGS.max_seq_length, "--max_seq_length")

  do_lower_case = vocabulary_flags.resolve_casing(
      vocabulary, vocab_file, FLAGS.do_lower_case, recorded_casing
  )
  cache_dir = FLAGS.cache_dir or os.path.join(model_dir, layout.FEATURES_DIR)
  if worker_id:
    cache_dir = os.path.join(cache_dir, f"worker_{worker_id}")
  return RunParts(config, vocab_file, do_lower_case, None if resumed else init, cache_dir)


def settings_from_flags():
  from recurrent_bert.training.finetuning_runner import FinetuneSettings

  names = [f.name for f in dataclasses.fields(FinetuneSettings)]
  return FinetuneSettings(**{name: FLAGS[name].value for name in names})


def run_task(strategy, adapter, parts: RunParts, is_chief: bool, worker_id: int):
  """Builds the Finetuner of `adapter` (a training/finetuning_runner.py `TaskAdapter`) and runs
  --mode; a non-finite loss exits with status 1, Ctrl-C with 130 (`cli.run`: the loop has
  saved the last completed step).

  Returns:
    The evaluation results ({} for train / predict).
  """

  from recurrent_bert.training import finetuning_runner
  from recurrent_bert.training import loop

  if FLAGS.mode in ("train", "train_and_eval"):
    optimization_flags.check_optimizer_flags(strategy.num_replicas_in_sync)
  from recurrent_bert.models import task_kinds

  if FLAGS.feature_based and not task_kinds.get(adapter.info.kind).allows_feature_based:
    cli.fail(f"--feature_based is for classification and tagging, not a {adapter.info.kind} task")
  from recurrent_bert.layers.layer_combination import layers_read

  try:  # before any model is built: an encoder too shallow for the mix
    layers_read(FLAGS.layer_mix, parts.model_config.num_layers)
  except ValueError as e:
    cli.fail(f"--layer_mix: {e}")
  # The head's architecture flags are recorded with the task (task_info.json).
  adapter.info = dataclasses.replace(
      adapter.info, layer_mix=FLAGS.layer_mix, feature_based=FLAGS.feature_based
  )
  finetuner = finetuning_runner.Finetuner(
      strategy,
      adapter,
      settings_from_flags(),
      parts.model_config,
      parts.init_checkpoint,
      parts.vocab_file,
      is_chief,
      worker_id,
  )
  with cli.ends_on(loop.NonFiniteLossError, status=1):
    return finetuner.run(FLAGS.mode, FLAGS.checkpoint)


def run_and_report(
    strategy,
    adapter,
    parts: RunParts,
    is_chief: bool,
    worker_id: int,
    shown_metrics: Optional[Sequence[str]] = None,
):
  """`run_task`, with what every fine-tuning command adds around it.

  Before: with --skip_bad_rows, the rows the readers skipped ({file: count}, the adapter's
  `skipped_rows` when it keeps them; each was logged once) go to model_dir's
  skipped_rows.json. After an evaluation: one line per eval split with its metrics
  (`shown_metrics`: only these, in this order).

  Returns:
    The evaluation results ({} for train / predict).
  """
  from recurrent_bert import io_utils

  skipped = getattr(adapter, "skipped_rows", None)
  if FLAGS.skip_bad_rows and is_chief and skipped is not None:
    io_utils.atomic_write_json(os.path.join(FLAGS.model_dir, layout.SKIPPED_ROWS_FILE), skipped)
  results = run_task(strategy, adapter, parts, is_chief, worker_id)
  if results:
    print(f"eval results ({os.path.join(FLAGS.model_dir, layout.EVAL_RESULTS_FILE)}):")
    for split in adapter.eval_splits:
      names = shown_metrics or list(results[split])
      print(f"  {split}: " + ", ".join(f"{k}={results[split][k]:.4f}" for k in names))
  return results
