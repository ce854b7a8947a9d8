import keras
import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.config import FAMILIES
from recurrent_bert.models import Encoder
from recurrent_bert.models import build_encoder
from recurrent_bert.weights_file import variables_by_path

FAMILY_NAMES = sorted(FAMILIES)


def _batch(rng, vocab, lengths, total):
  """Right-padded inputs whose padded positions hold random junk ids and segments."""
  batch = len(lengths)
  ids = rng.integers(5, vocab, size=(batch, total)).astype("int32")
  segments = rng.integers(0, 2, size=(batch, total)).astype("int32")
  mask = (np.arange(total)[None] < np.array(lengths)[:, None]).astype("int32")
  return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def _repad(inputs, rng, total, vocab):
  """The same real tokens, padded to `total` with different junk."""
  out = {}
  lengths = inputs["input_mask"].sum(1)
  fresh = _batch(rng, vocab, lengths, total)
  for name, value in inputs.items():
    padded = fresh[name].copy()
    for b, n in enumerate(lengths):
      padded[b, :n] = value[b, :n]
    out[name] = padded
  return out


@pytest.mark.slow(seconds=11)
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_real_positions_ignore_padding_length_and_values(rng, family):
  encoder = build_encoder(f"{family}_tiny")
  vocab = encoder.config.vocab_size
  short = _batch(rng, vocab, lengths=[7, 4, 1], total=7)
  long = _repad(short, rng, total=16, vocab=vocab)
  out_short = encoder(short, training=False)
  out_long = encoder(long, training=False)
  for b, n in enumerate(short["input_mask"].sum(1)):
    np.testing.assert_allclose(
        out_long["sequence_output"][b, :n],
        out_short["sequence_output"][b, :n],
        atol=2e-5,
        rtol=1e-4,
    )
  np.testing.assert_allclose(
      out_long["pooled_output"], out_short["pooled_output"], atol=2e-5, rtol=1e-4
  )
  assert len(out_long["encoder_outputs"]) == encoder.config.num_layers


@pytest.mark.slow(seconds=63)
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_forward_and_backward_under_xla(rng, family):
  encoder = build_encoder(f"{family}_tiny")
  inputs = {
      k: tf.constant(v) for k, v in _batch(rng, encoder.config.vocab_size, [9, 5], total=9).items()
  }

  def step(batch):
    with tf.GradientTape() as tape:
      out = encoder(batch, training=True)
      loss = tf.reduce_mean(out["sequence_output"] ** 2) + tf.reduce_mean(out["pooled_output"])
    return loss, tape.gradient(loss, encoder.trainable_variables)

  loss, grads = tf.function(step, jit_compile=True)(inputs)
  assert np.isfinite(loss.numpy())
  missing = [v.path for v, g in zip(encoder.trainable_variables, grads) if g is None]
  assert not missing, missing
  assert all(np.all(np.isfinite(g.numpy())) for g in grads if not isinstance(g, tf.IndexedSlices))


@pytest.mark.slow(seconds=18)
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_config_and_keras_file_round_trip(rng, tmp_path, family):
  encoder = build_encoder(f"{family}_tiny")
  inputs = _batch(rng, encoder.config.vocab_size, [6, 3], total=6)
  want = encoder(inputs, training=False)["sequence_output"].numpy()

  clone = Encoder.from_config(encoder.get_config())
  assert clone.config == encoder.config
  clone.set_weights(encoder.get_weights())
  np.testing.assert_allclose(clone(inputs, training=False)["sequence_output"], want, atol=1e-6)

  path = str(tmp_path / f"{family}.keras")
  encoder.save(path)
  loaded = keras.models.load_model(path)
  assert isinstance(loaded, Encoder) and loaded.config == encoder.config
  np.testing.assert_allclose(loaded(inputs, training=False)["sequence_output"], want, atol=1e-6)


def test_relative_bias_per_layer_option(rng):
  shared = build_encoder("bert_rab_tiny")
  per_layer = Encoder(shared.config.replace(relative_bias_shared=False))
  n_layers, tables = shared.config.num_layers, 32 * shared.config.num_heads
  assert per_layer.count_params() - shared.count_params() == (n_layers - 1) * tables


