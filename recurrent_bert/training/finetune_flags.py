"""The flags finetune_glue and finetune_squad share, and how they become a run's parts.

Where the encoder comes from, in order: the model_dir itself (a resumed run, or
--mode=eval/predict), else --init_checkpoint (a pretraining model_dir or its encoder/
export, a converted model dir, a checkpoint prefix) with its model_config.json, vocab.txt
and recorded casing, else --model_config (random initialisation: tests, ablations).
"""

import dataclasses
import os
import sys
from typing import Optional

from absl import flags

from recurrent_bert.training import optimizer_flags
from recurrent_bert.training import run_flags
from recurrent_bert.training.run_flags import fail

FLAGS = flags.FLAGS


def define_flags(*, learning_rate: float, train_batch_size: int, max_seq_length: int,
                 num_train_epochs: float) -> None:
  """Defines the shared flags; defaults are the entry point's paper protocol."""
  flags.DEFINE_enum("mode", "train_and_eval", ["train", "eval", "predict", "train_and_eval"],
                    "train: fine-tune only; eval: dev metrics of --checkpoint; predict: "
                    "prediction files of --checkpoint; train_and_eval: fine-tune with "
                    "evaluation, keep the best checkpoint, then evaluate and predict.")
  flags.DEFINE_string("model_dir", None, "Checkpoints, best/, eval_results.json, "
                      "predictions/, TensorBoard logs (see training/finetuning.py).")
  flags.DEFINE_string("init_checkpoint", None,
                      "Encoder to start from: a pretraining model_dir or its encoder/ "
                      "export, a tools/convert_checkpoint.py output dir, or a prefix.")
  flags.DEFINE_string("model_config", None,
                      "Preset or ModelConfig JSON, for a run without --init_checkpoint.")
  flags.DEFINE_string("checkpoint", None, "eval/predict: the checkpoint (prefix or dir); "
                      "default: model_dir/best, else model_dir's latest.")
  flags.DEFINE_string("vocab_file", None,
                      "vocab.txt; default: the one beside --init_checkpoint / in model_dir.")
  flags.DEFINE_boolean("do_lower_case", None,
                       "Tokenizer casing; default: as recorded by the checkpoint, else true.")
  flags.DEFINE_string("cache_dir", None, "Feature caches; default model_dir/features.")
  flags.DEFINE_integer("max_seq_length", max_seq_length, "Tokens per packed input.")
  flags.DEFINE_integer("train_batch_size", train_batch_size, "Global training batch.")
  flags.DEFINE_integer("eval_batch_size", 32, "Global evaluation batch.")
  flags.DEFINE_float("num_train_epochs", num_train_epochs, "Epochs (unless max steps).")
  flags.DEFINE_integer("max_train_steps", None, "Training steps; overrides epochs.")
  optimizer_flags.define_optimizer_flags(learning_rate=learning_rate, warmup_steps=None,
                                         warmup_proportion=0.1)
  flags.DEFINE_integer("seed", 0, "Seeds the head's weights, dropout and data order.")
  flags.DEFINE_integer("shuffle_buffer_size", 100000, "Training examples shuffled together.")
  flags.DEFINE_integer("eval_every_steps", 0,
                       "train_and_eval: evaluate (and maybe keep as best) every N steps; "
                       "0 = at the end only.")
  flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every N steps.")
  flags.DEFINE_integer("keep_checkpoint_max", 2, "Training checkpoints kept.")
  flags.DEFINE_integer("log_steps", 100, "Progress line every N steps.")
  flags.DEFINE_integer("steps_per_loop", 100, "Steps per tf.function call.")
  run_flags.define_execution_flags()
  flags.mark_flags_as_required(["model_dir"])
  for name in ("max_seq_length", "train_batch_size", "eval_batch_size",
               "save_checkpoints_steps", "keep_checkpoint_max", "log_steps",
               "steps_per_loop", "shuffle_buffer_size"):
    flags.register_validator(name, lambda v: v >= 1, f"--{name} must be >= 1")
  flags.register_validator("max_train_steps", lambda v: v is None or v >= 1,
                           "--max_train_steps must be >= 1")
  flags.register_validator("num_train_epochs", lambda v: v > 0,
                           "--num_train_epochs must be > 0")
  flags.register_validator("eval_every_steps", lambda v: v >= 0,
                           "--eval_every_steps must be >= 0")


@dataclasses.dataclass
class RunParts:
  """What the shared flags resolve to."""
  model_config: object
  vocab_file: str
  do_lower_case: bool
  init_checkpoint: Optional[str]
  cache_dir: str


