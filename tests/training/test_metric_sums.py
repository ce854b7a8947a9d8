"""Loss/metric sums against numpy, and their independence of how a batch is split."""

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.training import metric_sums


def numpy_cross_entropy(logits, labels):
  shifted = logits - logits.max(axis=-1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
  return -np.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]


def test_masked_lm_sums_match_numpy(rng):
  logits = rng.normal(size=(3, 5, 11)).astype(np.float32) * 3
  ids = rng.integers(0, 11, size=(3, 5))
  weights = np.array([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]], np.float32)
  sums = metric_sums.masked_lm_sums(
      tf.constant(logits), tf.constant(ids, tf.int32), tf.constant(weights)
  )
  ce = numpy_cross_entropy(logits.astype(np.float64), ids)
  assert float(sums["mlm_loss_sum"]) == pytest.approx((weights * ce).sum(), rel=1e-5)
  assert float(sums["mlm_weight_sum"]) == 9.0
  correct = (logits.argmax(-1) == ids) * weights
  assert float(sums["mlm_correct"]) == correct.sum()
  # The weighted mean ignores padded predictions entirely.
  weighted_mean = float(sums["mlm_loss_sum"] / sums["mlm_weight_sum"])
  assert weighted_mean == pytest.approx(ce[weights > 0].mean(), rel=1e-5)


def test_next_sentence_sums_match_numpy(rng):
  logits = rng.normal(size=(6, 2)).astype(np.float32)
  labels = np.array([0, 1, 1, 0, 1, 0])
  sums = metric_sums.next_sentence_sums(tf.constant(logits), tf.constant(labels[:, None]))
  assert float(sums["nsp_loss_sum"]) == pytest.approx(
      numpy_cross_entropy(logits.astype(np.float64), labels).sum(), rel=1e-5
  )
  assert float(sums["nsp_correct"]) == (logits.argmax(-1) == labels).sum()


def test_uniform_logits_give_log_vocab():
  sums = metric_sums.masked_lm_sums(
      tf.zeros([2, 3, 50]), tf.ones([2, 3], tf.int32), tf.ones([2, 3])
  )
  assert float(sums["mlm_loss_sum"] / sums["mlm_weight_sum"]) == pytest.approx(np.log(50))


def test_summarize_pools_sums():
  sums = dict(
      mlm_loss_sum=12.0,
      mlm_weight_sum=4.0,
      mlm_correct=1.0,
      nsp_loss_sum=2.0,
      nsp_correct=3.0,
      num_examples=4.0,
      num_tokens=100.0,
  )
  out = metric_sums.summarize(sums, num_steps=2, use_nsp=True)
  assert out == {
      "mlm_loss": 3.0,
      "mlm_accuracy": 0.25,
      "nsp_loss": 0.5,
      "nsp_accuracy": 0.75,
      "loss": 3.5,
  }
