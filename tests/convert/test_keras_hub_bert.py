"""A BERT-orig model written as keras-hub's own BertBackbone / BertMaskedLM preset, loaded
back in a fresh process that cannot import our package."""

import json
import os
import sys

import numpy as np
import pytest

from recurrent_bert.config import get_preset
from recurrent_bert.convert.importers import load_keras_hub_preset
from recurrent_bert.convert.keras_hub_bert import write_keras_hub_bert_preset
from recurrent_bert.convert.mapping import CheckpointMappingError
from recurrent_bert.convert.mapping import is_keras_hub_bert
from recurrent_bert.convert.model_dir_source import ModelForExport
from recurrent_bert.data.tokenization import BertWordpieceTokenizer
from recurrent_bert.models import Encoder
from recurrent_bert.models import Pretrainer
from recurrent_bert.models.heads import MaskedLMHead
from recurrent_bert.weights_file import variables_by_path
from tests.support import forkserver

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + (
    "the cat sat on mat a dog ran cafe . , ! ##s ##ed".split() + [f"w{i}" for i in range(30)]
)
# Upper case, an accent, a suffix piece and punctuation: casing, accent stripping and
# WordPiece all take part.
TEXT = "The Café cats sat on the mat, a dog ran!"
TASK_FILES = {"task.json", "task.weights.h5", "preprocessor.json"}
CONFIG = get_preset("bert_tiny").replace(
    vocab_size=len(VOCAB),
    num_layers=1,
    hidden_size=32,
    num_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
    hidden_act="gelu_approximate",
)

# Runs in a fresh interpreter where importing our package fails: what keras-hub alone
# makes of each preset, on the inputs of an .npz file.
LOAD_SCRIPT = r"""
import sys
sys.modules["recurrent_bert"] = None  # importing it now raises ImportError
import numpy as np
import keras_hub

inputs_file, text = sys.argv[1:3]
inputs = dict(np.load(inputs_file))
features = {k: inputs[k] for k in ("token_ids", "segment_ids", "padding_mask")}
for preset, results_file in zip(sys.argv[3::2], sys.argv[4::2]):
  results = {}
  backbone = keras_hub.models.BertBackbone.from_preset(preset)
  for key, value in backbone(features).items():
    results[key] = np.asarray(value)
  results["text_ids"] = np.asarray(keras_hub.models.BertTokenizer.from_preset(preset)(text))
  if "mask_positions" in inputs and "with_mlm" in preset:
    task = keras_hub.models.BertMaskedLM.from_preset(preset)
    logits = task({**features, "mask_positions": inputs["mask_positions"]})
    results["mlm_logits"] = np.asarray(logits)
  np.savez(results_file, **results)
assert not [m for m in sys.modules if m.startswith("recurrent_bert.")]
"""


def _random_pretrainer(rng):
  """A Pretrainer (no NSP head) of CONFIG, every variable random: a wrong pair shows."""
  model = Pretrainer(Encoder(CONFIG), use_nsp=False)
  for variable in model.weights:
    variable.assign(rng.normal(0.0, 0.5, tuple(variable.shape)).astype("float32"))
  return model


