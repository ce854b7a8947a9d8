"""What pretraining and fine-tuning runs share of their settings.

`TrainingSettings` holds the optimizer's settings and the loop's bookkeeping under the
names of the flags that set them (flags/optimization.py, flags/execution.py and the
commands' own), with the defaults both commands have. `pretraining_runner.PretrainSettings`
and `finetuning_runner.FinetuneSettings` extend it with what only their runs read, and set the
defaults that differ (the learning rate, checkpoints kept). Keyword-only, so each
subclass may add required fields (model_dir) after these defaults.
"""

import dataclasses
from typing import Optional

from recurrent_bert.errors import InputError


@dataclasses.dataclass(kw_only=True)
class TrainingSettings:
  """The optimisation and bookkeeping settings of a training run.

  Attributes:
    learning_rate: peak learning rate (each run kind sets its default).
    optimizer, decay_schedule, decay_power, end_learning_rate, weight_decay, adam_beta1,
      adam_beta2, adam_epsilon: `optimizers.optimizer_from_settings`.
    clip_norm: global-norm gradient clipping (0: none).
    gradient_accumulation_steps: micro-batches per update.
    seed: the weights', dropout's and input order's seed.
    mixed_precision: a Keras dtype policy name.
    jit_compile: XLA-compile the step.
    steps_per_loop, save_checkpoints_steps, keep_checkpoint_max, log_steps: bookkeeping.
    eval_every_steps: evaluate every this many steps during training (0: after the last).
  """

  learning_rate: float
  optimizer: str = "adamw"
  decay_schedule: str = "linear"
  decay_power: float = 1.0
  end_learning_rate: float = 0.0
  weight_decay: float = 0.01
  adam_beta1: float = 0.9
  adam_beta2: float = 0.999
  adam_epsilon: float = 1e-6
  clip_norm: float = 1.0
  gradient_accumulation_steps: int = 1
  seed: int = 0
  mixed_precision: str = "float32"
  jit_compile: bool = False
  steps_per_loop: int = 100
  save_checkpoints_steps: int = 1000
  keep_checkpoint_max: int = 5
  log_steps: int = 100
  eval_every_steps: int = 0

  def loop_arguments(self) -> dict:
    """The keyword arguments of `loop.TrainingLoop` (and its subclasses) these settings
    give: bookkeeping, clipping, XLA, float16 loss scaling and accumulation."""
    return dict(
        steps_per_loop=self.steps_per_loop,
        save_checkpoints_steps=self.save_checkpoints_steps,
        keep_checkpoint_max=self.keep_checkpoint_max,
        log_steps=self.log_steps,
        clip_norm=self.clip_norm,
        jit_compile=self.jit_compile,
        loss_scaling=self.mixed_precision == "mixed_float16",
        gradient_accumulation_steps=self.gradient_accumulation_steps,
    )


MODES = ("train", "eval", "train_and_eval")


@dataclasses.dataclass(kw_only=True)
class PretrainSettings(TrainingSettings):
  """A pretraining run's settings: the pretrain command's flags of the same names
  (`TrainingSettings`' and these), with its defaults (a test holds them equal).

  Attributes:
    model_dir: where the run writes (local or gs://, ram://).
    mode: one of MODES.
    vocab_file, do_lower_case: the data's tokenizer, recorded in model_dir and the export.
    use_nsp: train the next-sentence head too.
    train_batch_size: global batch (all replicas, all accumulation steps).
    eval_batch_size: global eval batch; None: one micro-batch over all replicas.
    num_train_steps, warmup_steps: updates in all, and of warmup.
    init_checkpoint: weights for a fresh run (a phase 1 model_dir, an encoder export).
    max_eval_steps: batches per evaluation (0: every record).
  """

  model_dir: str
  learning_rate: float = 1e-4
  mode: str = "train"
  vocab_file: Optional[str] = None
  do_lower_case: bool = True
  use_nsp: bool = True
  train_batch_size: int = 256
  eval_batch_size: Optional[int] = None
  num_train_steps: int = 1000000
  warmup_steps: int = 10000
  init_checkpoint: Optional[str] = None
  max_eval_steps: int = 0

  def __post_init__(self):
    if self.mode not in MODES:
      raise InputError(f"mode={self.mode!r} is not one of {MODES}")

  @property
  def resolved_eval_batch_size(self) -> int:
    return self.eval_batch_size or max(1, self.train_batch_size // self.gradient_accumulation_steps)