def test_swishrnn_step_schedule_cycles():
  encoder = build_encoder("swishrnn_mini")
  ks = [block.branch_layers[0].step_size for block in encoder.blocks]
  assert ks == [1, 2, 4, 1]


def test_inputs_are_matched_by_name_not_position(rng):
  encoder = build_encoder("bert_tiny")
  inputs = _batch(rng, encoder.config.vocab_size, [5, 3], total=5)
  want = encoder(inputs, training=False)["sequence_output"].numpy()
  # Extra keys that sort between the real ones must not shift them.
  noisy = dict(
      inputs, input_n=np.full((2, 5), 99, "int32"), masked_lm_positions=np.full((2, 2), 7, "int32")
  )
  np.testing.assert_array_equal(encoder(noisy, training=False)["sequence_output"], want)
  with pytest.raises(ValueError, match="segment_ids"):
    encoder({"input_ids": inputs["input_ids"], "input_mask": inputs["input_mask"]})


@pytest.mark.slow(seconds=7)
@pytest.mark.parametrize("family", ["bert_rab", "trans_blstm_2", "swishrnn", "blstm"])
def test_mixed_bfloat16_forward_and_backward_are_finite(rng, family):
  keras.config.set_dtype_policy("mixed_bfloat16")  # conftest restores float32
  encoder = build_encoder(f"{family}_tiny")
  inputs = _batch(rng, encoder.config.vocab_size, [8, 4], total=8)
  with tf.GradientTape() as tape:
    out = encoder(inputs, training=True)
    loss = tf.reduce_mean(tf.cast(out["sequence_output"], tf.float32) ** 2) + tf.reduce_mean(
        tf.cast(out["pooled_output"], tf.float32)
    )
  assert out["sequence_output"].dtype == tf.bfloat16
  grads = tape.gradient(loss, encoder.trainable_variables)
  assert all(g is not None for g in grads)
  assert all(v.dtype == tf.float32 for v in encoder.trainable_variables)
  assert np.isfinite(loss.numpy())


def test_swishrnn_implementations_give_the_same_model(rng):
  """The config's implementation switch changes how, not what, the encoder computes."""
  fused = build_encoder("swishrnn_tiny")
  scan = Encoder(fused.config.replace(swish_rnn_implementation="scan"))
  scan.set_weights(fused.get_weights())
  assert {b.branch_layers[0].implementation for b in scan.blocks} == {"scan"}
  inputs = _batch(rng, fused.config.vocab_size, [9, 6], total=9)
  np.testing.assert_allclose(
      scan(inputs, training=False)["sequence_output"],
      fused(inputs, training=False)["sequence_output"],
      atol=1e-5,
  )


@pytest.mark.slow(seconds=5)
@pytest.mark.parametrize("family", ["trans_blstm_2", "trans_blstm_small_1"])
def test_blstm_checkpoint_restores_under_another_implementation(rng, tmp_path, family):
  """A checkpoint written by a scan-BLSTM encoder (the format of the existing ones)
  restores into the default (fused) one, variable for variable, same outputs."""
  fused = build_encoder(f"{family}_tiny")
  scan = Encoder(fused.config.replace(blstm_implementation="scan"))
  inputs = _batch(rng, fused.config.vocab_size, [9, 6], total=9)
  for encoder in (fused, scan):
    encoder(inputs, training=False)  # builds the weights
  scan.set_weights(
      [rng.normal(scale=0.1, size=w.shape).astype("float32") for w in scan.get_weights()]
  )
  prefix = tf.train.Checkpoint(encoder=variables_by_path(scan)).write(str(tmp_path / "ckpt"))
  tf.train.Checkpoint(encoder=variables_by_path(fused)).read(
      prefix
  ).assert_existing_objects_matched()
  assert sorted(variables_by_path(fused)) == sorted(variables_by_path(scan))
  np.testing.assert_allclose(
      fused(inputs, training=False)["sequence_output"],
      scan(inputs, training=False)["sequence_output"],
      atol=1e-5,
  )