def resolve_run(worker_id: int = 0) -> RunParts:
  """Model config, vocabulary and casing from the flags (module docstring), checked.

  Each MultiWorkerMirrored worker converts the data itself, into its own feature cache
  (worker 0 into --cache_dir), so no worker reads a cache another is rewriting.
  """
  # pylint: disable=g-import-not-at-top
  from recurrent_bert.config import ConfigError, resolve_config
  from recurrent_bert.data import tokenization
  from recurrent_bert.training import checkpoints, finetuning
  # pylint: enable=g-import-not-at-top
  model_dir = FLAGS.model_dir
  resumed = os.path.exists(os.path.join(model_dir, checkpoints.MODEL_CONFIG_FILE))
  init = FLAGS.init_checkpoint
  source_dir = None
  try:
    if resumed:
      config = checkpoints.read_model_config(model_dir)
      source_dir = model_dir
    elif init:
      _, source_dir, _ = checkpoints.resolve_checkpoint(init)
      config = checkpoints.read_model_config(source_dir)
    elif FLAGS.model_config:
      config = resolve_config(FLAGS.model_config)
    else:
      fail("give --init_checkpoint (a pretrained encoder) or --model_config")
  except (ConfigError, checkpoints.CheckpointNotFoundError) as e:
    fail(f"--init_checkpoint: {e}" if init and not resumed else str(e))
  if FLAGS.mode in ("eval", "predict") and not resumed and not FLAGS.checkpoint:
    fail(f"--mode={FLAGS.mode} needs a trained --model_dir or --checkpoint")

  vocab_file = FLAGS.vocab_file
  candidates = [d for d in (model_dir, source_dir, init) if d]
  if vocab_file is None:
    vocab_file = next((os.path.join(d, "vocab.txt") for d in candidates
                       if os.path.isfile(os.path.join(d, "vocab.txt"))), None)
  if vocab_file is None or not os.path.isfile(vocab_file):
    fail(f"--vocab_file: {vocab_file!r} does not exist" if vocab_file else
         "no vocab.txt beside --init_checkpoint or in --model_dir; pass --vocab_file")
  vocab_size = len(tokenization.load_vocab(vocab_file))
  if vocab_size > config.vocab_size:
    fail(f"--vocab_file {vocab_file} has {vocab_size} tokens, the model only "
         f"{config.vocab_size} embeddings")
  if not init and not resumed and vocab_size != config.vocab_size:
    config = config.replace(vocab_size=vocab_size)
  if (config.position_embedding == "absolute" and
      FLAGS.max_seq_length > config.max_position_embeddings):
    fail(f"--max_seq_length={FLAGS.max_seq_length} exceeds the model's "
         f"max_position_embeddings={config.max_position_embeddings}")

  do_lower_case = FLAGS.do_lower_case
  if do_lower_case is None and resumed and finetuning.is_finetuning_dir(model_dir):
    do_lower_case = finetuning.TaskInfo.read(model_dir).do_lower_case
  if do_lower_case is None and source_dir:
    from recurrent_bert.serving import recorded_lower_case  # pylint: disable=g-import-not-at-top
    do_lower_case = recorded_lower_case(source_dir)
  if do_lower_case is None:
    do_lower_case = True
  cache_dir = FLAGS.cache_dir or os.path.join(model_dir, "features")
  if worker_id:
    cache_dir = os.path.join(cache_dir, f"worker_{worker_id}")
  return RunParts(config, vocab_file, do_lower_case, None if resumed else init, cache_dir)


def settings_from_flags():
  from recurrent_bert.training.finetuning import FinetuneSettings  # pylint: disable=g-import-not-at-top
  names = [f.name for f in dataclasses.fields(FinetuneSettings)]
  return FinetuneSettings(**{name: FLAGS[name].value for name in names})


def run_task(strategy, task, parts: RunParts, is_chief: bool, worker_id: int):
  """Builds the Finetuner and runs --mode; a non-finite loss exits with status 1.

  Returns:
    The evaluation results ({} for train / predict).
  """
  # pylint: disable=g-import-not-at-top
  from absl import logging
  from recurrent_bert.training import finetuning, loop
  # pylint: enable=g-import-not-at-top
  if FLAGS.mode in ("train", "train_and_eval"):
    optimizer_flags.check_optimizer_flags(strategy.num_replicas_in_sync)
  finetuner = finetuning.Finetuner(strategy, task, settings_from_flags(), parts.model_config,
                                   parts.init_checkpoint, parts.vocab_file, is_chief,
                                   worker_id)
  try:
    return finetuner.run(FLAGS.mode, FLAGS.checkpoint)
  except loop.NonFiniteLossError as e:
    logging.error("%s", e)
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
