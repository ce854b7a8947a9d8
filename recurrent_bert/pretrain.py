r"""Pretraining entry point: MLM (+ NSP) on TFRecords, under any tf.distribute strategy.

  python -m recurrent_bert.pretrain --flagfile=configs/pretrain/tiny_bert.flags --run_dir=runs/tiny

Flags on the command line override the flagfile; relative paths are taken from --run_dir.
Re-running the same command resumes from the latest checkpoint in --model_dir. The
--model_dir layout is in recurrent_bert/model_dir.py; the model_dir itself (or its final
encoder/ export) is what fine-tuning's --init_checkpoint and `recurrent_bert.export` take.
"""

import json
import os
import sys

from absl import flags
from absl import logging

from recurrent_bert import cli
from recurrent_bert.errors import InputError
from recurrent_bert.errors import first_line
from recurrent_bert.flags import execution
from recurrent_bert.flags import optimization as optimization_flags
from recurrent_bert.flags import pretraining

FLAGS = flags.FLAGS
pretraining.define_flags()
HELP_GROUPS = pretraining.HELP_GROUPS


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  execution.apply_run_dir(pretraining.PATH_FLAGS)
  execution.check_output_path("model_dir")
  model_config = pretraining.model_config()
  # Before any other TensorFlow op: logical CPU devices and MultiWorkerMirroredStrategy's
  # collective ops are configured at program start-up.
  strategy, is_chief, worker_id = execution.make_strategy()
  data_config, eval_data_config = pretraining.data_config(model_config)
  import tensorflow as tf  # loaded by make_strategy already

  try:
    run_pretraining(model_config, strategy, is_chief, worker_id, data_config, eval_data_config)
  except (MemoryError, tf.errors.ResourceExhaustedError) as e:
    # The sizes the flags asked for do not fit: input to change, not a bug.
    raise InputError(
        f"--model_config={FLAGS.model_config} (vocab_size {model_config.vocab_size}), "
        f"--train_batch_size={FLAGS.train_batch_size}, --max_seq_length="
        f"{FLAGS.max_seq_length}: out of memory ({first_line(e, 200)}); give smaller values"
    ) from None


