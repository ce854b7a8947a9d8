"""google-research/bert TF1 checkpoints onto our Pretrainer, against a numpy BERT."""

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.config import get_preset
from recurrent_bert.convert.mapping import CheckpointMappingError
from recurrent_bert.convert.mapping import assign_pairs
from recurrent_bert.convert.mapping import tf1_bert_pairs
from recurrent_bert.models import Encoder
from recurrent_bert.models import Pretrainer
from tests.support import checkpoint_files
from tests.support import references as ref

V, P, H, F, L, A = 50, 16, 8, 12, 2, 2


def _config():
  return get_preset("bert_tiny").replace(
      vocab_size=V,
      hidden_size=H,
      intermediate_size=F,
      num_layers=L,
      num_heads=A,
      max_position_embeddings=P,
      hidden_act="gelu_approximate",
  )


def test_tf1_checkpoint_gives_numpy_bert_outputs(rng, tmp_path):
  values = checkpoint_files.random_tf1_bert(rng, V, P, H, F, L)
  path = checkpoint_files.write_tf1_checkpoint(values, str(tmp_path / "bert_model.ckpt"))
  model = Pretrainer(Encoder(_config()), use_nsp=True)
  pairs = tf1_bert_pairs(model, tf.train.load_checkpoint(path))
  assert assign_pairs(pairs) == sum(v.size for v in values.values())
  assert {id(v) for v, _ in pairs} == {id(v) for v in model.weights}  # nothing left out

  ids = rng.integers(0, V, size=(2, 7)).astype("int32")
  segments = np.array([[0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0, 0]], "int32")
  mask = np.array([[1] * 7, [1] * 4 + [0] * 3], "int32")
  positions = np.array([[1, 5], [2, 3]], "int32")
  out = model(
      {
          "input_ids": ids,
          "segment_ids": segments,
          "input_mask": mask,
          "masked_lm_positions": positions,
      },
      training=False,
  )
  want = ref.numpy_bert(
      values, ids, segments, mask, A, approximate_gelu=True, masked_positions=positions
  )
  np.testing.assert_allclose(out["mlm_logits"], want["mlm_logits"], atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(out["nsp_logits"], want["nsp_logits"], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "name, shape, message",
    [
        ("bert/encoder/layer_1/intermediate/dense/bias", None, "no variable"),
        ("bert/encoder/layer_0/attention/self/key/kernel", (H, H + 2), r"\(8, 10\)"),
        ("cls/predictions/output_bias", (V + 1,), "mlm_head/output_bias"),
    ],
)
def test_missing_or_misshapen_variable_is_named(rng, tmp_path, name, shape, message):
  values = checkpoint_files.random_tf1_bert(rng, V, P, H, F, L)
  if shape is None:
    del values[name]
  else:
    values[name] = np.zeros(shape, "float32")
  path = checkpoint_files.write_tf1_checkpoint(values, str(tmp_path / "bert_model.ckpt"))
  model = Pretrainer(Encoder(_config()), use_nsp=True)
  before = [v.numpy() for v in model.weights]
  with pytest.raises(CheckpointMappingError, match=message) as error:
    assign_pairs(tf1_bert_pairs(model, tf.train.load_checkpoint(path), source=path))
  assert name in str(error.value)
  for variable, value in zip(model.weights, before):  # nothing assigned
    np.testing.assert_array_equal(variable.numpy(), value)
