"""What task heads read (models/head_inputs.py): --layer_mix and --feature_based models.

References: the variable paths of a default model written out below (what checkpoints of
the plain encoder + head models were keyed by), a plain functional model built here
without `read_encoder`, and the encoder's own weights before a training step.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert import saving
from recurrent_bert import weights_file
from recurrent_bert.config import get_preset
from recurrent_bert.models import Classifier
from recurrent_bert.models import MultipleChoice
from recurrent_bert.models import SpanExtractor
from recurrent_bert.models import TokenTagger
from recurrent_bert.models import build_encoder
from recurrent_bert.models.encoder import encoder_inputs
from recurrent_bert.models.heads import ClassificationHead

VOCAB = 40


def _encoder(num_layers=2):
  config = get_preset("bert_tiny").replace(
      vocab_size=VOCAB,
      hidden_size=16,
      num_heads=2,
      intermediate_size=32,
      num_layers=num_layers,
      max_position_embeddings=16,
  )
  return build_encoder(config)


BLOCK_PATHS = [
    f"block_0/{name}"
    for name in (
        "attention/key/bias",
        "attention/key/kernel",
        "attention/output/bias",
        "attention/output/kernel",
        "attention/query/bias",
        "attention/query/kernel",
        "attention/value/bias",
        "attention/value/kernel",
        "attention_layer_norm/beta",
        "attention_layer_norm/gamma",
        "ffn/intermediate/bias",
        "ffn/intermediate/kernel",
        "ffn/output/bias",
        "ffn/output/kernel",
        "output_layer_norm/beta",
        "output_layer_norm/gamma",
    )
]
# A 1-block encoder's paths, as checkpoints written before layer_mix existed key them.
ENCODER_PATHS = BLOCK_PATHS + [
    "embeddings/layer_norm/beta",
    "embeddings/layer_norm/gamma",
    "embeddings/position_embeddings",
    "embeddings/segment_embedding/embeddings",
    "embeddings/token_embedding/embeddings",
    "pooler/bias",
    "pooler/kernel",
]


@pytest.mark.parametrize(
    "make_model,head_paths",
    [
        (
            lambda e: Classifier(e, 3, layer_mix="last", feature_based=False),
            ["classification_head/logits/bias", "classification_head/logits/kernel"],
        ),
        (
            lambda e: SpanExtractor(e, layer_mix="last"),
            ["span_head/span/bias", "span_head/span/kernel"],
        ),
    ],
    ids=["classifier", "span"],
)
def test_default_models_keep_their_variable_paths(make_model, head_paths):
  model = make_model(_encoder(num_layers=1))
  assert sorted(weights_file.variables_by_path(model)) == sorted(ENCODER_PATHS + head_paths)


def _plain_classifier(encoder, num_classes):
  """Encoder + head on the pooled output, as the Classifier was before read_encoder."""
  inputs = encoder_inputs()
  head = ClassificationHead(num_classes, 0.1, 0.02, name="classification_head")
  model = keras.Model(inputs, head(encoder(inputs)["pooled_output"]))
  model.encoder, model.head = encoder, head
  return model


def test_default_classifier_loads_an_old_checkpoint(encoder_batch, tmp_path):
  old = _plain_classifier(_encoder(), 3)
  inputs = encoder_batch(VOCAB)
  want = old(inputs, training=False).numpy()
  saving.tf_checkpoint(old).write(str(tmp_path / "ckpt"))
  new = Classifier(_encoder(), 3)
  assert not np.allclose(new(inputs, training=False), want)
  saving.open_model(str(tmp_path / "ckpt")).restore(new)
  np.testing.assert_array_equal(new(inputs, training=False), want)


def _encoder_variables(model):
  return {v.path: v for v in model.encoder.weights}


@pytest.mark.parametrize("layer_mix", ["last", "concat_last_four", "mix_all"])
def test_feature_based_freezes_the_encoder(encoder_batch, layer_mix):
  model = Classifier(_encoder(), 2, dropout_rate=0.0, layer_mix=layer_mix, feature_based=True)
  encoder_ids = {id(v) for v in model.encoder.weights}
  assert encoder_ids and not any(v.trainable for v in model.encoder.weights)
  trainable = {v.path for v in model.trainable_weights}
  assert not {id(v) for v in model.trainable_weights} & encoder_ids
  assert any(p.startswith("feature_bilstm/") for p in trainable)
  # The encoder config's dropout of 0.1 would make these differ if it ran in training mode.
  inputs = encoder_batch(VOCAB)
  np.testing.assert_allclose(
      model(inputs, training=True), model(inputs, training=False), rtol=1e-6, atol=1e-6
  )


@pytest.mark.slow(seconds=7)
def test_feature_based_training_step_moves_the_head_only(encoder_batch):
  model = Classifier(_encoder(), 2, layer_mix="mix_last_four", feature_based=True)
  inputs = encoder_batch(VOCAB)
  labels = np.array([0, 1], "int32")
  model.compile(
      optimizer=keras.optimizers.Adam(1e-2),
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
  )
  before = {path: np.array(v) for path, v in weights_file.variables_by_path(model).items()}
  model.fit(inputs, labels, batch_size=2, epochs=1, verbose=0)
  after = {path: np.array(v) for path, v in weights_file.variables_by_path(model).items()}
  moved = {path for path in before if not np.array_equal(before[path], after[path])}
  encoder_paths = set(_encoder_variables(model))
  assert not moved & encoder_paths
  for prefix in ("feature_bilstm/", "classification_head/", "layer_combination/scalar_mix/"):
    assert any(path.startswith(prefix) for path in moved), (prefix, sorted(moved))


def test_mix_all_one_hot_on_the_last_layer_is_the_default_classifier(encoder_batch):
  default = Classifier(_encoder(num_layers=3), 3)
  mixed = Classifier(_encoder(num_layers=3), 3, layer_mix="mix_all")
  source = weights_file.variables_by_path(default)
  target = weights_file.variables_by_path(mixed)
  assert set(target) - set(source) == {
      "layer_combination/scalar_mix/layer_weights",
      "layer_combination/scalar_mix/scale",
  }
  for path, variable in source.items():
    target[path].assign(variable)
  target["layer_combination/scalar_mix/layer_weights"].assign([-1e4, -1e4, 0.0])
  target["layer_combination/scalar_mix/scale"].assign(1.0)
  inputs = encoder_batch(VOCAB)
  np.testing.assert_allclose(
      mixed(inputs, training=False), default(inputs, training=False), rtol=0, atol=1e-6
  )


@pytest.mark.parametrize(
    "make_model",
    [
        lambda e: Classifier(e, 3, layer_mix="concat_last_four", feature_based=True),
        lambda e: SpanExtractor(e, layer_mix="sum_last_four"),
        lambda e: TokenTagger(e, 4, layer_mix="mix_all"),
        lambda e: MultipleChoice(e, layer_mix="second_to_last"),
    ],
    ids=["classifier", "span", "tagger", "multiple_choice"],
)
def test_save_and_load_keep_the_head_inputs(encoder_batch, tmp_path, make_model):
  model = make_model(_encoder())
  inputs = encoder_batch(VOCAB)
  if isinstance(model, MultipleChoice):
    inputs = {k: np.stack([v, v[::-1]], axis=1) for k, v in inputs.items()}  # [B, 2, T]
  want = keras.tree.map_structure(np.asarray, model(inputs, training=False))
  path = str(tmp_path / "model.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  clone = type(model).from_config(model.get_config())
  for copy in (loaded, clone):
    assert copy.layer_mix == model.layer_mix
    assert getattr(copy, "feature_based", False) == getattr(model, "feature_based", False)
  if getattr(model, "feature_based", False):
    assert not any(v.trainable for v in loaded.encoder.weights)
  got = loaded(inputs, training=False)
  keras.tree.map_structure(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), got, want)


@pytest.mark.slow(seconds=8)
@pytest.mark.parametrize(
    "make_model",
    [
        lambda e: MultipleChoice(e, layer_mix="mix_last_four"),
        lambda e: TokenTagger(e, 5, layer_mix="concat_last_four", feature_based=True),
        lambda e: TokenTagger(e, 5),
    ],
    ids=["multiple_choice", "tagger_feature_based", "tagger"],
)
def test_multiple_choice_and_tagger_run_under_xla(encoder_batch, make_model):
  model = make_model(_encoder())
  inputs = encoder_batch(VOCAB)
  if isinstance(model, MultipleChoice):
    inputs = {k: np.stack([v, v[::-1], v], axis=1) for k, v in inputs.items()}  # C = 3
  compiled = tf.function(lambda x: model(x, training=False), jit_compile=True)
  got = compiled(inputs).numpy()
  want = model(inputs, training=False).numpy()
  expected_shape = (2, 3) if isinstance(model, MultipleChoice) else (2, 8, 5)
  assert got.shape == expected_shape and got.dtype == np.float32
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
