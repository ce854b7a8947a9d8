"""BERT-orig against keras-hub's BertBackbone with the same (random) weights."""

import keras_hub
import numpy as np

from recurrent_bert.config import get_preset
from recurrent_bert.convert.mapping import load_from_keras_hub_bert
from recurrent_bert.models import Encoder


def test_same_outputs_as_keras_hub_bert_backbone(rng):
  config = get_preset("bert_tiny").replace(
      vocab_size=500, max_position_embeddings=64, hidden_act="gelu_approximate"
  )
  hub = keras_hub.models.BertBackbone(
      vocabulary_size=500,
      num_layers=config.num_layers,
      num_heads=config.num_heads,
      hidden_dim=config.hidden_size,
      intermediate_dim=config.intermediate_size,
      max_sequence_length=64,
  )
  ours = Encoder(config)
  copied = load_from_keras_hub_bert(ours, hub)
  assert copied == hub.count_params() == ours.count_params()

  ids = rng.integers(0, 500, size=(3, 20)).astype("int32")
  segments = rng.integers(0, 2, size=(3, 20)).astype("int32")
  mask = (np.arange(20)[None] < np.array([[20], [11], [3]])).astype("int32")
  theirs = hub({"token_ids": ids, "segment_ids": segments, "padding_mask": mask})
  mine = ours({"input_ids": ids, "segment_ids": segments, "input_mask": mask})
  real = mask.astype(bool)
  np.testing.assert_allclose(
      mine["sequence_output"].numpy()[real], theirs["sequence_output"].numpy()[real], atol=1e-5
  )
  np.testing.assert_allclose(mine["pooled_output"], theirs["pooled_output"], atol=1e-5)
