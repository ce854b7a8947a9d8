"""The optimisation flags pretraining and fine-tuning share, and their checks.

One definition for both entry points; each passes its own defaults (its paper's
protocol). What the flags mean is in training/optimizers.py (optimizers, schedules,
exclusions) and training/loop.py (clipping, gradient accumulation).

Only absl is imported here: defining flags must not load TensorFlow (`--help` stays fast).
"""

import math
from typing import Optional

from absl import flags

from recurrent_bert import cli

FLAGS = flags.FLAGS

# The same names as optimization.OPTIMIZERS / DECAY_SCHEDULES (a test keeps them equal;
# importing that module here would load TensorFlow at flag definition).
OPTIMIZERS = ("adamw", "lamb")
DECAY_SCHEDULES = ("linear", "polynomial", "cosine", "constant")
# The --help group of the optimisation flags (see recurrent_bert/cli.py); a command lists
# the batch and step flags it defines itself beside them.
OPTIMIZATION_HELP = (
    "train_batch_size",
    "eval_batch_size",
    "num_train_steps",
    "num_train_epochs",
    "max_train_steps",
    "gradient_accumulation_steps",
    "optimizer",
    "learning_rate",
    "warmup_steps",
    "warmup_proportion",
    "decay_schedule",
    "decay_power",
    "end_learning_rate",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "clip_norm",
)


def define_flags(
    *,
    learning_rate: float,
    warmup_steps: Optional[int],
    warmup_proportion: Optional[float] = None,
    adam_beta2: float = 0.999,
) -> None:
  """Defines --optimizer, the schedule, the optimizer's hyperparameters, --clip_norm and
  --gradient_accumulation_steps.

  Args:
    learning_rate: default of --learning_rate (peak).
    warmup_steps: default of --warmup_steps (None: from --warmup_proportion).
    warmup_proportion: when given, also defines --warmup_proportion (fine-tuning: the
      warmup as a fraction of the steps) with this default.
    adam_beta2: default of --adam_beta2.
  """
  flags.DEFINE_enum(
      "optimizer",
      "adamw",
      list(OPTIMIZERS),
      "adamw: Adam with decoupled weight decay; lamb: LAMB (You et al. "
      "2019), layer-wise trust ratio for large batches.",
  )
  flags.DEFINE_float("learning_rate", learning_rate, "Peak learning rate.")
  flags.DEFINE_integer(
      "warmup_steps",
      warmup_steps,
      "Linear warmup steps (updates)."
      + (" Overrides --warmup_proportion." if warmup_proportion is not None else ""),
  )
  if warmup_proportion is not None:
    flags.DEFINE_float("warmup_proportion", warmup_proportion, "Warmup as a fraction of the steps.")
  flags.DEFINE_enum(
      "decay_schedule",
      "linear",
      list(DECAY_SCHEDULES),
      "Decay after warmup to --end_learning_rate at the last step: linear, "
      "polynomial (power --decay_power), cosine, or constant (no decay).",
  )
  flags.DEFINE_float("decay_power", 1.0, "Power of --decay_schedule=polynomial.")
  flags.DEFINE_float("end_learning_rate", 0.0, "Learning rate reached at the last step.")
  flags.DEFINE_float("weight_decay", 0.01, "Decoupled weight decay (not on LayerNorm/bias).")
  flags.DEFINE_float("adam_beta1", 0.9, "beta_1 (AdamW and LAMB).")
  flags.DEFINE_float("adam_beta2", adam_beta2, "beta_2 (AdamW and LAMB).")
  flags.DEFINE_float("adam_epsilon", 1e-6, "epsilon (AdamW and LAMB).")
  flags.DEFINE_float(
      "clip_norm",
      1.0,
      "Global-norm gradient clipping of the accumulated batch gradient (0 = off).",
  )
  flags.DEFINE_integer(
      "gradient_accumulation_steps",
      1,
      "Micro-batches per update: each replica reads --train_batch_size / "
      "(N x replicas) examples N times, then one update is made as for "
      "the whole batch.",
  )
  flags.register_validator(
      "warmup_steps", lambda v: v is None or v >= 0, "--warmup_steps must be >= 0"
  )
  if warmup_proportion is not None:
    flags.register_validator(
        "warmup_proportion", lambda v: 0 <= v < 1, "--warmup_proportion must be in [0, 1)"
    )
  # At parse time, before TensorFlow loads; the message keeps the value it had when
  # check_optimizer_flags made it.
  flags.register_validator(
      "gradient_accumulation_steps",
      _refuse_unless(lambda v: v >= 1, "--gradient_accumulation_steps={} must be >= 1"),
  )
  flags.register_validator(
      "decay_power", _refuse_unless(lambda v: 0 < v < math.inf, "--decay_power={} must be > 0")
  )
  # Finite too: an infinite rate would only show as a non-finite loss later.
  for name in ("learning_rate", "adam_epsilon"):
    flags.register_validator(name, lambda v: 0 < v < math.inf, f"--{name} must be > 0, finite")
  for name in ("end_learning_rate", "weight_decay"):
    flags.register_validator(name, lambda v: 0 <= v < math.inf, f"--{name} must be >= 0, finite")
  # An infinite --clip_norm is no clipping, as 0 is.
  flags.register_validator("clip_norm", lambda v: v >= 0, "--clip_norm must be >= 0")
  for name in ("adam_beta1", "adam_beta2"):
    flags.register_validator(name, lambda v: 0 <= v < 1, f"--{name} must be in [0, 1)")


def _refuse_unless(ok, message: str):
  """A flag validator that names the value: `message.format(value)` when not ok(value)."""

  def check(value) -> bool:
    if value is None or not ok(value):
      raise flags.ValidationError(message.format(value))
    return True

  return check


def check_optimizer_flags(num_replicas: int) -> None:
  """Checks what depends on the strategy; exits 2 with one line naming the flag.

  Args:
    num_replicas: the strategy's replicas in sync.
  """
  steps = FLAGS.gradient_accumulation_steps
  if FLAGS.train_batch_size % (steps * num_replicas):
    cli.fail(
        f"--train_batch_size={FLAGS.train_batch_size} must divide by "
        f"--gradient_accumulation_steps={steps} x {num_replicas} replica(s) of "
        f"--distribution_strategy={FLAGS.distribution_strategy}"
    )
