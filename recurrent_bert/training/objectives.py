"""Training objectives: what the training loop asks of a task, as replica-summable stats.

The loop (training/loop.py) is task-agnostic. An objective tells it, for one replica's
batch:

  model_inputs(batch)          the dict the model is called on
  normalizers(batch)           per-replica counts the loop all-reduces (SUM) before the
                               loss is formed, e.g. {"mlm_weight": Σw, "examples": B}
  sums(batch, outputs)         per-replica sums of `stat_names` (losses, corrects, counts)
  loss(sums, normalizers)      this replica's share of the global loss: summing the shares
                               over replicas gives the loss of the global batch
  step_values(sums, norms)     per-step scalars named `step_value_names`, logged to
                               metrics.jsonl beside the loss (replica-summed)
  summarize(sums, num_steps)   readable metrics of a log interval (must contain "loss")
  progress_fields(summary)     the short "name=value" parts of the progress line

Keeping every statistic a sum makes the loss of a global batch independent of how it is
split over replicas: gradients summed over replicas equal the single-device gradient.

The tensor methods are written in `keras.ops`, so an objective serves every Keras
backend: the TensorFlow loop calls them with tf tensors (and gets tf tensors back), and
training/keras_training.py's `ObjectiveModel` with JAX or PyTorch tensors.
"""

from typing import Any, Dict, List

from keras import ops

from recurrent_bert.models.encoder import ENCODER_INPUT_NAMES
from recurrent_bert.training import metric_sums

Tensors = Dict[str, Any]  # {name: tensor of the Keras backend}


def _ratio(a: float, b: float) -> float:
  return float(a) / float(b) if b else 0.0


class PretrainingObjective:
  """Masked LM (+ NSP): weighted-mean MLM cross-entropy + mean NSP cross-entropy."""

  stat_names = metric_sums.STAT_NAMES
  step_value_names = ("mlm_loss",)

  def __init__(self, use_nsp: bool):
    self.use_nsp = use_nsp

  def model_inputs(self, batch: Tensors) -> Tensors:
    return {k: batch[k] for k in (*ENCODER_INPUT_NAMES, "masked_lm_positions")}

  def normalizers(self, batch: Tensors) -> Tensors:
    return {
        "mlm_weight": ops.sum(batch["masked_lm_weights"]),
        "examples": metric_sums.num_examples(batch),
    }

  def sums(self, batch: Tensors, outputs: Tensors) -> Tensors:
    return metric_sums.pretraining_sums(batch, outputs)

  def loss(self, sums: Tensors, normalizers: Tensors):
    loss = sums["mlm_loss_sum"] / ops.maximum(normalizers["mlm_weight"], 1.0)
    if self.use_nsp:
      loss += sums["nsp_loss_sum"] / ops.maximum(normalizers["examples"], 1.0)
    return loss

  def step_values(self, sums: Tensors, normalizers: Tensors) -> Tensors:
    return {"mlm_loss": sums["mlm_loss_sum"] / ops.maximum(normalizers["mlm_weight"], 1.0)}

  def summarize(self, sums: Dict[str, float], num_steps: int) -> Dict[str, float]:
    return metric_sums.summarize(sums, num_steps, self.use_nsp)

  def progress_fields(self, summary: Dict[str, float]) -> List[str]:
    fields = [f"loss={summary['loss']:.3f}", f"mlm_acc={summary['mlm_accuracy']:.2f}"]
    if self.use_nsp:
      fields.append(f"nsp_acc={summary['nsp_accuracy']:.2f}")
    return fields


class _ExampleMeanObjective:
  """Losses that are a mean over the examples of the global batch."""

  stat_names = ("loss_sum", "correct", "num_examples", "num_tokens")
  step_value_names = ()

  def model_inputs(self, batch: Tensors) -> Tensors:
    return {k: batch[k] for k in ENCODER_INPUT_NAMES}

  def normalizers(self, batch: Tensors) -> Tensors:
    return {"examples": metric_sums.num_examples(batch)}

  def example_losses_and_correct(self, batch: Tensors, outputs):
    """([B] per-example loss, [B] 1.0 where the prediction is right)."""
    raise NotImplementedError

  def sums(self, batch: Tensors, outputs) -> Tensors:
    losses, correct = self.example_losses_and_correct(batch, outputs)
    return {
        "loss_sum": ops.sum(losses),
        "correct": ops.sum(correct),
        "num_examples": metric_sums.num_examples(batch),
        "num_tokens": metric_sums.num_tokens(batch),
    }

  def loss(self, sums: Tensors, normalizers: Tensors):
    return sums["loss_sum"] / ops.maximum(normalizers["examples"], 1.0)

  def step_values(self, sums: Tensors, normalizers: Tensors) -> Tensors:
    return {}

  def summarize(self, sums: Dict[str, float], num_steps: int) -> Dict[str, float]:
    return {
        "loss": _ratio(sums["loss_sum"], sums["num_examples"]),
        "train_accuracy": _ratio(sums["correct"], sums["num_examples"]),
    }

  def progress_fields(self, summary: Dict[str, float]) -> List[str]:
    return [f"loss={summary['loss']:.4f}", f"train_acc={summary['train_accuracy']:.2f}"]


