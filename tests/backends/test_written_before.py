"""The encoders written before the layers' GPU-speed rework (tests/fixtures/written_before/)
give the outputs they gave under TensorFlow then, read here under JAX or PyTorch: the fused
attention, the portable BLSTM and SwishRNN on weights written by the old code."""

import os

import pytest

from recurrent_bert import saving
from tests.saving.test_written_before import FAMILIES
from tests.saving.test_written_before import FIXTURES
from tests.saving.test_written_before import check_outputs


@pytest.mark.parametrize("family", FAMILIES)
def test_an_encoder_written_before_gives_its_outputs(family):
  encoder = saving.open_model(os.path.join(FIXTURES, family)).load_encoder()
  check_outputs(encoder, family, dict(atol=1e-5, rtol=1e-5))
