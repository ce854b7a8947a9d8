import keras
import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.models import Classifier
from recurrent_bert.models import Pretrainer
from recurrent_bert.models import SpanExtractor
from recurrent_bert.models import build_encoder
from tests import references as ref


def _inputs(rng, vocab, batch=2, length=8):
  mask = np.ones((batch, length), "int32")
  mask[1, 5:] = 0
  return {"input_ids": rng.integers(5, vocab, (batch, length)).astype("int32"),
          "input_mask": mask,
          "segment_ids": np.zeros((batch, length), "int32")}


def test_mlm_logits_use_tied_embeddings_at_masked_positions(rng):
  encoder = build_encoder("bert_tiny")
  model = Pretrainer(encoder, use_nsp=True)
  head = model.mlm_head
  head.output_bias.assign(rng.normal(size=head.output_bias.shape).astype("float32"))
  inputs = _inputs(rng, encoder.config.vocab_size)
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
  vocab_tables = [w for w in model.weights if tuple(w.shape) == tuple(
      encoder.token_embeddings.shape)]
  assert len(vocab_tables) == 1


def test_mlm_loss_trains_the_token_embeddings_under_xla(rng):
  encoder = build_encoder("swishrnn_tiny")
  model = Pretrainer(encoder, use_nsp=False)
  inputs = {k: tf.constant(v) for k, v in _inputs(rng, encoder.config.vocab_size).items()}
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


@pytest.mark.parametrize("make_model", [
    lambda e: Pretrainer(e, use_nsp=True),
    lambda e: Classifier(e, num_classes=3),
    lambda e: Classifier(e, num_classes=1),
    lambda e: SpanExtractor(e, use_blstm_decoder=True),
], ids=["pretrainer", "classifier", "regressor", "span_blstm_decoder"])
def test_task_models_round_trip_through_keras_files(rng, tmp_path, make_model):
  model = make_model(build_encoder("trans_blstm_small_2_tiny"))
  inputs = _inputs(rng, model.encoder.config.vocab_size)
  if "masked_lm_positions" in [i.name for i in model.inputs]:
    inputs["masked_lm_positions"] = np.array([[1, 2], [3, 0]], "int32")
  want = keras.tree.map_structure(np.asarray, model(inputs, training=False))
  path = str(tmp_path / "task.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  assert type(loaded) is type(model)
  got = loaded(inputs, training=False)
  keras.tree.map_structure(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
                           got, want)
  if isinstance(loaded, Pretrainer):  # the tie survives loading
    assert loaded.mlm_head._embeddings is loaded.encoder.embeddings


def test_span_logits_mask_padding(rng):
  model = SpanExtractor(build_encoder("bert_tiny"))
  inputs = _inputs(rng, model.encoder.config.vocab_size)
  out = model(inputs, training=False)
  assert out["start_logits"].shape == (2, 8)
  assert np.all(out["end_logits"].numpy()[1, 5:] <= -1e8)
  assert np.all(np.abs(out["start_logits"].numpy()[0]) < 1e3)
