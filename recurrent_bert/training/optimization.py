"""AdamW with BERT's learning-rate schedule and weight-decay exclusions.

Schedule (`WarmupLinearDecay`), for step s (0-based, the number of updates already made),
peak learning rate η, W warmup steps, N total steps and end rate η_end:

  s < W:       η · s / W                                  (linear warmup from 0)
  W <= s < N:  η_end + (η - η_end) · (N - s) / (N - W)    (linear decay to η_end at N)
  s >= N:      η_end

Weight decay is decoupled (Loshchilov & Hutter; Keras' AdamW applies `w -= lr · wd · w`
before the Adam update) and skips every variable that is not a matrix of a linear map or
an embedding table: LayerNorm scales and offsets, all biases (including the T5 relative
attention bias table, an additive logit bias) and SwishRNN's alpha/beta gate parameters.
google-research/bert excludes "LayerNorm", "layer_norm" and "bias" the same way.

Gradient clipping is *not* configured on the Keras optimizer: under tf.distribute Keras
clips each replica's partial gradient before summing, which is not the global norm of the
batch gradient. The training loop all-reduces first and calls `clip_by_global_norm`.
"""

import re
from typing import Iterable, List

import keras
import tensorflow as tf

# Matched against a variable's full path (e.g. "block_0/swish_rnn/alpha").
_NO_DECAY_PATTERNS = (
    r"(^|/)[a-z_]*layer_norm/(gamma|beta)$",               # every LayerNormalization
    r"(^|/)[a-z_]*bias$",                                  # bias, output_bias, state_bias, ...
    r"(^|/)bias_table$",                                   # T5 relative attention bias
    r"/swish_rnn/(alpha|beta)$",                           # SwishRNN gate parameters
)
_NO_DECAY_RE = re.compile("|".join(_NO_DECAY_PATTERNS))


def excluded_from_weight_decay(variable_path: str) -> bool:
  """True for LayerNorm, bias and SwishRNN alpha/beta variables (by path)."""
  return _NO_DECAY_RE.search(variable_path) is not None


@keras.saving.register_keras_serializable(package="recurrent_bert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
  """Linear warmup to `peak_learning_rate`, then linear decay to `end_learning_rate`.

  See the module docstring for the formula. `step` may be a Python number or a scalar
  Tensor; the result is a float32 scalar.
  """

  def __init__(self, peak_learning_rate: float, warmup_steps: int, decay_steps: int,
               end_learning_rate: float = 0.0):
    """Args:
      peak_learning_rate: η, reached at step `warmup_steps`.
      warmup_steps: W >= 0 (0 = no warmup).
      decay_steps: N, the total number of training steps (N > W).
      end_learning_rate: η_end, the rate from step N on.
    """
    if warmup_steps < 0 or decay_steps <= warmup_steps:
      raise ValueError(f"need 0 <= warmup_steps < num_train_steps, got warmup_steps="
                       f"{warmup_steps}, num_train_steps={decay_steps}")
    self.peak_learning_rate = float(peak_learning_rate)
    self.warmup_steps = int(warmup_steps)
    self.decay_steps = int(decay_steps)
    self.end_learning_rate = float(end_learning_rate)

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    peak, end = self.peak_learning_rate, self.end_learning_rate
    warmup = float(self.warmup_steps)
    total = float(self.decay_steps)
    warming = peak * step / max(warmup, 1.0)
    remaining = tf.clip_by_value((total - step) / (total - warmup), 0.0, 1.0)
    decaying = end + (peak - end) * remaining
    return tf.where(step < warmup, warming, decaying)

  def get_config(self):
    return {"peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps, "decay_steps": self.decay_steps,
            "end_learning_rate": self.end_learning_rate}


def create_optimizer(trainable_variables: Iterable, *, learning_rate: float,
                     num_train_steps: int, warmup_steps: int, end_learning_rate: float = 0.0,
                     weight_decay: float = 0.01, beta_1: float = 0.9, beta_2: float = 0.999,
                     epsilon: float = 1e-6, loss_scaling: bool = False):
  """AdamW on `WarmupLinearDecay`, with the weight-decay exclusions, built.

  Call under the strategy's scope: the slots are created here (built eagerly so a
  checkpoint restore finds every variable in place).

  Args:
    trainable_variables: the model's trainable variables (Keras variables).
    learning_rate, num_train_steps, warmup_steps, end_learning_rate: the schedule.
    weight_decay, beta_1, beta_2, epsilon: AdamW.
    loss_scaling: wrap in a dynamic `keras.optimizers.LossScaleOptimizer` (float16).

  Returns:
    The optimizer; `optimizer.iterations` counts applied updates (skipped float16
    steps included only in the wrapper's counter).
  """
  variables: List = list(trainable_variables)
  schedule = WarmupLinearDecay(learning_rate, warmup_steps, num_train_steps,
                               end_learning_rate)
  optimizer = keras.optimizers.AdamW(learning_rate=schedule, weight_decay=weight_decay,
                                     beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)
  optimizer.exclude_from_weight_decay(
      var_list=[v for v in variables if excluded_from_weight_decay(v.path)])
  if loss_scaling:
    optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
  optimizer.build(variables)
  return optimizer
