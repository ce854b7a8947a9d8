import keras
import numpy as np
import pytest

from recurrent_bert.models import Classifier
from recurrent_bert.models import Pretrainer
from recurrent_bert.models import SpanExtractor
from recurrent_bert.models import build_encoder


@pytest.mark.slow(seconds=10)
@pytest.mark.parametrize(
    "make_model",
    [
        lambda e: Pretrainer(e, use_nsp=True),
        lambda e: Classifier(e, num_classes=3),
        lambda e: Classifier(e, num_classes=1),
        lambda e: SpanExtractor(e, use_blstm_decoder=True),
    ],
    ids=["pretrainer", "classifier", "regressor", "span_blstm_decoder"],
)
def test_headed_models_round_trip_through_keras_files(encoder_batch, tmp_path, make_model):
  model = make_model(build_encoder("trans_blstm_small_2_tiny"))
  inputs = encoder_batch(model.encoder.config.vocab_size)
  if "masked_lm_positions" in [i.name for i in model.inputs]:
    inputs["masked_lm_positions"] = np.array([[1, 2], [3, 0]], "int32")
  want = keras.tree.map_structure(np.asarray, model(inputs, training=False))
  path = str(tmp_path / "model.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  assert type(loaded) is type(model)
  got = loaded(inputs, training=False)
  keras.tree.map_structure(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), got, want)
  if isinstance(loaded, Pretrainer):  # the tie survives loading
    assert loaded.mlm_head._embeddings is loaded.encoder.embeddings
