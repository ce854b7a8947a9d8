import numpy as np
import pytest

from recurrent_bert.models import SpanExtractor
from recurrent_bert.models import build_encoder


@pytest.mark.slow(seconds=2)
def test_span_logits_mask_padding(encoder_batch):
  model = SpanExtractor(build_encoder("bert_tiny"))
  out = model(encoder_batch(model.encoder.config.vocab_size), training=False)
  assert out["start_logits"].shape == (2, 8)
  assert np.all(out["end_logits"].numpy()[1, 5:] <= -1e8)
  assert np.all(np.abs(out["start_logits"].numpy()[0]) < 1e3)
