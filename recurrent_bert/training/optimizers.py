"""Optimizers (AdamW, LAMB), the learning-rate schedules and the weight-decay exclusions.

Schedule (`WarmupDecay`), for step s (0-based, the number of updates already made), peak
learning rate η, W warmup steps, N total steps, end rate η_end and the fraction of the
decay left f(s) = (N - s) / (N - W), clipped to [0, 1]:

  s < W:        η · s / W                                 (linear warmup from 0)
  s >= W:       η_end + (η - η_end) · d(s), with d(s) by `decay_schedule`:
    linear      f(s)                                      (BERT)
    polynomial  f(s) ** p                                 (p = decay_power; 1 is linear)
    cosine      (1 + cos(π · (1 - f(s)))) / 2             (half a cosine, η at W, η_end at N)
    constant    1                                         (η after warmup, η_end unused)

Weight decay is decoupled (Loshchilov & Hutter) and skips every variable that is not a
matrix of a linear map or an embedding table: LayerNorm scales and offsets, all biases
(including the T5 relative attention bias table, an additive logit bias) and SwishRNN's
alpha/beta gate parameters. google-research/bert excludes "LayerNorm", "layer_norm" and
"bias" the same way. AdamW applies `w -= lr · wd · w` before the Adam update; LAMB adds
`wd · w` to the update inside its trust ratio, and leaves the same variables out of the
trust ratio too (You et al.'s and NVIDIA's BERT code exclude LayerNorm and bias).

Gradient clipping (to a global norm c: g <- g · c / max(||g||, c), all gradients
together) is *not* configured on the Keras optimizer for the custom TensorFlow loop: under
tf.distribute Keras clips each replica's partial gradient before summing, which is not
the global norm of the batch gradient. The training loop all-reduces first and calls
`clip_by_global_norm`. Keras' own trainers on one device (`fit`/`train_on_batch`, as
training/keras_training.py's `ObjectiveModel` trains under JAX and PyTorch) hand the
optimizer the whole gradient, so there `create_optimizer(clip_norm=c)` sets the same clip
as the optimizer's `global_clipnorm` (the same formula; with loss scaling it applies to the
unscaled gradient).

Gradient accumulation is the loop's too (training/loop.py), not Keras'
`gradient_accumulation_steps`: the loss of a batch is normalised by counts of the whole
batch (e.g. Σ MLM weights), which only the loop sees before the first micro-batch.

Everything here is `keras.ops`: the schedules, AdamW (Keras') and LAMB run on TensorFlow,
JAX and PyTorch alike; with a float16 policy `loss_scaling` wraps the optimizer in Keras'
(portable) dynamic `LossScaleOptimizer`. bfloat16 ("mixed_bfloat16") needs no scaling.
"""

import math
import re
from typing import Iterable, List

import keras
from keras import ops

OPTIMIZERS = ("adamw", "lamb")
DECAY_SCHEDULES = ("linear", "polynomial", "cosine", "constant")

# Matched against a variable's full path (e.g. "block_0/swish_rnn/alpha").
_NO_DECAY_PATTERNS = (
    r"(^|/)[a-z_]*layer_norm/(gamma|beta)$",  # every LayerNormalization
    r"(^|/)[a-z_]*bias$",  # bias, output_bias, state_bias, ...
    r"(^|/)bias_table$",  # T5 relative attention bias
    r"/swish_rnn/(alpha|beta)$",  # SwishRNN gate parameters
)
_NO_DECAY_RE = re.compile("|".join(_NO_DECAY_PATTERNS))


def excluded_from_weight_decay(variable_path: str) -> bool:
  """True for LayerNorm, bias and SwishRNN alpha/beta variables (by path)."""
  return _NO_DECAY_RE.search(variable_path) is not None


