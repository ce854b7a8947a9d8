"""Warm start of every variant from a BERT-orig model of the same sizes."""

import numpy as np
import pytest

from recurrent_bert.config import get_preset
from recurrent_bert.convert.mapping import CheckpointMappingError
from recurrent_bert.convert.warm_start import warm_start
from recurrent_bert.models import Encoder
from recurrent_bert.models import Pretrainer

V, P, H, F, L, A = 50, 16, 8, 12, 2, 2


@pytest.mark.parametrize(
    "family, new_part, unused_part",
    [
        ("trans_blstm_2", "/blstm/", None),  # keeps its FFN, adds a BLSTM
        ("trans_blstm_1", "/blstm/", "/ffn/"),  # BLSTM replaces the FFN
        ("swishrnn", "swish_rnn", "/ffn/"),  # + relative attention bias
    ],
)
def test_warm_start_copies_shared_weights_only(family, new_part, unused_part):
  sizes = dict(
      vocab_size=V,
      max_position_embeddings=P,
      hidden_size=H,
      num_heads=A,
      num_layers=L,
      intermediate_size=F,
  )
  source = Pretrainer(Encoder(get_preset("bert_tiny").replace(**sizes)))
  target_config = get_preset(f"{family}_tiny").replace(**sizes, swish_rnn_size=16, blstm_units=None)
  target = Pretrainer(Encoder(target_config))
  initial = {v.path: v.numpy() for v in target.weights}
  report = warm_start(target, source)

  source_values = {v.path: v.numpy() for v in source.weights}
  target_values = {v.path: v.numpy() for v in target.weights}
  assert sorted(report.copied + report.new) == sorted(target_values)
  assert "block_1/attention/query/kernel" in report.copied
  assert "mlm_head/transform/kernel" in report.copied
  assert any(new_part in p for p in report.new)
  assert all(new_part in p or "relative_attention_bias" in p for p in report.new)
  for path in report.copied:
    np.testing.assert_array_equal(target_values[path], source_values[path])
  for path in report.new:
    np.testing.assert_array_equal(target_values[path], initial[path])
  if unused_part:
    assert report.unused and all(unused_part in p for p in report.unused)
  else:
    assert report.unused == []


def test_warm_start_shape_mismatch_names_the_weights():
  source = Encoder(get_preset("bert_tiny").replace(vocab_size=V, max_position_embeddings=P))
  target = Encoder(get_preset("swishrnn_tiny").replace(vocab_size=V + 1, max_position_embeddings=P))
  with pytest.raises(
      CheckpointMappingError,
      match=r"embeddings/token_embedding/embeddings: target \(51, 128\), source \(50, 128\)",
  ):
    warm_start(target, source)
