"""Flags and helpers every training entry point shares: execution (strategy, precision,
XLA) and the one-line error exit for bad input."""

import sys

from absl import flags

FLAGS = flags.FLAGS


def fail(message: str) -> None:
  """Bad input: one line on stderr, exit status 2, no work done."""
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


def define_execution_flags() -> None:
  """--mixed_precision, --jit_compile, --distribution_strategy, --tpu, --num_cpu_devices."""
  flags.DEFINE_enum("mixed_precision", "float32",
                    ["float32", "mixed_bfloat16", "mixed_float16"],
                    "Compute dtype policy; mixed_float16 adds dynamic loss scaling.")
  flags.DEFINE_boolean("jit_compile", False, "XLA-compile the forward/backward step.")
  flags.DEFINE_enum("distribution_strategy", "default",
                    ["default", "one_device", "mirrored", "multi_worker_mirrored", "tpu"],
                    "tf.distribute strategy; multi_worker_mirrored reads TF_CONFIG.")
  flags.DEFINE_string("tpu", None, "TPU name or grpc:// address ('local' on a TPU VM).")
  flags.DEFINE_integer("num_cpu_devices", 1,
                       "Split the CPU into this many logical devices (mirrored without "
                       "GPUs).")
  flags.register_validator("num_cpu_devices", lambda v: v >= 1,
                           "--num_cpu_devices must be >= 1")
  flags.register_multi_flags_validator(
      ["distribution_strategy", "tpu"],
      lambda f: f["distribution_strategy"] != "tpu" or f["tpu"],
      "--distribution_strategy=tpu needs --tpu")


def make_strategy():
  """(strategy, is_chief, worker_id) from the execution flags.

  Call before any other TensorFlow op: logical CPU devices and MultiWorkerMirrored's
  collectives must be configured at start-up.
  """
  from recurrent_bert.training import distribution  # pylint: disable=g-import-not-at-top
  distribution.configure_cpu_devices(FLAGS.num_cpu_devices)
  try:
    strategy = distribution.get_distribution_strategy(
        FLAGS.distribution_strategy, FLAGS.tpu, FLAGS.num_cpu_devices)
  except ValueError as e:
    fail(str(e))
  return strategy, distribution.is_chief(strategy), distribution.worker_id(strategy)
