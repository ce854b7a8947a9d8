"""Encoders written before the layers' GPU-speed rework (fused attention, Philox dropout,
the portable BLSTM's float32 state and hand-written backward, SwishRNN's Pallas kernels)
load and give the outputs they gave then: tests/fixtures/written_before/ (its make.py, run
at the commit in written_at.txt). Under TensorFlow both the weights file and the TensorFlow
checkpoint are read; tests/backends/test_written_before.py reads them under JAX and
PyTorch."""

import os

import keras
import numpy as np
import pytest

from recurrent_bert import saving
from recurrent_bert import weights_file
from recurrent_bert.models import build_encoder
from recurrent_bert.saving.stores import CheckpointStore

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "written_before")
FAMILIES = ("bert_rab", "swishrnn", "trans_blstm_2", "trans_blstm_small_2")
MASK = np.array([[1] * 8, [1] * 5 + [0] * 3], "int32")


def fixture_inputs():
  """make.py's INPUTS (restated: the fixture must not depend on today's make.py)."""
  ids = np.random.default_rng(3).integers(5, 40, (2, 8)).astype("int32") * MASK
  segments = np.array([[0] * 4 + [1] * 4, [0] * 8], "int32")
  return {"input_ids": ids, "input_mask": MASK, "segment_ids": segments}


def check_outputs(encoder, family, tolerance):
  expected = np.load(os.path.join(FIXTURES, family, "expected.npz"))
  out = encoder(fixture_inputs(), training=False)
  real = MASK.astype(bool)
  got = keras.ops.convert_to_numpy(out["sequence_output"])
  np.testing.assert_allclose(got[real], expected["sequence_output"][real], **tolerance)
  got = keras.ops.convert_to_numpy(out["pooled_output"])
  np.testing.assert_allclose(got, expected["pooled_output"], **tolerance)


@pytest.mark.parametrize("family", FAMILIES)
def test_an_encoder_written_before_gives_its_outputs(family):
  stored = saving.open_model(os.path.join(FIXTURES, family))
  encoder = stored.load_encoder()
  assert stored.restore_encoder(encoder).endswith("encoder.weights.h5")
  check_outputs(encoder, family, dict(atol=1e-6, rtol=1e-6))


@pytest.mark.parametrize("family", FAMILIES)
def test_its_tensorflow_checkpoint_gives_them_too(family):
  """The checkpoint beside the weights file, read by variable path."""
  stored = saving.open_model(os.path.join(FIXTURES, family))
  encoder = build_encoder(stored.config)
  encoder(fixture_inputs())
  prefix = os.path.join(FIXTURES, family, "encoder", "encoder")
  assert weights_file.assign(encoder, CheckpointStore(prefix), encoder_only=True) > 0
  check_outputs(encoder, family, dict(atol=1e-6, rtol=1e-6))
