"""Pretraining losses and metrics as sums, so replicas and steps add up exactly.

Every quantity is a per-replica *sum* (of weighted cross-entropies, weights, correct
predictions, examples, tokens); ratios are formed only after summing over replicas and
steps. That makes the loss of a global batch independent of how it is split:

  mlm_loss = Σ_b,p w[b,p] · CE(logits[b,p], ids[b,p]) / Σ_b,p w[b,p]     (weighted mean)
  nsp_loss = Σ_b CE(nsp_logits[b], label[b]) / B                          (mean)
  loss     = mlm_loss + nsp_loss

Held-out evaluation can also count the masked *words* (`masked_word_count`), for a loss
that vocabularies of different granularity share: with whole-word masking every piece of
a masked word is masked, so a word's loss is the sum of its pieces' and

  mlm_loss_per_word = Σ w·CE / Σ_b,p w[b,p] · starts_word[ids[b,p]]
"""

from typing import Dict, Optional

import tensorflow as tf

STAT_NAMES = (
    "mlm_loss_sum",
    "mlm_weight_sum",
    "mlm_correct",
    "nsp_loss_sum",
    "nsp_correct",
    "num_examples",
    "num_tokens",
)


def masked_lm_sums(
    mlm_logits: tf.Tensor, masked_lm_ids: tf.Tensor, masked_lm_weights: tf.Tensor
) -> Dict[str, tf.Tensor]:
  """Weighted MLM cross-entropy and accuracy, as sums.

  Args:
    mlm_logits: float32 [B, P, V].
    masked_lm_ids: int [B, P], the original token ids.
    masked_lm_weights: float32 [B, P], 1.0 for real predictions, 0.0 for padding.

  Returns:
    float32 scalars mlm_loss_sum = Σ w·CE, mlm_weight_sum = Σ w,
    mlm_correct = Σ w·[argmax logits == id].
  """
  logits = tf.cast(mlm_logits, tf.float32)
  ids = tf.cast(masked_lm_ids, tf.int32)
  weights = tf.cast(masked_lm_weights, tf.float32)
  cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids, logits=logits)
  correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), ids), tf.float32)
  return {
      "mlm_loss_sum": tf.reduce_sum(weights * cross_entropy),
      "mlm_weight_sum": tf.reduce_sum(weights),
      "mlm_correct": tf.reduce_sum(weights * correct),
  }


def masked_word_count(
    masked_lm_ids: tf.Tensor, masked_lm_weights: tf.Tensor, word_starts: tf.Tensor
) -> tf.Tensor:
  """The masked words: masked positions whose original token starts a word.

  Args:
    masked_lm_ids: int [B, P], the original token ids.
    masked_lm_weights: float32 [B, P], 1.0 for real predictions, 0.0 for padding.
    word_starts: bool [V'] (V' > every id), per id whether the token starts a word
      (`data.vocab.Vocabulary.word_starts`).

  Returns:
    float32 scalar Σ w · word_starts[id].
  """
  starts = tf.gather(tf.cast(word_starts, tf.float32), tf.cast(masked_lm_ids, tf.int32))
  return tf.reduce_sum(tf.cast(masked_lm_weights, tf.float32) * starts)


def next_sentence_sums(
    nsp_logits: tf.Tensor, labels: tf.Tensor, example_weights: Optional[tf.Tensor] = None
) -> Dict[str, tf.Tensor]:
  """NSP cross-entropy and accuracy sums.

  Args:
    nsp_logits: float32 [B, 2].
    labels: int [B].
    example_weights: float32 [B], 1.0 for real examples and 0.0 for padding rows
      (evaluation batches); None counts every example.
  """
  logits = tf.cast(nsp_logits, tf.float32)
  labels = tf.cast(tf.reshape(labels, [-1]), tf.int32)
  cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
  correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32)
  if example_weights is not None:
    cross_entropy *= example_weights
    correct *= example_weights
  return {"nsp_loss_sum": tf.reduce_sum(cross_entropy), "nsp_correct": tf.reduce_sum(correct)}


def pretraining_sums(
    batch: Dict[str, tf.Tensor], outputs: Dict[str, tf.Tensor]
) -> Dict[str, tf.Tensor]:
  """All STAT_NAMES sums of one (per-replica) batch; NSP terms are 0 without NSP.

  A batch with float32 [B] `example_weights` (evaluation's padded batches) counts only
  the rows of weight 1 in num_examples and the NSP sums.
  """
  example_weights = batch.get("example_weights")
  sums = masked_lm_sums(outputs["mlm_logits"], batch["masked_lm_ids"], batch["masked_lm_weights"])
  if "nsp_logits" in outputs:
    sums.update(
        next_sentence_sums(outputs["nsp_logits"], batch["next_sentence_labels"], example_weights)
    )
  else:
    sums.update(nsp_loss_sum=tf.constant(0.0), nsp_correct=tf.constant(0.0))
  if example_weights is None:
    sums["num_examples"] = tf.cast(tf.shape(batch["input_ids"])[0], tf.float32)
  else:
    sums["num_examples"] = tf.reduce_sum(example_weights)
  sums["num_tokens"] = tf.reduce_sum(tf.cast(batch["input_mask"], tf.float32))
  return sums


def summarize(sums: Dict[str, float], num_steps: int, use_nsp: bool) -> Dict[str, float]:
  """Averages over `num_steps` steps of (replica- and step-)summed stats.

  The MLM loss is the mean over steps of each step's weighted mean, approximated here by
  the pooled weighted mean (equal when every step has the same number of predictions).
  """

  def ratio(a, b):
    return float(a) / float(b) if b else 0.0

  out = {
      "mlm_loss": ratio(sums["mlm_loss_sum"], sums["mlm_weight_sum"]),
      "mlm_accuracy": ratio(sums["mlm_correct"], sums["mlm_weight_sum"]),
  }
  if use_nsp:
    out["nsp_loss"] = ratio(sums["nsp_loss_sum"], sums["num_examples"])
    out["nsp_accuracy"] = ratio(sums["nsp_correct"], sums["num_examples"])
  out["loss"] = out["mlm_loss"] + out.get("nsp_loss", 0.0)
  return out


def per_word(sums: Dict[str, float]) -> Dict[str, float]:
  """mlm_loss_per_word and mlm_words of sums holding "mlm_words" (`masked_word_count`
  summed like the others); {} without it."""
  if "mlm_words" not in sums:
    return {}
  words = float(sums["mlm_words"])
  return {
      "mlm_loss_per_word": float(sums["mlm_loss_sum"]) / words if words else 0.0,
      "mlm_words": words,
  }