def run_pretraining(model_config, strategy, is_chief, worker_id, data_config, eval_data_config):
  """Builds the model and trains and/or evaluates it as the flags say."""
  mode = pretraining.mode()
  # After flag parsing: --help and a bad flag do not wait for TensorFlow.
  import keras

  from recurrent_bert.data import pretraining_dataset
  from recurrent_bert.models import Pretrainer
  from recurrent_bert.models import build_encoder
  from recurrent_bert.training import checkpoints
  from recurrent_bert.training import loop
  from recurrent_bert.training import optimization
  from recurrent_bert.training import pretraining_eval

  num_replicas = strategy.num_replicas_in_sync
  optimization_flags.check_optimizer_flags(num_replicas)
  logging.info(
      "strategy %s: %d replica(s); model %s (V=%d)",
      FLAGS.distribution_strategy,
      num_replicas,
      FLAGS.model_config,
      model_config.vocab_size,
  )

  keras.utils.set_random_seed(FLAGS.seed)
  keras.config.set_dtype_policy(FLAGS.mixed_precision)
  if mode == "eval" and tf_latest_checkpoint(FLAGS.model_dir) is None:
    cli.fail(f"--mode=eval: no checkpoint in --model_dir={FLAGS.model_dir}")
  tf_makedirs(FLAGS.model_dir)
  if is_chief and mode != "eval":
    # What fine-tuning and export read from this dir, there from the first step on.
    checkpoints.write_model_config(FLAGS.model_dir, model_config)
    checkpoints.write_tokenizer_files(FLAGS.model_dir, FLAGS.vocab_file, FLAGS.do_lower_case)

  with strategy.scope():
    encoder = build_encoder(model_config)
    model = Pretrainer(encoder, use_nsp=FLAGS.use_nsp)

  evaluate = None
  if eval_data_config is not None:
    evaluator = cli.run_checked(
        lambda: pretraining_eval.PretrainingEvaluator(
            strategy,
            model,
            eval_data_config,
            pretraining.eval_batch_size(),
            max_eval_steps=FLAGS.max_eval_steps,
            jit_compile=FLAGS.jit_compile,
            word_starts=eval_word_starts(model_config.vocab_size),
        )
    )
    logging.info(
        "evaluation: %d held-out records in %d steps of %d",
        evaluator.num_records,
        evaluator.num_steps,
        evaluator.global_batch_size,
    )
    eval_writer = pretraining_eval.open_eval_writer(FLAGS.model_dir) if is_chief else None

    def evaluate(step):
      results = evaluator.evaluate()
      logging.info("eval step %d: %s", step, " ".join(f"{k}={v:.4f}" for k, v in results.items()))
      if is_chief:
        pretraining_eval.record_eval_results(
            FLAGS.model_dir,
            step,
            tf_latest_checkpoint(FLAGS.model_dir) or "",
            results,
            eval_writer,
        )
      return results

  if mode == "eval":
    step = pretraining_eval.restore_for_eval(model, tf_latest_checkpoint(FLAGS.model_dir))
    print(json.dumps({"global_step": step, "eval": evaluate(step)}))
    report_skipped(eval_data_config.skipped)
    return

  with strategy.scope():
    optimizer = optimization.create_optimizer(
        model.trainable_variables,
        num_train_steps=FLAGS.num_train_steps,
        warmup_steps=FLAGS.warmup_steps,
        loss_scaling=FLAGS.mixed_precision == "mixed_float16",
        **optimization_flags.optimizer_kwargs(),
    )
  # The dataset yields micro-batches: N of them per replica make one update.
  per_replica_batch = FLAGS.train_batch_size // (num_replicas * FLAGS.gradient_accumulation_steps)

  def dataset_fn(input_context, skip_batches):
    return pretraining_dataset.make_pretraining_dataset(
        data_config,
        per_replica_batch,
        input_context.input_pipeline_id,
        input_context.num_input_pipelines,
        skip_batches=skip_batches,
    )

  skipped = (data_config or eval_data_config).skipped

  def skipped_records():
    return {"skipped_records": skipped.count()}

  trainer = loop.PretrainingLoop(
      strategy,
      model,
      optimizer,
      dataset_fn,
      model_dir=FLAGS.model_dir,
      global_batch_size=FLAGS.train_batch_size,
      num_train_steps=FLAGS.num_train_steps,
      steps_per_loop=FLAGS.steps_per_loop,
      save_checkpoints_steps=FLAGS.save_checkpoints_steps,
      keep_checkpoint_max=FLAGS.keep_checkpoint_max,
      log_steps=FLAGS.log_steps,
      clip_norm=FLAGS.clip_norm,
      jit_compile=FLAGS.jit_compile,
      loss_scaling=FLAGS.mixed_precision == "mixed_float16",
      is_chief=is_chief,
      worker_id=worker_id,
      gradient_accumulation_steps=FLAGS.gradient_accumulation_steps,
      row_extras=skipped_records if skipped is not None else None,
      checkpoint_iterator=skipped is None,
  )
  if FLAGS.init_checkpoint and tf_latest_checkpoint(FLAGS.model_dir) is None:
    # Only for a fresh run: a resumed run continues from its own checkpoint.
    source = checkpoints.restore_pretrainer_weights(model, FLAGS.init_checkpoint)
    logging.info("initialised weights from %s", source)
  try:
    with cli.ends_on(loop.NonFiniteLossError, status=1):
      final = trainer.run(evaluate if mode == "train_and_eval" else None, FLAGS.eval_every_steps)
  finally:
    report_skipped(skipped)
  if is_chief:
    export = checkpoints.export_encoder(
        encoder,
        FLAGS.model_dir,
        vocab_file=FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case,
        info={
            "global_step": int(trainer.global_step.numpy()),
            "source_checkpoint": tf_latest_checkpoint(FLAGS.model_dir),
            "final_metrics": final,
        },
    )
    logging.info("encoder exported to %s", export)


def report_skipped(skipped):
  """The end-of-run line of --skip_bad_records (stderr and the log)."""
  from recurrent_bert.data import record_errors

  if skipped is not None:
    for line in record_errors.describe(skipped):
      logging.warning("%s", line)
      print(line, file=sys.stderr)


def eval_word_starts(vocab_size):
  """Per token id whether it starts a word (for the held-out loss per word): from
  --vocab_file, else the vocabulary recorded in --model_dir; None when neither is there.
  Ids past the vocabulary (a larger --vocab_size) count as words."""
  from recurrent_bert import model_dir as layout
  from recurrent_bert.data import vocab as vocab_lib

  vocab_file = FLAGS.vocab_file
  if not vocab_file:
    info = layout.read_tokenizer_info(FLAGS.model_dir)
    recorded = os.path.join(FLAGS.model_dir, info.vocab_file if info else layout.VOCAB_FILE)
    vocab_file = recorded if layout.isfile(recorded) else None
  if not vocab_file:
    return None
  starts = list(vocab_lib.read_vocabulary(vocab_file).word_starts)
  return starts + [True] * (vocab_size - len(starts))


def tf_makedirs(path):
  import tensorflow as tf

  tf.io.gfile.makedirs(path)  # local or gs://


def tf_latest_checkpoint(model_dir):
  import tensorflow as tf

  return tf.train.latest_checkpoint(model_dir)


if __name__ == "__main__":
  cli.run(main, HELP_GROUPS)
