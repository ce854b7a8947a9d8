r"""Pretraining entry point: MLM (+ NSP) on TFRecords, under any tf.distribute strategy.

  python -m recurrent_bert.pretrain --flagfile=configs/pretrain/tiny_bert.flags --run_dir=runs/tiny

Flags on the command line override the flagfile; relative paths are taken from --run_dir.
Re-running the same command resumes from the latest checkpoint in --model_dir. The
--model_dir layout is in recurrent_bert/model_dir.py; the model_dir itself (or its final
encoder/ export) is what fine-tuning's --init_checkpoint and `recurrent_bert.export` take.
"""

import os
import sys

from absl import flags
from absl import logging

from recurrent_bert import cli
from recurrent_bert.flags import optimization as optimizer_flags
from recurrent_bert.flags import execution as run_flags

FLAGS = flags.FLAGS

# Model and data.
flags.DEFINE_string("model_config", "bert_base",
                    "Preset name (e.g. bert_base, swishrnn_tiny) or a ModelConfig JSON file.")
flags.DEFINE_integer("vocab_size", None,
                     "Overrides the config's vocab_size. Default: the size of --vocab_file "
                     "when given, else the config's.")
flags.DEFINE_string("vocab_file", None,
                    "vocab.txt of the data; needed by --dynamic_masking, copied to the export.")
flags.DEFINE_boolean("do_lower_case", True,
                     "Casing of --vocab_file's tokenizer, recorded in the encoder export so "
                     "raw-text serving tokenizes as the data tool did.")
flags.DEFINE_list("input_files", None, "TFRecord files or globs (comma-separated, gs:// ok).")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length of the records.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per sequence.")
flags.DEFINE_boolean("use_nsp", True, "Train the next-sentence head too.")
flags.DEFINE_boolean("dynamic_masking", False,
                     "Records are unmasked: mask them while reading, fresh every epoch.")
flags.DEFINE_float("masked_lm_prob", 0.15, "Dynamic masking: fraction of tokens masked.")
flags.DEFINE_float("mask_token_prob", 0.8, "Dynamic masking: share replaced by [MASK].")
flags.DEFINE_float("random_token_prob", 0.1, "Dynamic masking: share replaced at random.")
flags.DEFINE_boolean("do_whole_word_mask", False, "Dynamic masking: whole words.")
flags.DEFINE_integer("shuffle_buffer_size", 10000, "Examples in the shuffle buffer.")
# Optimisation.
flags.DEFINE_integer("train_batch_size", 256, "Global batch size (all replicas).")
flags.DEFINE_integer("num_train_steps", 1000000, "Total training steps.")
optimizer_flags.define_optimizer_flags(learning_rate=1e-4, warmup_steps=10000)
# Execution.
flags.DEFINE_integer("steps_per_loop", 100, "Steps per tf.function call (host round trip).")
run_flags.define_execution_flags()
run_flags.define_run_dir_flag()
flags.DEFINE_integer("seed", 0, "Seeds the weights, the input order and dynamic masks.")
# Output.
flags.DEFINE_string("model_dir", None, "Checkpoints, summaries and the final export.")
flags.DEFINE_string("init_checkpoint", None,
                    "Weights to start from (no optimizer/step): a phase 1 model_dir or "
                    "checkpoint for phase 2, or an encoder export for a warm start.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every this many steps.")
flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept.")
flags.DEFINE_integer("log_steps", 100, "Progress line and summaries every this many steps.")
flags.mark_flags_as_required(["input_files", "model_dir"])

for _name in ("max_seq_length", "max_predictions_per_seq", "train_batch_size",
              "num_train_steps", "steps_per_loop", "save_checkpoints_steps",
              "keep_checkpoint_max", "log_steps", "shuffle_buffer_size"):
  flags.register_validator(_name, lambda v: v is not None and v >= 1,
                           f"--{_name} must be >= 1")
flags.register_multi_flags_validator(
    ["warmup_steps", "num_train_steps"], lambda f: f["warmup_steps"] < f["num_train_steps"],
    "--warmup_steps must be < --num_train_steps")
flags.register_multi_flags_validator(
    ["max_seq_length", "max_predictions_per_seq"],
    lambda f: f["max_predictions_per_seq"] <= f["max_seq_length"],
    "--max_predictions_per_seq must be <= --max_seq_length")
flags.register_multi_flags_validator(
    ["dynamic_masking", "vocab_file"], lambda f: not f["dynamic_masking"] or f["vocab_file"],
    "--dynamic_masking needs --vocab_file (for the [MASK]/[CLS]/[SEP] ids)")