class ClassificationObjective(_ExampleMeanObjective):
  """Softmax cross-entropy of `label_ids` int [B] against logits [B, K]."""

  def example_losses_and_correct(self, batch, logits):
    return metric_sums.cross_entropy_and_correct(batch["label_ids"], ops.cast(logits, "float32"))


class RegressionObjective(_ExampleMeanObjective):
  """Mean squared error of float `label_ids` [B] against logits [B, 1] (STS-B).

  "train_accuracy" here is the share of predictions within 0.5 of the target.
  """

  def example_losses_and_correct(self, batch, logits):
    error = ops.cast(logits, "float32")[:, 0] - ops.cast(batch["label_ids"], "float32")
    return ops.square(error), ops.cast(ops.abs(error) < 0.5, "float32")


class SpanObjective(_ExampleMeanObjective):
  """Mean of the start and end cross-entropies over positions (BERT's SQuAD loss).

  Batch: `start_positions`, `end_positions` int [B]; outputs: `start_logits`,
  `end_logits` float [B, T]. "correct" = both ends right.
  """

  def example_losses_and_correct(self, batch, outputs):
    losses, correct = [], []
    for name in ("start", "end"):
      loss, hit = metric_sums.cross_entropy_and_correct(
          batch[f"{name}_positions"], ops.cast(outputs[f"{name}_logits"], "float32")
      )
      losses.append(loss)
      correct.append(hit)
    # Hits are 0.0 or 1.0: their product is 1.0 exactly where both ends are right.
    return (losses[0] + losses[1]) / 2.0, correct[0] * correct[1]


class TaggingObjective:
  """Per-token softmax cross-entropy of `label_ids` int [B, T] against logits [B, T, K],
  weighted by `label_weights` float [B, T] (1.0 at each word's scored first piece).

  The loss is the SUM over the global batch's scored tokens divided by their global count
  (the normalizer), as the MLM loss of `PretrainingObjective`: every scored word weighs the
  same whichever row or replica it is in. "train_accuracy" is the share of scored tokens
  tagged right.
  """

  stat_names = ("loss_sum", "correct", "num_scored", "num_examples", "num_tokens")
  step_value_names = ()

  def model_inputs(self, batch: Tensors) -> Tensors:
    return {k: batch[k] for k in ENCODER_INPUT_NAMES}

  def normalizers(self, batch: Tensors) -> Tensors:
    return {"scored": ops.sum(ops.cast(batch["label_weights"], "float32"))}

  def sums(self, batch: Tensors, logits) -> Tensors:
    weights = ops.cast(batch["label_weights"], "float32")
    losses, correct = metric_sums.cross_entropy_and_correct(
        batch["label_ids"], ops.cast(logits, "float32")
    )
    return {
        "loss_sum": ops.sum(losses * weights),
        "correct": ops.sum(correct * weights),
        "num_scored": ops.sum(weights),
        "num_examples": metric_sums.num_examples(batch),
        "num_tokens": metric_sums.num_tokens(batch),
    }

  def loss(self, sums: Tensors, normalizers: Tensors):
    return sums["loss_sum"] / ops.maximum(normalizers["scored"], 1.0)

  def step_values(self, sums: Tensors, normalizers: Tensors) -> Tensors:
    return {}

  def summarize(self, sums: Dict[str, float], num_steps: int) -> Dict[str, float]:
    return {
        "loss": _ratio(sums["loss_sum"], sums["num_scored"]),
        "train_accuracy": _ratio(sums["correct"], sums["num_scored"]),
    }

  def progress_fields(self, summary: Dict[str, float]) -> List[str]:
    return [f"loss={summary['loss']:.4f}", f"tag_acc={summary['train_accuracy']:.3f}"]
