import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.models import Pretrainer
from recurrent_bert.models import build_encoder
from tests.support import references as ref


def test_mlm_logits_use_tied_embeddings_at_masked_positions(rng, encoder_batch):
  encoder = build_encoder("bert_tiny")
  model = Pretrainer(encoder, use_nsp=True)
  head = model.mlm_head
  head.output_bias.assign(rng.normal(size=head.output_bias.shape).astype("float32"))
  inputs = encoder_batch(encoder.config.vocab_size)
  inputs["masked_lm_positions"] = np.array([[1, 6, 0], [4, 2, 0]], "int32")
  out = model(inputs, training=False)
  assert out["mlm_logits"].shape == (2, 3, encoder.config.vocab_size)
  assert out["nsp_logits"].shape == (2, 2)

  # The whole batch, extra key included: the encoder picks its inputs by name.
  sequence = encoder(inputs, training=False)["sequence_output"].numpy()
  gathered = np.stack([sequence[b, inputs["masked_lm_positions"][b]] for b in range(2)])
  h = ref.gelu(gathered @ head.transform.kernel.numpy() + head.transform.bias.numpy())
  h = ref.layer_norm(h, head.layer_norm.gamma.numpy(), head.layer_norm.beta.numpy())
  want = h @ encoder.token_embeddings.numpy().T + head.output_bias.numpy()
  np.testing.assert_allclose(out["mlm_logits"], want, atol=1e-4, rtol=1e-4)
  # Tied: no second [V, H] table.
  vocab_tables = [
      w for w in model.weights if tuple(w.shape) == tuple(encoder.token_embeddings.shape)
  ]
  assert len(vocab_tables) == 1


@pytest.mark.slow(seconds=9)
def test_mlm_loss_trains_the_token_embeddings_under_xla(encoder_batch):
  encoder = build_encoder("swishrnn_tiny")
  model = Pretrainer(encoder, use_nsp=False)
  inputs = {k: tf.constant(v) for k, v in encoder_batch(encoder.config.vocab_size).items()}
  inputs["masked_lm_positions"] = tf.constant([[1, 2], [3, 4]], tf.int32)
  labels = tf.constant([[7, 8], [9, 10]], tf.int32)

  @tf.function(jit_compile=True)
  def step():
    with tf.GradientTape() as tape:
      logits = model(inputs, training=True)["mlm_logits"]
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    return loss, tape.gradient(loss, encoder.token_embeddings)

  loss, grad = step()
  assert abs(loss.numpy() - np.log(encoder.config.vocab_size)) < 1.0  # near uniform
  grad = tf.convert_to_tensor(grad).numpy()
  assert np.abs(grad[[7, 8, 9, 10]]).sum() > 0