fail = run_flags.fail
HELP_GROUPS = {
    "data": ("run_dir", "input_files", "vocab_file", "do_lower_case", "max_seq_length",
             "max_predictions_per_seq", "use_nsp", "dynamic_masking", "masked_lm_prob",
             "mask_token_prob", "random_token_prob", "do_whole_word_mask",
             "shuffle_buffer_size"),
    "model": ("model_config", "vocab_size", "init_checkpoint"),
    "optimisation": optimizer_flags.OPTIMIZATION_HELP + ("seed",),
    "execution": run_flags.EXECUTION_HELP + ("steps_per_loop",),
    "output": ("model_dir", "save_checkpoints_steps", "keep_checkpoint_max", "log_steps"),
}
PATH_FLAGS = ("vocab_file", "input_files", "model_dir", "init_checkpoint")


def resolve_model_config():
  """The ModelConfig from --model_config, --vocab_size / --vocab_file, checked."""
  from recurrent_bert.config import ConfigError, resolve_config  # pylint: disable=g-import-not-at-top
  from recurrent_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  try:
    config = resolve_config(FLAGS.model_config)
  except ConfigError as e:
    fail(f"--model_config: {e}")
  vocab_size = FLAGS.vocab_size
  if FLAGS.vocab_file and not tf_exists(FLAGS.vocab_file):
    fail(f"--vocab_file: {FLAGS.vocab_file!r} does not exist; make it with: python -m "
         f"tools.build_vocab --input_files=<your text or builtin> --output_file="
         f"{FLAGS.vocab_file} (or see the data commands in the flagfile's header)")
  if vocab_size is None and FLAGS.vocab_file:
    try:
      vocab_size = len(tokenization.load_vocab(FLAGS.vocab_file))
    except ValueError as e:  # InputError included: a malformed vocabulary, named
      fail(str(e))
  if vocab_size is not None and vocab_size != config.vocab_size:
    config = config.replace(vocab_size=vocab_size)
  if (config.position_embedding == "absolute" and
      FLAGS.max_seq_length > config.max_position_embeddings):
    fail(f"--max_seq_length={FLAGS.max_seq_length} exceeds the model's "
         f"max_position_embeddings={config.max_position_embeddings}")
  return config


def check_inputs():
  """Everything that can fail on the user's input, before any model is built."""
  from recurrent_bert.data import dynamic_masking, tokenization  # pylint: disable=g-import-not-at-top
  from recurrent_bert import io_utils  # pylint: disable=g-import-not-at-top
  from recurrent_bert.data import pretraining_dataset  # pylint: disable=g-import-not-at-top
  from recurrent_bert.io_utils import InputError  # pylint: disable=g-import-not-at-top
  from recurrent_bert.training import checkpoints  # pylint: disable=g-import-not-at-top

  masker = None
  try:
    if FLAGS.dynamic_masking:
      masking = dynamic_masking.MaskingConfig(
          max_predictions_per_seq=FLAGS.max_predictions_per_seq,
          masked_lm_prob=FLAGS.masked_lm_prob, mask_token_prob=FLAGS.mask_token_prob,
          random_token_prob=FLAGS.random_token_prob,
          whole_word_mask=FLAGS.do_whole_word_mask)
      masker = dynamic_masking.DynamicMasker(masking,
                                             tokenization.load_vocab(FLAGS.vocab_file))
    try:
      files = io_utils.expand_input_patterns(FLAGS.input_files, "input_files")
    except InputError as e:
      data_dir = os.path.dirname(FLAGS.input_files[0]) or "."
      raise InputError(
          f"{e}; make the records with: python -m tools.create_pretraining_data "
          f"--input_files=<your text or builtin> --vocab_file=<vocab.txt> "
          f"--output_dir={data_dir} --max_seq_length={FLAGS.max_seq_length} (or see the "
          "data commands in the flagfile's header)") from None
    data_config = pretraining_dataset.PretrainingDataConfig(
        input_files=files, max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq, seed=FLAGS.seed,
        shuffle_buffer_size=FLAGS.shuffle_buffer_size, masker=masker)
    pretraining_dataset.check_record_layout(files[0], data_config)
    if FLAGS.init_checkpoint:
      try:
        checkpoints.resolve_checkpoint(FLAGS.init_checkpoint)
      except checkpoints.CheckpointNotFoundError as e:
        raise InputError(f"--init_checkpoint: {e}") from None
  except (InputError, ValueError) as e:
    fail(str(e))
  return data_config