def _exported(model, vocab_file, has_mlm, has_nsp=False):
  return ModelForExport(model, has_mlm, has_nsp, vocab_file, True, "pretraining model_dir", "dir")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
  """Both presets (with and without the MLM head) and what a fresh process loads from
  them: (model, inputs, vocab_file, {preset name: (directory, files, results)})."""
  root = tmp_path_factory.mktemp("keras_hub_bert")
  rng = np.random.default_rng(0)
  model = _random_pretrainer(rng)
  vocab_file = str(root / "vocab.txt")
  (root / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
  lengths = np.array([[12], [7], [3]])
  inputs = {
      "token_ids": rng.integers(0, len(VOCAB), size=(3, 12)).astype("int32"),
      "segment_ids": rng.integers(0, 2, size=(3, 12)).astype("int32"),
      "padding_mask": (np.arange(12)[None] < lengths).astype("int32"),
      "mask_positions": np.array([[1, 10], [0, 6], [2, 1]], "int32"),  # real tokens only
  }
  np.savez(root / "inputs.npz", **inputs)
  presets, args = {}, []
  for name, has_mlm in (("with_mlm", True), ("backbone_only", False)):
    directory = root / name
    directory.mkdir()
    files = write_keras_hub_bert_preset(
        _exported(model, vocab_file, has_mlm, has_nsp=has_mlm), str(directory)
    )
    presets[name] = (directory, files, root / f"{name}.npz")
    args += [str(directory), str(root / f"{name}.npz")]
  result = forkserver.run(
      [sys.executable, "-c", LOAD_SCRIPT, str(root / "inputs.npz"), TEXT, *args],
      None,
      dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow"),
      timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  loaded = {}
  for name, (directory, files, results_file) in presets.items():
    with np.load(results_file) as results:
      loaded[name] = (directory, files, dict(results))
  return model, inputs, vocab_file, loaded


def _check_backbone_outputs(model, inputs, results):
  """keras-hub's BertBackbone outputs = our encoder's (real positions)."""
  ours = model.encoder(
      {
          "input_ids": inputs["token_ids"],
          "segment_ids": inputs["segment_ids"],
          "input_mask": inputs["padding_mask"],
      },
      training=False,
  )
  real = inputs["padding_mask"].astype(bool)
  np.testing.assert_allclose(
      results["sequence_output"][real], ours["sequence_output"].numpy()[real], atol=1e-5
  )
  np.testing.assert_allclose(results["pooled_output"], ours["pooled_output"], atol=1e-5)
  return ours["sequence_output"]


def test_masked_lm_preset_loads_in_keras_hub_alone(written):
  model, inputs, vocab_file, loaded = written
  directory, files, results = loaded["with_mlm"]
  assert TASK_FILES <= set(files)
  assert files == sorted(files) and "assets/tokenizer/vocabulary.txt" in files
  sequence_output = _check_backbone_outputs(model, inputs, results)

  # keras-hub's MLM head hard-codes the exact GELU and LayerNorm epsilon 1e-5: our head
  # code with those settings, on the Pretrainer's own head weights, is the exact reference.
  reference_head = MaskedLMHead(model.encoder.embeddings, "gelu", 1e-5, name="reference_head")
  reference_head(sequence_output, inputs["mask_positions"])
  ours = variables_by_path(model)
  for path, variable in variables_by_path(reference_head).items():
    variable.assign(ours["mlm_head/" + path.split("/", 1)[1]])
  want = reference_head(sequence_output, inputs["mask_positions"]).numpy()
  np.testing.assert_allclose(results["mlm_logits"], want, atol=1e-5)
  # Our Pretrainer's own logits (tanh GELU, epsilon 1e-12) are near, not equal.
  pretrainer_logits = model(
      {
          "input_ids": inputs["token_ids"],
          "segment_ids": inputs["segment_ids"],
          "input_mask": inputs["padding_mask"],
          "masked_lm_positions": inputs["mask_positions"],
      },
      training=False,
  )["mlm_logits"]
  np.testing.assert_allclose(results["mlm_logits"], pretrainer_logits, atol=5e-3)

  # The preset's tokenizer gives our WordPiece ids.
  ids = BertWordpieceTokenizer(vocab_file, do_lower_case=True).tokenize_flat([TEXT])
  assert results["text_ids"].tolist() == ids.to_list()[0]

  with open(directory / "metadata.json", encoding="utf-8") as f:
    entry = json.load(f)["recurrent_bert"]
  assert entry == {
      "vocabulary_kind": "wordpiece",
      "do_lower_case": True,
      "has_mlm": True,
      "has_nsp": False,
      "source_has_nsp": True,
      "source": "pretraining model_dir",
  }


def test_backbone_only_preset_without_mlm_head(written):
  model, inputs, _, loaded = written
  _, files, results = loaded["backbone_only"]
  assert not TASK_FILES & set(files)
  assert "mlm_logits" not in results
  _check_backbone_outputs(model, inputs, results)


def test_importer_reads_the_preset_back_with_its_mlm_head(written):
  model, _, vocab_file, loaded = written
  imported = load_keras_hub_preset(str(loaded["with_mlm"][0]))
  ours = variables_by_path(model)
  back = variables_by_path(imported.model)
  for path, variable in ours.items():
    np.testing.assert_array_equal(back[path].numpy(), variable.numpy(), err_msg=path)
  assert sorted(imported.new) == ["nsp_head/logits/bias", "nsp_head/logits/kernel"]
  assert imported.do_lower_case is True
  with open(imported.vocab_file, encoding="utf-8") as f, open(vocab_file, encoding="utf-8") as g:
    assert f.read().split() == g.read().split()
  without_head = load_keras_hub_preset(str(loaded["backbone_only"][0]))
  assert any(path.startswith("mlm_head/") for path in without_head.new)


def test_is_keras_hub_bert():
  assert is_keras_hub_bert(CONFIG)
  assert not is_keras_hub_bert(CONFIG.replace(hidden_act="gelu"))  # exact GELU
  assert not is_keras_hub_bert(CONFIG.replace(layer_norm_epsilon=1e-6))
  for preset in ("bert_rab_tiny", "swishrnn_tiny", "trans_blstm_1_tiny"):
    assert not is_keras_hub_bert(get_preset(preset).replace(hidden_act="gelu_approximate"))


def test_refusals_write_nothing(tmp_path):
  model = Pretrainer(Encoder(CONFIG.replace(hidden_act="gelu")), use_nsp=False)
  with pytest.raises(CheckpointMappingError, match="tanh GELU.*family-generic"):
    write_keras_hub_bert_preset(_exported(model, None, has_mlm=True), str(tmp_path))
  spm = tmp_path / "spm.model"
  spm.write_bytes(b"\n\x05piece")
  model = Pretrainer(Encoder(CONFIG), use_nsp=False)
  with pytest.raises(CheckpointMappingError, match="SentencePiece.*family-generic"):
    write_keras_hub_bert_preset(_exported(model, str(spm), has_mlm=True), str(tmp_path / "out"))
  assert sorted(os.listdir(tmp_path)) == ["spm.model"]
