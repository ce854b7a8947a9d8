"""Importers of Hugging Face safetensors and keras-hub presets (TF1: test_tf1_checkpoint)."""

import keras_hub
import numpy as np
import pytest

from recurrent_bert.convert.importers import load_hf_bert
from recurrent_bert.convert.importers import load_keras_hub_preset
from recurrent_bert.convert.mapping import CheckpointMappingError
from tests.support import checkpoint_files
from tests.support import references as ref

V, P, H, F, L, A = 50, 16, 8, 12, 2, 2
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(V - 5)]


def _inputs(rng):
  return checkpoint_files.padded_inputs(rng, V)


def _assert_matches_numpy_bert(model, values, inputs, approximate_gelu, heads=True):
  positions = np.array([[1, 5], [2, 3]], "int32")
  want = ref.numpy_bert(
      values,
      inputs["input_ids"],
      inputs["segment_ids"],
      inputs["input_mask"],
      A,
      approximate_gelu,
      masked_positions=positions,
  )
  encoded = model.encoder(inputs, training=False)
  real = inputs["input_mask"].astype(bool)
  np.testing.assert_allclose(
      encoded["sequence_output"].numpy()[real], want["sequence_output"][real], atol=1e-4, rtol=1e-4
  )
  np.testing.assert_allclose(encoded["pooled_output"], want["pooled_output"], atol=1e-4, rtol=1e-4)
  if heads:
    out = model({**inputs, "masked_lm_positions": positions}, training=False)
    np.testing.assert_allclose(out["mlm_logits"], want["mlm_logits"], atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(out["nsp_logits"], want["nsp_logits"], atol=1e-4, rtol=1e-4)


def test_hf_bert_for_pretraining_gives_numpy_bert_outputs(rng, tmp_path):
  values = checkpoint_files.random_tf1_bert(rng, V, P, H, F, L)
  config = checkpoint_files.bert_config_json(V, P, H, F, L, A, hidden_act="gelu")
  checkpoint_files.write_hf_checkpoint(
      str(tmp_path), checkpoint_files.hf_bert_tensors(values), config, VOCAB, do_lower_case=False
  )
  imported = load_hf_bert(str(tmp_path))
  assert imported.model.encoder.config.hidden_act == "gelu"  # HF "gelu" is the erf form
  assert imported.new == [] and imported.do_lower_case is False
  assert imported.vocab_file == str(tmp_path / "vocab.txt")
  _assert_matches_numpy_bert(imported.model, values, _inputs(rng), approximate_gelu=False)


def test_hf_bert_model_without_prefix_or_heads(rng, tmp_path):
  values = checkpoint_files.random_tf1_bert(rng, V, P, H, F, L, with_heads=False)
  config = checkpoint_files.bert_config_json(V, P, H, F, L, A, hidden_act="gelu_new")
  weights = checkpoint_files.write_hf_checkpoint(
      str(tmp_path), checkpoint_files.hf_bert_tensors(values, prefix=""), config
  )
  imported = load_hf_bert(weights)
  assert imported.model.encoder.config.hidden_act == "gelu_approximate"
  assert imported.vocab_file is None and imported.do_lower_case is None
  assert imported.new and all(p.startswith("mlm_head/") for p in imported.new)
  assert len(imported.copied) == len(imported.model.encoder.weights)
  _assert_matches_numpy_bert(
      imported.model, values, _inputs(rng), approximate_gelu=True, heads=False
  )


def test_hf_wrong_shape_or_missing_tensor_is_named(rng, tmp_path):
  values = checkpoint_files.random_tf1_bert(rng, V, P, H, F, L)
  config = checkpoint_files.bert_config_json(V, P, H, F, L, A)
  tensors = checkpoint_files.hf_bert_tensors(values)
  tensors["bert.encoder.layer.1.output.dense.weight"] = np.zeros((H, F + 1), "float32")
  checkpoint_files.write_hf_checkpoint(str(tmp_path / "shape"), tensors, config)
  with pytest.raises(CheckpointMappingError, match="ffn/output/kernel") as error:
    load_hf_bert(str(tmp_path / "shape"))
  assert "bert/encoder/layer_1/output/dense/kernel" in str(error.value)

  tensors = checkpoint_files.hf_bert_tensors(values)
  del tensors["bert.encoder.layer.0.attention.output.LayerNorm.bias"]
  checkpoint_files.write_hf_checkpoint(str(tmp_path / "missing"), tensors, config)
  with pytest.raises(
      CheckpointMappingError,
      match="no variable 'bert/encoder/layer_0/attention/output/LayerNorm/beta'",
  ):
    load_hf_bert(str(tmp_path / "missing"))
  with pytest.raises(CheckpointMappingError, match="bert_config_file=.*nope.json"):
    load_hf_bert(str(tmp_path / "missing"), bert_config_file=str(tmp_path / "nope.json"))


def test_keras_hub_preset_gives_keras_hub_outputs(rng, tmp_path):
  hub = keras_hub.models.BertBackbone(
      vocabulary_size=V,
      num_layers=L,
      num_heads=A,
      hidden_dim=H,
      intermediate_dim=F,
      max_sequence_length=P,
  )
  hub.save_to_preset(str(tmp_path))
  keras_hub.models.BertTokenizer(vocabulary=VOCAB, lowercase=True).save_to_preset(str(tmp_path))
  imported = load_keras_hub_preset(str(tmp_path))
  assert imported.do_lower_case is True
  with open(imported.vocab_file, encoding="utf-8") as f:
    assert f.read().split() == VOCAB
  inputs = _inputs(rng)
  theirs = hub(
      {
          "token_ids": inputs["input_ids"],
          "segment_ids": inputs["segment_ids"],
          "padding_mask": inputs["input_mask"],
      }
  )
  mine = imported.model.encoder(inputs, training=False)
  real = inputs["input_mask"].astype(bool)
  np.testing.assert_allclose(
      mine["sequence_output"].numpy()[real], theirs["sequence_output"].numpy()[real], atol=1e-5
  )
  np.testing.assert_allclose(mine["pooled_output"], theirs["pooled_output"], atol=1e-5)
  assert all(p.startswith(("mlm_head/", "nsp_head/")) for p in imported.new)