def main(argv):
  if len(argv) > 1:
    fail(f"unexpected arguments: {argv[1:]}")
  run_flags.apply_run_dir(PATH_FLAGS)
  model_config = resolve_model_config()
  # Before any other TensorFlow op: logical CPU devices and MultiWorkerMirroredStrategy's
  # collective ops are configured at program start-up.
  strategy, is_chief, worker_id = run_flags.make_strategy()
  data_config = check_inputs()

  import keras  # pylint: disable=g-import-not-at-top
  from recurrent_bert.data import pretraining_dataset  # pylint: disable=g-import-not-at-top
  from recurrent_bert.models import Pretrainer, build_encoder  # pylint: disable=g-import-not-at-top
  from recurrent_bert.training import checkpoints, loop, optimization  # pylint: disable=g-import-not-at-top

  num_replicas = strategy.num_replicas_in_sync
  optimizer_flags.check_optimizer_flags(num_replicas)
  logging.info("strategy %s: %d replica(s); model %s (V=%d)", FLAGS.distribution_strategy,
               num_replicas, FLAGS.model_config, model_config.vocab_size)

  keras.utils.set_random_seed(FLAGS.seed)
  keras.config.set_dtype_policy(FLAGS.mixed_precision)
  tf_makedirs(FLAGS.model_dir)
  if is_chief:
    # What fine-tuning and export read from this dir, there from the first step on.
    checkpoints.write_model_config(FLAGS.model_dir, model_config)
    checkpoints.write_tokenizer_files(FLAGS.model_dir, FLAGS.vocab_file, FLAGS.do_lower_case)

  with strategy.scope():
    encoder = build_encoder(model_config)
    model = Pretrainer(encoder, use_nsp=FLAGS.use_nsp)
    optimizer = optimization.create_optimizer(
        model.trainable_variables, num_train_steps=FLAGS.num_train_steps,
        warmup_steps=FLAGS.warmup_steps,
        loss_scaling=FLAGS.mixed_precision == "mixed_float16",
        **optimizer_flags.optimizer_kwargs())
  # The dataset yields micro-batches: N of them per replica make one update.
  per_replica_batch = FLAGS.train_batch_size // (
      num_replicas * FLAGS.gradient_accumulation_steps)

  def dataset_fn(input_context, skip_batches):
    return pretraining_dataset.make_pretraining_dataset(
        data_config, per_replica_batch, input_context.input_pipeline_id,
        input_context.num_input_pipelines, skip_batches=skip_batches)

  trainer = loop.PretrainingLoop(
      strategy, model, optimizer, dataset_fn, model_dir=FLAGS.model_dir,
      global_batch_size=FLAGS.train_batch_size, num_train_steps=FLAGS.num_train_steps,
      steps_per_loop=FLAGS.steps_per_loop, save_checkpoints_steps=FLAGS.save_checkpoints_steps,
      keep_checkpoint_max=FLAGS.keep_checkpoint_max, log_steps=FLAGS.log_steps,
      clip_norm=FLAGS.clip_norm, jit_compile=FLAGS.jit_compile,
      loss_scaling=FLAGS.mixed_precision == "mixed_float16", is_chief=is_chief,
      worker_id=worker_id, gradient_accumulation_steps=FLAGS.gradient_accumulation_steps)
  if FLAGS.init_checkpoint and tf_latest_checkpoint(FLAGS.model_dir) is None:
    # Only for a fresh run: a resumed run continues from its own checkpoint.
    source = checkpoints.restore_pretrainer_weights(model, FLAGS.init_checkpoint)
    logging.info("initialised weights from %s", source)
  try:
    final = trainer.run()
  except loop.NonFiniteLossError as e:
    logging.error("%s", e)
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  if is_chief:
    export = checkpoints.export_encoder(
        encoder, FLAGS.model_dir, vocab_file=FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case,
        info={"global_step": int(trainer.global_step.numpy()),
              "source_checkpoint": tf_latest_checkpoint(FLAGS.model_dir),
              "final_metrics": final})
    logging.info("encoder exported to %s", export)


def tf_makedirs(path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.io.gfile.makedirs(path)  # local or gs://


def tf_exists(path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.io.gfile.exists(path)


def tf_latest_checkpoint(model_dir):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.train.latest_checkpoint(model_dir)


if __name__ == "__main__":
  cli.run(main, HELP_GROUPS)