@keras.saving.register_keras_serializable(package="recurrent_bert")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
  """Linear warmup to `peak_learning_rate`, then a decay to `end_learning_rate`.

  See the module docstring for the formulas. `step` may be a Python number or a scalar
  tensor of the Keras backend (int or float); the result is a float32 scalar.
  """

  def __init__(
      self,
      peak_learning_rate: float,
      warmup_steps: int,
      decay_steps: int,
      end_learning_rate: float = 0.0,
      decay_schedule: str = "linear",
      decay_power: float = 1.0,
  ):
    """Args:
    peak_learning_rate: η, reached at step `warmup_steps`.
    warmup_steps: W >= 0 (0 = no warmup).
    decay_steps: N, the total number of training steps (N > W).
    end_learning_rate: η_end, the rate at and after step N.
    decay_schedule: one of DECAY_SCHEDULES.
    decay_power: p of the polynomial schedule (> 0).
    """
    if warmup_steps < 0 or decay_steps <= warmup_steps:
      raise ValueError(
          f"need 0 <= warmup_steps < num_train_steps, got warmup_steps="
          f"{warmup_steps}, num_train_steps={decay_steps}"
      )
    if decay_schedule not in DECAY_SCHEDULES:
      raise ValueError(f"decay_schedule={decay_schedule!r}: choose one of {DECAY_SCHEDULES}")
    if decay_power <= 0:
      raise ValueError(f"decay_power must be > 0, got {decay_power}")
    self.peak_learning_rate = float(peak_learning_rate)
    self.warmup_steps = int(warmup_steps)
    self.decay_steps = int(decay_steps)
    self.end_learning_rate = float(end_learning_rate)
    self.decay_schedule = decay_schedule
    self.decay_power = float(decay_power)

  def __call__(self, step):
    step = ops.cast(step, "float32")
    peak, end = self.peak_learning_rate, self.end_learning_rate
    warmup = float(self.warmup_steps)
    total = float(self.decay_steps)
    warming = ops.divide(ops.multiply(peak, step), max(warmup, 1.0))
    left = ops.clip(ops.divide(ops.subtract(total, step), total - warmup), 0.0, 1.0)
    if self.decay_schedule == "constant":
      decaying = ops.full_like(step, peak)
    else:
      if self.decay_schedule == "linear":
        fraction = left
      elif self.decay_schedule == "polynomial":
        fraction = ops.power(left, self.decay_power)
      else:  # cosine
        fraction = ops.multiply(
            0.5, ops.add(1.0, ops.cos(ops.multiply(math.pi, ops.subtract(1.0, left))))
        )
      decaying = ops.add(end, ops.multiply(peak - end, fraction))
    return ops.where(ops.less(step, warmup), warming, decaying)

  def get_config(self):
    return {
        "peak_learning_rate": self.peak_learning_rate,
        "warmup_steps": self.warmup_steps,
        "decay_steps": self.decay_steps,
        "end_learning_rate": self.end_learning_rate,
        "decay_schedule": self.decay_schedule,
        "decay_power": self.decay_power,
    }


@keras.saving.register_keras_serializable(package="recurrent_bert")
class WarmupLinearDecay(WarmupDecay):
  """BERT's schedule: `WarmupDecay` with linear decay (kept for existing callers)."""

  def __init__(
      self,
      peak_learning_rate: float,
      warmup_steps: int,
      decay_steps: int,
      end_learning_rate: float = 0.0,
      **unused_config,
  ):
    super().__init__(peak_learning_rate, warmup_steps, decay_steps, end_learning_rate)


