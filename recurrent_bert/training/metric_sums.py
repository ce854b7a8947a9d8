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

Written in `keras.ops`, so the same sums run under every Keras backend: on TensorFlow
they are the tf ops the custom loop always ran (tf tensors in, tf tensors out).
"""

from typing import Any, Dict, Optional

from keras import ops

Tensor = Any  # a tensor of the Keras backend (tf.Tensor, jax.Array, torch.Tensor)

STAT_NAMES = (
    "mlm_loss_sum",
    "mlm_weight_sum",
    "mlm_correct",
    "nsp_loss_sum",
    "nsp_correct",
    "num_examples",
    "num_tokens",
)


def cross_entropy_and_correct(labels: Tensor, logits: Tensor):
  """Softmax cross-entropy and hits of int labels [...] against float32 logits [..., K].

  Returns:
    (float32 [...] -log softmax(logits)[label], float32 [...] 1.0 where argmax == label).
    On TensorFlow the cross-entropy is tf.nn.sparse_softmax_cross_entropy_with_logits.
  """
  labels = ops.cast(labels, "int32")
  cross_entropy = ops.sparse_categorical_crossentropy(labels, logits, from_logits=True)
  correct = ops.cast(ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), labels), "float32")
  return cross_entropy, correct


def masked_lm_sums(
    mlm_logits: Tensor, masked_lm_ids: Tensor, masked_lm_weights: Tensor
) -> Dict[str, Tensor]:
  """Weighted MLM cross-entropy and accuracy, as sums.

  Args:
    mlm_logits: float32 [B, P, V].
    masked_lm_ids: int [B, P], the original token ids.
    masked_lm_weights: float32 [B, P], 1.0 for real predictions, 0.0 for padding.

  Returns:
    float32 scalars mlm_loss_sum = Σ w·CE, mlm_weight_sum = Σ w,
    mlm_correct = Σ w·[argmax logits == id].
  """
  logits = ops.cast(mlm_logits, "float32")
  ids = ops.cast(masked_lm_ids, "int32")
  weights = ops.cast(masked_lm_weights, "float32")
  cross_entropy, correct = cross_entropy_and_correct(ids, logits)
  return {
      "mlm_loss_sum": ops.sum(weights * cross_entropy),
      "mlm_weight_sum": ops.sum(weights),
      "mlm_correct": ops.sum(weights * correct),
  }


def masked_word_count(
    masked_lm_ids: Tensor, masked_lm_weights: Tensor, word_starts: Tensor
) -> Tensor:
  """The masked words: masked positions whose original token starts a word.

  Args:
    masked_lm_ids: int [B, P], the original token ids.
    masked_lm_weights: float32 [B, P], 1.0 for real predictions, 0.0 for padding.
    word_starts: bool [V'] (V' > every id), per id whether the token starts a word
      (`data.vocab.Vocabulary.word_starts`).

  Returns:
    float32 scalar Σ w · word_starts[id].
  """
  starts = ops.take(ops.cast(word_starts, "float32"), ops.cast(masked_lm_ids, "int32"))
  return ops.sum(ops.cast(masked_lm_weights, "float32") * starts)


def next_sentence_sums(
    nsp_logits: Tensor, labels: Tensor, example_weights: Optional[Tensor] = None
) -> Dict[str, Tensor]:
  """NSP cross-entropy and accuracy sums.

  Args:
    nsp_logits: float32 [B, 2].
    labels: int [B].
    example_weights: float32 [B], 1.0 for real examples and 0.0 for padding rows
      (evaluation batches); None counts every example.
  """
  logits = ops.cast(nsp_logits, "float32")
  cross_entropy, correct = cross_entropy_and_correct(ops.reshape(labels, [-1]), logits)
  if example_weights is not None:
    cross_entropy *= example_weights
    correct *= example_weights
  return {"nsp_loss_sum": ops.sum(cross_entropy), "nsp_correct": ops.sum(correct)}


def num_examples(batch: Dict[str, Tensor]) -> Tensor:
  """float32 scalar B, the rows of the batch's [B, T] `input_ids`."""
  return ops.cast(ops.shape(batch["input_ids"])[0], "float32")


def num_tokens(batch: Dict[str, Tensor]) -> Tensor:
  """float32 scalar Σ input_mask: the real (unpadded) tokens of the batch."""
  return ops.sum(ops.cast(batch["input_mask"], "float32"))


def pretraining_sums(batch: Dict[str, Tensor], outputs: Dict[str, Tensor]) -> Dict[str, Tensor]:
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
    sums.update(nsp_loss_sum=ops.zeros((), "float32"), nsp_correct=ops.zeros((), "float32"))
  if example_weights is None:
    sums["num_examples"] = num_examples(batch)
  else:
    sums["num_examples"] = ops.sum(example_weights)
  sums["num_tokens"] = num_tokens(batch)
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
