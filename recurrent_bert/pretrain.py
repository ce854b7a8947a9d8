r"""Pretraining entry point: MLM (+ NSP) on TFRecords, under any tf.distribute strategy.

  python -m recurrent_bert.pretrain --flagfile=configs/pretrain/tiny_bert.flags --run_dir=runs/tiny

Flags on the command line override the flagfile; relative paths are taken from --run_dir.
Re-running the same command resumes from the latest checkpoint in --model_dir. The run
itself is `training.pretraining_runner.run_pretraining`, callable from Python. The
--model_dir layout is in recurrent_bert/model_dir.py; the model_dir itself (or its final
encoder/ export) is what fine-tuning's --init_checkpoint and `recurrent_bert.export` take.
"""

import json

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
  backend = cli.keras_backend(execution.TRAINING_BACKENDS)
  if backend != "tensorflow":
    return _main_without_tensorflow(model_config, backend)
  # Before any other TensorFlow op: logical CPU devices and MultiWorkerMirroredStrategy's
  # collective ops are configured at program start-up.
  strategy, is_chief, worker_id = execution.make_strategy()
  data_config, eval_data_config = pretraining.data_config(model_config)
  optimization_flags.check_optimizer_flags(strategy.num_replicas_in_sync)
  # After flag parsing: --help and a bad flag do not wait for TensorFlow and Keras.
  import tensorflow as tf

  from recurrent_bert.training import loop
  from recurrent_bert.training.pretraining_runner import run_pretraining

  logging.info(
      "strategy %s: %d replica(s); model %s (V=%d)",
      FLAGS.distribution_strategy,
      strategy.num_replicas_in_sync,
      FLAGS.model_config,
      model_config.vocab_size,
  )
  try:
    settings = pretraining.settings_from_flags()
    with cli.ends_on(loop.NonFiniteLossError, status=1):
      results = run_pretraining(
          strategy, model_config, settings, data_config, eval_data_config, is_chief, worker_id
      )
    if settings.mode == "eval":
      print(json.dumps(results))  # {"global_step", "eval"}
  except (MemoryError, tf.errors.ResourceExhaustedError) as e:
    # The sizes the flags asked for do not fit: input to change, not a bug.
    raise InputError(
        f"--model_config={FLAGS.model_config} (vocab_size {model_config.vocab_size}), "
        f"--train_batch_size={FLAGS.train_batch_size}, --max_seq_length="
        f"{FLAGS.max_seq_length}: out of memory ({first_line(e, 200)}); give smaller values"
    ) from None


def _main_without_tensorflow(model_config, backend: str) -> None:
  """The run under Keras' JAX or PyTorch backend (`training.numpy_pretraining`): same
  flags, same model_dir contract; no TensorFlow needed."""
  devices = execution.backend_devices(backend)
  data_config, eval_data_config, masker = pretraining.data_config(model_config, backend)
  from recurrent_bert.training import driver
  from recurrent_bert.training.numpy_pretraining import run_numpy_pretraining

  settings = pretraining.settings_from_flags()
  with cli.ends_on(driver.NonFiniteLossError, status=1):
    results = run_numpy_pretraining(
        model_config, settings, data_config, eval_data_config, masker, devices
    )
  if settings.mode == "eval":
    print(json.dumps(results))  # {"global_step", "eval"}


if __name__ == "__main__":
  cli.run(main, HELP_GROUPS)