@keras.saving.register_keras_serializable(package="recurrent_bert")
class Lamb(keras.optimizers.Optimizer):
  """LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT
  in 76 minutes", Algorithm 2, with φ the identity), per variable x with gradient g at
  update t = iterations + 1:

    m = β1 m + (1 - β1) g            v = β2 v + (1 - β2) g²
    r = (m / (1 - β1^t)) / (sqrt(v / (1 - β2^t)) + ε)
    u = r + λ x                      (λ = weight_decay)
    x = x - η · (||x|| / ||u||) · u   (the trust ratio is 1 when either norm is 0)

  Variables registered with `exclude_from_weight_decay` (LayerNorm, biases: see
  `excluded_from_weight_decay`) get neither the decay nor the trust ratio: u = r and
  x = x - η · u, which is Adam's step.

  Args:
    learning_rate: a float or a LearningRateSchedule (η).
    beta_1, beta_2, epsilon: the Adam moments' decay rates and ε.
    weight_decay: λ (0 = none; the trust ratio still applies).
    **kwargs: the base optimizer's (name, ...). Keep clipping and accumulation off:
      the training loop does both on the all-reduced gradient.
  """

  def __init__(
      self,
      learning_rate=1e-3,
      beta_1: float = 0.9,
      beta_2: float = 0.999,
      epsilon: float = 1e-6,
      weight_decay: float = 0.01,
      name: str = "lamb",
      **kwargs,
  ):
    super().__init__(learning_rate=learning_rate, weight_decay=weight_decay, name=name, **kwargs)
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon

  def build(self, var_list):
    if self.built:
      return
    super().build(var_list)
    self._momentums, self._velocities = self.add_optimizer_variables(
        var_list, ["momentum", "velocity"]
    )

  def _apply_weight_decay(self, variables):
    # The base class would decay before the update (AdamW's way); in LAMB the decay
    # term is part of the update, scaled by the trust ratio: see update_step.
    return

  def update_step(self, gradient, variable, learning_rate):
    dtype = variable.dtype
    ops = keras.ops
    lr = ops.cast(learning_rate, dtype)
    gradient = ops.cast(gradient, dtype)
    t = ops.cast(self.iterations + 1, dtype)
    index = self._get_variable_index(variable)
    m, v = self._momentums[index], self._velocities[index]
    self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1.0 - self.beta_1))
    self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1.0 - self.beta_2))
    m_hat = ops.divide(m, 1.0 - ops.power(ops.cast(self.beta_1, dtype), t))
    v_hat = ops.divide(v, 1.0 - ops.power(ops.cast(self.beta_2, dtype), t))
    update = ops.divide(m_hat, ops.add(ops.sqrt(v_hat), self.epsilon))
    if self._use_weight_decay(variable):  # a Python bool: decided per variable at trace
      if self.weight_decay:
        update = ops.add(update, ops.multiply(ops.cast(self.weight_decay, dtype), variable))
      weight_norm = ops.sqrt(ops.sum(ops.square(variable)))
      update_norm = ops.sqrt(ops.sum(ops.square(update)))
      both_positive = ops.logical_and(weight_norm > 0, update_norm > 0)
      trust_ratio = ops.where(
          both_positive,
          ops.divide(weight_norm, ops.maximum(update_norm, 1e-30)),
          ops.ones_like(weight_norm),
      )
      update = ops.multiply(update, trust_ratio)
    self.assign_sub(variable, ops.multiply(lr, update))

  def get_config(self):
    config = super().get_config()
    config.update({"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon})
    return config


def create_optimizer(
    trainable_variables: Iterable,
    *,
    learning_rate: float,
    num_train_steps: int,
    warmup_steps: int,
    end_learning_rate: float = 0.0,
    weight_decay: float = 0.01,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    epsilon: float = 1e-6,
    loss_scaling: bool = False,
    optimizer: str = "adamw",
    decay_schedule: str = "linear",
    decay_power: float = 1.0,
    clip_norm: float = 0.0,
):
  """AdamW or LAMB on `WarmupDecay`, with the weight-decay exclusions, built.

  Call under the strategy's scope: the slots are created here (built eagerly so a
  checkpoint restore finds every variable in place).

  Args:
    trainable_variables: the model's trainable variables (Keras variables).
    learning_rate, num_train_steps, warmup_steps, end_learning_rate, decay_schedule,
      decay_power: the schedule (`WarmupDecay`); steps count updates.
    weight_decay, beta_1, beta_2, epsilon: the optimizer's.
    loss_scaling: wrap in a dynamic `keras.optimizers.LossScaleOptimizer` (float16).
    optimizer: one of OPTIMIZERS.
    clip_norm: > 0 clips the gradient to this global norm inside the optimizer (Keras'
      `global_clipnorm`), for Keras' trainers on one device (`ObjectiveModel.fit`). Leave
      it 0 for the custom TensorFlow loop, which clips the all-reduced gradient itself.

  Returns:
    The optimizer; `optimizer.iterations` counts applied updates (skipped float16
    steps included only in the wrapper's counter).
  """
  if optimizer not in OPTIMIZERS:
    raise ValueError(f"--optimizer={optimizer!r}: choose one of {OPTIMIZERS}")
  if clip_norm < 0:
    raise ValueError(f"clip_norm must be >= 0 (0 = no clipping), got {clip_norm}")
  variables: List = list(trainable_variables)
  schedule = WarmupDecay(
      learning_rate, warmup_steps, num_train_steps, end_learning_rate, decay_schedule, decay_power
  )
  optimizer_class = keras.optimizers.AdamW if optimizer == "adamw" else Lamb
  result = optimizer_class(
      learning_rate=schedule,
      weight_decay=weight_decay,
      beta_1=beta_1,
      beta_2=beta_2,
      epsilon=epsilon,
      global_clipnorm=clip_norm or None,
  )
  result.exclude_from_weight_decay(
      var_list=[v for v in variables if excluded_from_weight_decay(v.path)]
  )
  if loss_scaling:
    result = keras.optimizers.LossScaleOptimizer(result)
  result.build(variables)
  return result


def optimizer_from_settings(
    trainable_variables: Iterable, settings, num_train_steps: int, warmup_steps: int
):
  """`create_optimizer` from a run's `settings.TrainingSettings` (the optimizer flags'
  names and float16 loss scaling from mixed_precision); the step counts are the run's."""
  return create_optimizer(
      trainable_variables,
      learning_rate=settings.learning_rate,
      num_train_steps=num_train_steps,
      warmup_steps=warmup_steps,
      end_learning_rate=settings.end_learning_rate,
      weight_decay=settings.weight_decay,
      beta_1=settings.adam_beta1,
      beta_2=settings.adam_beta2,
      epsilon=settings.adam_epsilon,
      loss_scaling=settings.mixed_precision == "mixed_float16",
      optimizer=settings.optimizer,
      decay_schedule=settings.decay_schedule,
      decay_power=settings.decay_power,
  )
