"""TaggingObjective against the numpy definition (weighted token cross-entropy over the global
batch), and the objective and the TokenTagger under XLA (jit_compile) = eager."""

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.training import objectives


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _tagging_batch(rng, batch=6, seq=7, tags=5):
  weights = (rng.random((batch, seq)) < 0.5).astype(np.float32)
  weights[0] = 0.0  # a row without scored tokens (a context-only window)
  return {
      "input_ids": rng.integers(0, 50, size=(batch, seq)).astype(np.int32),
      "input_mask": np.ones((batch, seq), np.int32),
      "segment_ids": np.zeros((batch, seq), np.int32),
      "label_ids": (rng.integers(0, tags, size=(batch, seq)) * (weights > 0)).astype(np.int32),
      "label_weights": weights,
  }, rng.normal(size=(batch, seq, tags)).astype(np.float32)


def test_tagging_loss_is_the_mean_over_the_global_batchs_scored_tokens(rng):
  batch, logits = _tagging_batch(rng)
  objective = objectives.TaggingObjective()
  # Two replicas with different numbers of scored tokens: their loss shares, normalised
  # by the all-reduced count, add up to the mean over every scored token of the batch.
  shares, correct, scored = [], 0.0, 0.0
  parts = [{k: tf.constant(v[p]) for k, v in batch.items()} for p in (slice(0, 2), slice(2, 6))]
  total = sum(float(objective.normalizers(p)["scored"]) for p in parts)
  for part, rows in zip(parts, (slice(0, 2), slice(2, 6))):
    sums = objective.sums(part, tf.constant(logits[rows]))
    shares.append(float(objective.loss(sums, {"scored": tf.constant(total)})))
    correct += float(sums["correct"])
    scored += float(sums["num_scored"])
  w = batch["label_weights"].astype(np.float64)
  token_losses = -np.take_along_axis(
      _log_softmax(logits.astype(np.float64)), batch["label_ids"][..., None], -1
  )[..., 0]
  assert sum(shares) == pytest.approx((token_losses * w).sum() / w.sum(), rel=1e-5)
  assert scored == w.sum()
  assert correct == np.sum((logits.argmax(-1) == batch["label_ids"]) * w)
  summary = objective.summarize(
      {"loss_sum": 2.0, "correct": 3.0, "num_scored": 4.0, "num_examples": 1, "num_tokens": 9}, 1
  )
  assert summary == {"loss": 0.5, "train_accuracy": 0.75}


def test_objective_and_tagger_compile_with_xla(rng):
  from recurrent_bert.config import get_preset
  from recurrent_bert.models import TokenTagger
  from recurrent_bert.models import build_encoder

  batch, _ = _tagging_batch(rng, batch=2, seq=8)
  batch = {k: tf.constant(v) for k, v in batch.items()}
  tagger = TokenTagger(build_encoder(get_preset("bert_tiny").replace(vocab_size=60)), 5)
  objective = objectives.TaggingObjective()

  def step(batch):
    logits = tagger(objective.model_inputs(batch), training=False)
    sums = objective.sums(batch, logits)
    return logits, objective.loss(sums, objective.normalizers(batch))

  eager_logits, eager_loss = step(batch)
  xla_logits, xla_loss = tf.function(step, jit_compile=True)(batch)
  assert eager_logits.shape == (2, 8, 5)
  np.testing.assert_allclose(xla_logits.numpy(), eager_logits.numpy(), atol=1e-4)
  assert float(xla_loss) == pytest.approx(float(eager_loss), rel=1e-4)
