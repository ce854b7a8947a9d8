"""keras-hub presets of model dirs (convert/keras_hub_preset.py): keras-hub rebuilds the
encoder and tokenizer in a fresh process, and `import_bert("keras_hub", ...)` reads the
preset back, heads included, for BERT, SwishRNN and TRANS-BLSTM-SMALL-2."""

import json
import os
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert import saving
from recurrent_bert.config import get_preset
from recurrent_bert.convert.importers import import_bert
from recurrent_bert.convert.keras_hub_preset import HEADS_FILE
from recurrent_bert.convert.keras_hub_preset import WEIGHTS_FILE
from recurrent_bert.convert.keras_hub_preset import write_keras_hub_preset
from recurrent_bert.convert.mapping import CheckpointMappingError
from recurrent_bert.convert.model_dir_source import read_model_dir
from recurrent_bert.data.tokenization import make_tokenizer
from recurrent_bert.models import Encoder
from recurrent_bert.models import Pretrainer
from tests.data.sentencepiece_models import build_model
from tests.support import forkserver

pytestmark = pytest.mark.slow(seconds=30)

TEXTS = [
    "Café naïve résumé",
    "東京は日本の首都です",
    "I ❤️ 🍕 pizza",
    "The cat sat on the mat.",
    "CAFÉ Naïve, the RÉSUMÉ!",
    "The\u00a0c\u200bat sat.",  # BERT: U+00A0 is a space, U+200B vanishes (keras-hub differs)
]
# Uncased WordPiece: stripped forms (cafe, naive), CJK ideographs of TEXTS[1] (not は,
# which is kana: its word is [UNK]), ❤ without its variation selector, ## pieces.
WORDS = ["cafe", "naive", "res", "##ume", "i", "pizza", "the", "cat", "sat", "on", "mat"]
WORDS += [".", ",", "!", "❤", "東", "京", "日", "本", "首", "都", "Café", "café", "CAFÉ"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
# (family, vocabulary, do_lower_case): a cased WordPiece run checks casing goes through too.
CASES = [
    ("bert", "wordpiece", True),
    ("swishrnn", "spm", None),
    ("trans_blstm_small_2", "cased", False),
]

FRESH_PROCESS = """
import json, sys
import numpy as np
import keras_hub
import recurrent_bert.convert.keras_hub_preset  # registers the classes
request = json.load(open(sys.argv[1]))
outputs, answer = {}, {}

def ids(tokenizer, text):
  got = tokenizer.tokenize([text])  # keras-hub gives lists, or a tf.RaggedTensor in graphs
  return [int(i) for i in (got.to_list() if hasattr(got, "to_list") else got)[0]]

for i, preset in enumerate(request["presets"]):
  backbone = keras_hub.models.Backbone.from_preset(preset)
  got = backbone({k: np.array(v, "int32") for k, v in request["inputs"].items()})
  outputs[f"{i}_sequence"] = np.asarray(got["sequence_output"])
  outputs[f"{i}_pooled"] = np.asarray(got["pooled_output"])
  tokenizer = keras_hub.tokenizers.Tokenizer.from_preset(preset)
  answer[preset] = {
      "backbone": type(backbone).__name__,
      "tokenizer": type(tokenizer).__name__,
      "ids": [ids(tokenizer, text) for text in request["texts"]],
  }
np.savez(request["npz"], **outputs)
print(json.dumps(answer))
"""


def _tiny_config(family, vocab_size):
  return get_preset(f"{family}_tiny").replace(
      vocab_size=vocab_size,
      hidden_size=8,
      num_heads=2,
      intermediate_size=12,
      max_position_embeddings=16,
      **({"blstm_units": 4} if "blstm" in family else {}),
  )


def _write_pretraining_dir(model_dir, model, vocab_file, do_lower_case):
  """A pretraining model_dir: model_config.json, tokenizer files, a training checkpoint."""
  os.makedirs(model_dir)
  saving.write_model_config(model_dir, model.encoder.config)
  saving.write_tokenizer_files(model_dir, vocab_file, do_lower_case)
  checkpoint = saving.tf_checkpoint(model)
  tf.train.CheckpointManager(checkpoint, model_dir, max_to_keep=1).save(checkpoint_number=1)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  """{family: (original Pretrainer, its vocab file, preset dir, files written)}."""
  root = tmp_path_factory.mktemp("keras_hub_preset")
  rng = np.random.default_rng(0)
  vocab_files = {}
  for name, tokens in (("wordpiece", VOCAB), ("cased", VOCAB)):
    vocab_files[name] = str(root / f"{name}.txt")
    with open(vocab_files[name], "w", encoding="utf-8") as f:
      f.write("\n".join(tokens) + "\n")
  corpus = root / "corpus.txt"
  corpus.write_text("The cat sat on the mat. I love pizza 🍕 ❤️.\n" * 30, encoding="utf-8")
  vocab_files["spm"] = build_model(str(corpus), "unigram", str(root / "spm"), vocab_size=90)
  found = {}
  for family, vocab, do_lower_case in CASES:
    vocab_size = make_tokenizer(vocab_files[vocab]).vocab_size
    model = Pretrainer(Encoder(_tiny_config(family, vocab_size)), use_nsp=True)
    for v in model.weights:  # no zero biases or unit gammas: every weight tells
      v.assign(rng.normal(0.0, 0.5, v.shape).astype("float32"))
    model_dir = str(root / f"{family}_model")
    _write_pretraining_dir(model_dir, model, vocab_files[vocab], do_lower_case)
    preset = root / f"{family}_preset"
    preset.mkdir()
    written = write_keras_hub_preset(read_model_dir(model_dir), str(preset))
    found[family] = (model, vocab_files[vocab], str(preset), written)
  return found


def _batch(vocab_size):
  rng = np.random.default_rng(1)
  return {
      "input_ids": rng.integers(0, vocab_size, (3, 9)).astype("int32"),
      "segment_ids": (np.arange(9)[None] >= np.array([[5], [3], [9]])).astype("int32"),
      "input_mask": (np.arange(9)[None] < np.array([[9], [6], [2]])).astype("int32"),
  }


def test_fresh_keras_hub_process_rebuilds_encoders_and_tokenizers(exported, tmp_path):
  presets = [exported[family][2] for family, _, _ in CASES]
  vocab_size = min(m.encoder.config.vocab_size for m, _, _, _ in exported.values())
  inputs = _batch(vocab_size)
  request = tmp_path / "request.json"
  request.write_text(
      json.dumps(
          {
              "presets": presets,
              "inputs": {
                  "token_ids": inputs["input_ids"].tolist(),
                  "segment_ids": inputs["segment_ids"].tolist(),
                  "padding_mask": inputs["input_mask"].tolist(),
              },
              "texts": TEXTS,
              "npz": str(tmp_path / "out.npz"),
          }
      ),
      encoding="utf-8",
  )
  result = forkserver.run(
      [sys.executable, "-c", FRESH_PROCESS, str(request)],
      None,
      dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
      timeout=240,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  answer = json.loads(result.stdout.strip().splitlines()[-1])
  outputs = np.load(tmp_path / "out.npz")
  real = inputs["input_mask"].astype(bool)
  for i, (family, vocab, do_lower_case) in enumerate(CASES):
    model, vocab_file, preset, _ = exported[family]
    want = model.encoder(inputs, training=False)
    np.testing.assert_allclose(
        outputs[f"{i}_sequence"][real], want["sequence_output"].numpy()[real], atol=1e-5
    )
    np.testing.assert_allclose(outputs[f"{i}_pooled"], want["pooled_output"], atol=1e-5)
    got = answer[preset]
    assert got["backbone"] == "RecurrentBertBackbone"
    kind = "SentencePiece" if vocab == "spm" else "WordPiece"
    assert got["tokenizer"] == f"RecurrentBert{kind}Tokenizer"
    ours = make_tokenizer(vocab_file, do_lower_case=bool(do_lower_case))
    for text, ids in zip(TEXTS, got["ids"]):
      assert ids == ours.tokenize_flat([text]).to_list()[0], (family, text)
  # Not all [UNK]: accents, CJK and emoji found their pieces.
  uncased = make_tokenizer(exported["bert"][1], do_lower_case=True)
  pieces = uncased.convert_ids_to_tokens(answer[exported["bert"][2]]["ids"][0])
  assert pieces == ["cafe", "naive", "res", "##ume"]
  assert "❤" in uncased.convert_ids_to_tokens(answer[exported["bert"][2]]["ids"][2])


@pytest.mark.parametrize("family", [family for family, _, _ in CASES])
def test_import_bert_reads_preset_back_with_heads(exported, family):
  model, vocab_file, preset, written = exported[family]
  assert HEADS_FILE in written and WEIGHTS_FILE in written
  imported = import_bert("keras_hub", preset)
  assert imported.new == []
  assert sorted(imported.copied) == sorted(v.path for v in model.weights)
  assert imported.model.encoder.config == model.encoder.config
  expected_casing = {"bert": True, "swishrnn": True, "trans_blstm_small_2": False}[family]
  assert imported.do_lower_case is expected_casing
  with open(imported.vocab_file, "rb") as f, open(vocab_file, "rb") as g:
    assert f.read().split() == g.read().split()
  inputs = _batch(model.encoder.config.vocab_size)
  inputs["masked_lm_positions"] = np.array([[1, 4], [0, 5], [1, 1]], "int32")
  want, got = model(inputs, training=False), imported.model(inputs, training=False)
  for key in ("mlm_logits", "nsp_logits"):
    np.testing.assert_allclose(got[key], want[key], atol=1e-5)
  real = inputs["input_mask"].astype(bool)
  want, got = model.encoder(inputs, training=False), imported.model.encoder(inputs, training=False)
  np.testing.assert_allclose(
      got["sequence_output"].numpy()[real], want["sequence_output"].numpy()[real], atol=1e-5
  )
  np.testing.assert_allclose(got["pooled_output"], want["pooled_output"], atol=1e-5)


def test_preset_without_heads_file_gives_new_heads(exported, tmp_path):
  preset = str(tmp_path / "preset")
  shutil.copytree(exported["bert"][2], preset)
  os.remove(os.path.join(preset, HEADS_FILE))
  imported = import_bert("keras_hub", preset)
  assert imported.new and all(p.startswith(("mlm_head/", "nsp_head/")) for p in imported.new)
  assert len(imported.copied) == len(imported.model.encoder.weights)


def test_preset_missing_weights_is_named(exported, tmp_path):
  preset = str(tmp_path / "preset")
  shutil.copytree(exported["swishrnn"][2], preset)
  os.remove(os.path.join(preset, WEIGHTS_FILE))
  with pytest.raises(CheckpointMappingError, match=f"{preset}/{WEIGHTS_FILE}: no such file"):
    import_bert("keras_hub", preset)
  config = json.loads(open(os.path.join(preset, "config.json"), encoding="utf-8").read())
  config["registered_name"] = "keras_hub>GPT2Backbone"
  with open(os.path.join(preset, "config.json"), "w", encoding="utf-8") as f:
    json.dump(config, f)
  with pytest.raises(CheckpointMappingError, match="config.json.*'keras_hub>GPT2Backbone'"):
    import_bert("keras_hub", preset)
