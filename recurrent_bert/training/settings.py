"""What pretraining and fine-tuning runs share of their settings.

`TrainingSettings` holds the optimizer's settings and the loop's bookkeeping under the
names of the flags that set them (flags/optimization.py, flags/execution.py and the
commands' own), with the defaults both commands have. `pretraining_runner.PretrainSettings`
and `finetuning.FinetuneSettings` extend it with what only their runs read, and set the
defaults that differ (the learning rate, checkpoints kept). Keyword-only, so each
subclass may add required fields (model_dir) after these defaults.
"""

import dataclasses


@dataclasses.dataclass(kw_only=True)
class TrainingSettings:
  """The optimisation and bookkeeping settings of a training run.

  Attributes:
    learning_rate: peak learning rate (each run kind sets its default).
    optimizer, decay_schedule, decay_power, end_learning_rate, weight_decay, adam_beta1,
      adam_beta2, adam_epsilon: `optimization.optimizer_from_settings`.
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
