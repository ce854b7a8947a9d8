"""Fine-tuning objectives against numpy formulas written from their definitions."""

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.training import objectives


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _batch(rng, batch, seq):
  mask = (np.arange(seq)[None, :] < rng.integers(2, seq + 1, size=(batch, 1))).astype(np.int32)
  return {
      "input_ids": rng.integers(0, 50, size=(batch, seq)).astype(np.int32),
      "input_mask": mask,
      "segment_ids": np.zeros((batch, seq), np.int32),
  }


def test_classification_loss_is_mean_cross_entropy_over_the_global_batch(rng):
  batch = _batch(rng, 6, 5)
  batch["label_ids"] = rng.integers(0, 3, size=6).astype(np.int32)
  logits = rng.normal(size=(6, 3)).astype(np.float32)
  objective = objectives.ClassificationObjective()
  # Two replicas of 3 examples: their shares must add up to the mean over all 6.
  shares, corrects = [], 0.0
  for part in (slice(0, 3), slice(3, 6)):
    sub = {k: tf.constant(v[part]) for k, v in batch.items()}
    sums = objective.sums(sub, tf.constant(logits[part]))
    shares.append(float(objective.loss(sums, {"examples": tf.constant(6.0)})))
    corrects += float(sums["correct"])
  expected = -np.mean(_log_softmax(logits.astype(np.float64))[np.arange(6), batch["label_ids"]])
  assert sum(shares) == pytest.approx(expected, rel=1e-5)
  assert corrects == np.sum(logits.argmax(-1) == batch["label_ids"])


def test_regression_loss_is_mean_squared_error(rng):
  batch = {k: tf.constant(v) for k, v in _batch(rng, 5, 4).items()}
  targets = rng.uniform(0, 5, size=5).astype(np.float32)
  batch["label_ids"] = tf.constant(targets)
  predictions = rng.uniform(0, 5, size=(5, 1)).astype(np.float32)
  objective = objectives.RegressionObjective()
  sums = objective.sums(batch, tf.constant(predictions))
  loss = objective.loss(sums, objective.normalizers(batch))
  assert float(loss) == pytest.approx(np.mean((predictions[:, 0] - targets) ** 2), rel=1e-5)
  assert float(sums["num_tokens"]) == batch["input_mask"].numpy().sum()


def test_span_loss_is_the_mean_of_start_and_end_cross_entropies(rng):
  batch = {k: tf.constant(v) for k, v in _batch(rng, 4, 7).items()}
  starts, ends = rng.integers(0, 7, size=4), rng.integers(0, 7, size=4)
  batch.update(
      start_positions=tf.constant(starts, tf.int32), end_positions=tf.constant(ends, tf.int32)
  )
  start_logits = rng.normal(size=(4, 7)).astype(np.float32)
  end_logits = rng.normal(size=(4, 7)).astype(np.float32)
  start_logits[0, starts[0]] = end_logits[0, ends[0]] = 50.0  # example 0 is right
  objective = objectives.SpanObjective()
  sums = objective.sums(
      batch, {"start_logits": tf.constant(start_logits), "end_logits": tf.constant(end_logits)}
  )
  loss = float(objective.loss(sums, objective.normalizers(batch)))
  rows = np.arange(4)
  expected = -np.mean(
      (
          _log_softmax(start_logits.astype(np.float64))[rows, starts]
          + _log_softmax(end_logits.astype(np.float64))[rows, ends]
      )
      / 2
  )
  assert loss == pytest.approx(expected, rel=1e-5)
  both = (start_logits.argmax(-1) == starts) & (end_logits.argmax(-1) == ends)
  assert float(sums["correct"]) == both.sum() >= 1
