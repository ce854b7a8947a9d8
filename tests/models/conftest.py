import numpy as np
import pytest


@pytest.fixture
def encoder_batch(rng):
  """Returns make(vocab, batch=2, length=8): the encoder's three int32 inputs, as numpy.

  Row 1 is padding from position 5 on.
  """

  def make(vocab, batch=2, length=8):
    mask = np.ones((batch, length), "int32")
    mask[1, 5:] = 0
    return {
        "input_ids": rng.integers(5, vocab, (batch, length)).astype("int32"),
        "input_mask": mask,
        "segment_ids": np.zeros((batch, length), "int32"),
    }

  return make
