"""Exporting model dirs to Hugging Face and google-research/bert (TF1) checkpoints.

The references are independent of the exporter: transformers' documented
BertForPreTraining names and shapes and google-research/bert's variable names, written
out below as literals; `references.numpy_bert`, a numpy BERT that reads TF1 names; and the
importers, which bring each export back into a model whose outputs must equal the
original's.
"""

import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert import model_dir as layout
from recurrent_bert import saving
from recurrent_bert.config import get_preset
from recurrent_bert.convert.exporters import export_model_dir
from recurrent_bert.convert.importers import import_bert
from recurrent_bert.convert.mapping import CheckpointMappingError
from recurrent_bert.models import Classifier
from recurrent_bert.models import Encoder
from recurrent_bert.models import Pretrainer
from recurrent_bert.weights_file import variables_by_path
from tests.end_to_end.test_commands_bad_input import error_lines
from tests.support import checkpoint_files
from tests.support import forkserver
from tests.support import references as ref

pytestmark = pytest.mark.slow(seconds=45)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
V, P, H, F, L, A = 40, 16, 8, 12, 2, 2
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(V - 5)]
POSITIONS = np.array([[1, 5], [2, 3]], "int32")

# transformers' BertForPreTraining state dict as save_pretrained writes it (the decoder
# weight and bias are tied to the word embeddings and cls.predictions.bias, so left out;
# position_ids is a non-persistent buffer), for L=2 layers: [out, in] Linear weights.
HF_PRETRAINING_TENSORS = {
    "bert.embeddings.word_embeddings.weight": (V, H),
    "bert.embeddings.position_embeddings.weight": (P, H),
    "bert.embeddings.token_type_embeddings.weight": (2, H),
    "bert.embeddings.LayerNorm.weight": (H,),
    "bert.embeddings.LayerNorm.bias": (H,),
    **{
        name: shape
        for i in range(L)
        for name, shape in {
            f"bert.encoder.layer.{i}.attention.self.query.weight": (H, H),
            f"bert.encoder.layer.{i}.attention.self.query.bias": (H,),
            f"bert.encoder.layer.{i}.attention.self.key.weight": (H, H),
            f"bert.encoder.layer.{i}.attention.self.key.bias": (H,),
            f"bert.encoder.layer.{i}.attention.self.value.weight": (H, H),
            f"bert.encoder.layer.{i}.attention.self.value.bias": (H,),
            f"bert.encoder.layer.{i}.attention.output.dense.weight": (H, H),
            f"bert.encoder.layer.{i}.attention.output.dense.bias": (H,),
            f"bert.encoder.layer.{i}.attention.output.LayerNorm.weight": (H,),
            f"bert.encoder.layer.{i}.attention.output.LayerNorm.bias": (H,),
            f"bert.encoder.layer.{i}.intermediate.dense.weight": (F, H),
            f"bert.encoder.layer.{i}.intermediate.dense.bias": (F,),
            f"bert.encoder.layer.{i}.output.dense.weight": (H, F),
            f"bert.encoder.layer.{i}.output.dense.bias": (H,),
            f"bert.encoder.layer.{i}.output.LayerNorm.weight": (H,),
            f"bert.encoder.layer.{i}.output.LayerNorm.bias": (H,),
        }.items()
    },
    "bert.pooler.dense.weight": (H, H),
    "bert.pooler.dense.bias": (H,),
    "cls.predictions.bias": (V,),
    "cls.predictions.transform.dense.weight": (H, H),
    "cls.predictions.transform.dense.bias": (H,),
    "cls.predictions.transform.LayerNorm.weight": (H,),
    "cls.predictions.transform.LayerNorm.bias": (H,),
    "cls.seq_relationship.weight": (2, H),
    "cls.seq_relationship.bias": (2,),
}

# google-research/bert's modeling.py and run_pretraining.py variables for L=2 (in, out
# kernels; attention kept as [H, H]; the NSP weights [2, H]).
TF1_VARIABLES = {
    "bert/embeddings/word_embeddings": (V, H),
    "bert/embeddings/token_type_embeddings": (2, H),
    "bert/embeddings/position_embeddings": (P, H),
    "bert/embeddings/LayerNorm/gamma": (H,),
    "bert/embeddings/LayerNorm/beta": (H,),
    **{
        name: shape
        for i in range(L)
        for name, shape in {
            f"bert/encoder/layer_{i}/attention/self/query/kernel": (H, H),
            f"bert/encoder/layer_{i}/attention/self/query/bias": (H,),
            f"bert/encoder/layer_{i}/attention/self/key/kernel": (H, H),
            f"bert/encoder/layer_{i}/attention/self/key/bias": (H,),
            f"bert/encoder/layer_{i}/attention/self/value/kernel": (H, H),
            f"bert/encoder/layer_{i}/attention/self/value/bias": (H,),
            f"bert/encoder/layer_{i}/attention/output/dense/kernel": (H, H),
            f"bert/encoder/layer_{i}/attention/output/dense/bias": (H,),
            f"bert/encoder/layer_{i}/attention/output/LayerNorm/gamma": (H,),
            f"bert/encoder/layer_{i}/attention/output/LayerNorm/beta": (H,),
            f"bert/encoder/layer_{i}/intermediate/dense/kernel": (H, F),
            f"bert/encoder/layer_{i}/intermediate/dense/bias": (F,),
            f"bert/encoder/layer_{i}/output/dense/kernel": (F, H),
            f"bert/encoder/layer_{i}/output/dense/bias": (H,),
            f"bert/encoder/layer_{i}/output/LayerNorm/gamma": (H,),
            f"bert/encoder/layer_{i}/output/LayerNorm/beta": (H,),
        }.items()
    },
    "bert/pooler/dense/kernel": (H, H),
    "bert/pooler/dense/bias": (H,),
    "cls/predictions/transform/dense/kernel": (H, H),
    "cls/predictions/transform/dense/bias": (H,),
    "cls/predictions/transform/LayerNorm/gamma": (H,),
    "cls/predictions/transform/LayerNorm/beta": (H,),
    "cls/predictions/output_bias": (V,),
    "cls/seq_relationship/output_weights": (2, H),
    "cls/seq_relationship/output_bias": (2,),
}


def _config(family="bert", hidden_act="gelu"):
  return get_preset(f"{family}_tiny").replace(
      vocab_size=V,
      hidden_size=H,
      num_layers=L,
      num_heads=A,
      intermediate_size=F,
      max_position_embeddings=P,
      hidden_act=hidden_act,
      dropout_rate=0.0,
      attention_dropout_rate=0.0,
  )


def _randomized(model, rng):
  """Every weight random (zero biases and unit gammas would hide a mapping mistake)."""
  for variable in model.weights:
    variable.assign(rng.normal(0.0, 0.5, tuple(variable.shape)).astype("float32"))
  return model


def _vocab_file(directory):
  path = directory / "vocab.txt"
  path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
  return str(path)


def _pretraining_dir(directory, model, vocab_file):
  """A pretraining model_dir as a run leaves it mid-way: config, tokenizer, ckpt-1."""
  directory.mkdir()
  saving.write_model_config(str(directory), model.encoder.config)
  saving.write_tokenizer_files(str(directory), vocab_file, True)
  tf.train.CheckpointManager(
      tf.train.Checkpoint(model=variables_by_path(model)), str(directory), max_to_keep=1
  ).save(checkpoint_number=1)
  return str(directory)


def _inputs(rng):
  return checkpoint_files.padded_inputs(rng, V)


def _outputs(model, inputs):
  encoded = model.encoder(inputs, training=False)
  out = {k: np.asarray(v) for k, v in encoded.items()}
  logits = model({**inputs, "masked_lm_positions": POSITIONS}, training=False)
  out.update({k: np.asarray(v) for k, v in logits.items()})
  return out


def _assert_close(got, want, names, atol):
  real = _inputs(np.random.default_rng(0))["input_mask"].astype(bool)
  for name in names:
    g, w = np.asarray(got[name]), np.asarray(want[name])
    if name == "sequence_output":  # padded positions are not defined the same way
      g, w = g[real], w[real]
    np.testing.assert_allclose(g, w, atol=atol, rtol=atol, err_msg=name)


ALL_OUTPUTS = ("sequence_output", "pooled_output", "mlm_logits", "nsp_logits")


@pytest.mark.parametrize(
    "target, hidden_act", [("hf", "gelu"), ("hf", "gelu_approximate"), ("tf1", "gelu_approximate")]
)
def test_export_has_the_formats_names_and_round_trips_to_the_same_outputs(
    target, hidden_act, rng, tmp_path
):
  model = _randomized(Pretrainer(Encoder(_config(hidden_act=hidden_act)), use_nsp=True), rng)
  source = _pretraining_dir(tmp_path / "run", model, _vocab_file(tmp_path))
  out = tmp_path / target
  report = export_model_dir(source, target, str(out))
  assert report["heads"] == ["mlm", "nsp"]
  inputs = _inputs(rng)
  want = _outputs(model, inputs)

  if target == "hf":
    from safetensors import safe_open
    from safetensors.numpy import load_file

    tensors = load_file(str(out / "model.safetensors"))
    assert {k: v.shape for k, v in tensors.items()} == HF_PRETRAINING_TENSORS
    with safe_open(str(out / "model.safetensors"), "np") as f:
      assert f.metadata() == {"format": "pt"}  # transformers refuses a file without it
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["architectures"] == ["BertForPreTraining"]
    assert config["hidden_act"] == {"gelu": "gelu", "gelu_approximate": "gelu_new"}[hidden_act]
    tokenizer = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert tokenizer["do_lower_case"] is True and tokenizer["tokenizer_class"] == "BertTokenizer"
    imported = import_bert("hf", str(out))
  else:
    reader = tf.train.load_checkpoint(str(out / "bert_model.ckpt"))
    values = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    assert {k: tuple(v.shape) for k, v in values.items()} == TF1_VARIABLES
    config = json.loads((out / "bert_config.json").read_text(encoding="utf-8"))
    assert config["hidden_act"] == "gelu" and "layer_norm_eps" not in config
    reference = ref.numpy_bert(
        values,
        inputs["input_ids"],
        inputs["segment_ids"],
        inputs["input_mask"],
        A,
        approximate_gelu=True,
        masked_positions=POSITIONS,
    )
    _assert_close(reference, want, ALL_OUTPUTS, atol=1e-4)
    # The test's own Hugging Face name table gives what the hf export wrote, too.
    hf_out = tmp_path / "hf_too"
    export_model_dir(source, "hf", str(hf_out))
    from safetensors.numpy import load_file

    written = load_file(str(hf_out / "model.safetensors"))
    spelled = checkpoint_files.hf_bert_tensors(values)
    for name, value in written.items():
      np.testing.assert_array_equal(value, spelled[name], err_msg=name)
    imported = import_bert("tf1", str(out / "bert_model.ckpt"))
  assert imported.new == [] and imported.do_lower_case in (True, None)
  assert imported.model.encoder.config.hidden_act == hidden_act
  assert (out / "vocab.txt").read_text(encoding="utf-8").split() == VOCAB
  _assert_close(_outputs(imported.model, inputs), want, ALL_OUTPUTS, atol=1e-5)


def test_a_fine_tuning_dir_exports_its_encoder_under_bert_model_names(rng, tmp_path):
  classifier = Classifier(Encoder(_config()), num_classes=3)
  _randomized(classifier, rng)
  model_dir = tmp_path / "glue"
  best = model_dir / layout.BEST_DIR
  best.mkdir(parents=True)
  saving.write_model_config(str(best), classifier.encoder.config)
  saving.write_tokenizer_files(str(best), _vocab_file(tmp_path), False)
  (model_dir / layout.TASK_INFO_FILE).write_text("{}", encoding="utf-8")
  tf.train.CheckpointManager(
      tf.train.Checkpoint(model=variables_by_path(classifier)), str(best), max_to_keep=1
  ).save(checkpoint_number=1)

  report = export_model_dir(str(model_dir), "hf", str(tmp_path / "hf"))
  assert report["heads"] == [] and report["source_kind"] == "fine-tuning model_dir"
  from safetensors.numpy import load_file

  tensors = load_file(str(tmp_path / "hf" / "model.safetensors"))
  want_names = {name[len("bert.") :] for name in HF_PRETRAINING_TENSORS if name.startswith("bert.")}
  assert set(tensors) == want_names  # BertModel: no prefix, no heads
  config = json.loads((tmp_path / "hf" / "config.json").read_text(encoding="utf-8"))
  assert config["architectures"] == ["BertModel"]
  imported = import_bert("hf", str(tmp_path / "hf"))
  assert imported.do_lower_case is False
  inputs = _inputs(rng)
  got = imported.model.encoder(inputs, training=False)
  want = classifier.encoder(inputs, training=False)
  _assert_close(got, want, ("sequence_output", "pooled_output"), atol=1e-5)


def _start_tool(*flags):
  return forkserver.start(
      [
          sys.executable,
          "-m",
          "recurrent_bert.tools.convert_checkpoint",
          "--direction=export",
          *flags,
      ],
      REPO,
      dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
  )


def test_what_a_target_cannot_hold_is_one_line_and_exit_2(rng, tmp_path):
  vocab_file = _vocab_file(tmp_path)
  bert = _pretraining_dir(tmp_path / "bert", Pretrainer(Encoder(_config())), vocab_file)
  swish = _pretraining_dir(tmp_path / "swish", Pretrainer(Encoder(_config("swishrnn"))), vocab_file)
  (tmp_path / "taken").mkdir()
  (tmp_path / "taken" / "keep.txt").write_text("mine", encoding="utf-8")
  (tmp_path / "empty_run").mkdir()
  cases = {
      "family": (
          ["--target=hf", f"--input={swish}"],
          "holds only the `bert` (BERT-orig) family",
      ),
      "gelu": (["--target=tf1", f"--input={bert}"], "--allow_gelu_approximation"),
      "taken": (
          ["--target=hf", f"--input={bert}", f"--output_dir={tmp_path / 'taken'}"],
          "exists and is not empty",
      ),
      "no weights": (
          ["--target=keras_hub", f"--input={tmp_path / 'empty_run'}"],
          "a directory without checkpoints",
      ),
      "import flag": (["--target=hf", f"--input={bert}", "--source=tf1"], "--source does not"),
  }
  started = {}
  for name, (flags, _) in cases.items():
    if not any(f.startswith("--output_dir") for f in flags):
      flags = flags + [f"--output_dir={tmp_path / ('out_' + name.replace(' ', '_'))}"]
    started[name] = _start_tool(*flags)
  for name, (_, message) in cases.items():
    _, stderr = started[name].communicate(timeout=300)
    assert started[name].returncode == 2, (name, stderr[-2000:])
    lines = error_lines(stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), (name, stderr[-2000:])
    assert message in lines[0], (name, lines[0])
    assert not (tmp_path / ("out_" + name.replace(" ", "_"))).exists(), name
  assert os.listdir(tmp_path / "taken") == ["keep.txt"]

  with pytest.raises(CheckpointMappingError, match="exact GELU"):
    export_model_dir(bert, "tf1", str(tmp_path / "not_written"))
  approximated = export_model_dir(bert, "tf1", str(tmp_path / "tf1"), allow_gelu_approximation=True)
  assert "bert_model.ckpt.index" in approximated["files"]


# Words whose pieces the tokenizer check needs: accents stripped by the uncased
# tokenizer, CJK characters one by one, an emoji that is not in the vocabulary.
TEXT_PIECES = ["cafe", "naive", "resume", "東", "京", "日", "本", "the", "cat", "##s", ",", "!"]
TEXTS = ["Café naïve résumé!", "東京 日本, the cats", "I ❤️ 🍕 the cat"]


def _run_transformers(hf_model, inputs, **options):
  """A transformers model's outputs on our encoder inputs, in eval mode."""
  import torch

  hf_model.eval()
  with torch.no_grad():
    return hf_model(
        input_ids=torch.tensor(inputs["input_ids"], dtype=torch.long),
        token_type_ids=torch.tensor(inputs["segment_ids"], dtype=torch.long),
        attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
        **options,
    )


def test_transformers_loads_the_hf_export_and_computes_the_same_logits_and_ids(rng, tmp_path):
  """transformers' own BertForPreTraining and tokenizer, from the exported folder."""
  pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")

  vocab = VOCAB[:5] + TEXT_PIECES + [f"w{i}" for i in range(V - 5 - len(TEXT_PIECES))]
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("\n".join(vocab) + "\n", encoding="utf-8")
  model = _randomized(Pretrainer(Encoder(_config()), use_nsp=True), rng)
  source = _pretraining_dir(tmp_path / "run", model, str(vocab_file))
  out = tmp_path / "hf"
  export_model_dir(source, "hf", str(out))

  hf_model = transformers.BertForPreTraining.from_pretrained(str(out), local_files_only=True)
  inputs = _inputs(rng)
  hf_out = _run_transformers(hf_model, inputs, output_hidden_states=True)
  want = _outputs(model, inputs)
  got = {
      "sequence_output": hf_out.hidden_states[-1].numpy(),
      "mlm_logits": np.stack(
          [hf_out.prediction_logits.numpy()[b, POSITIONS[b]] for b in range(len(POSITIONS))]
      ),
      "nsp_logits": hf_out.seq_relationship_logits.numpy(),
  }
  _assert_close(got, want, ("sequence_output", "mlm_logits", "nsp_logits"), atol=1e-5)

  from recurrent_bert.data.tokenization import make_tokenizer

  ours = make_tokenizer(str(vocab_file), do_lower_case=True).tokenize_flat(TEXTS).to_list()
  hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(out), local_files_only=True)
  theirs = [hf_tokenizer(text, add_special_tokens=False)["input_ids"] for text in TEXTS]
  assert theirs == ours
  assert any(vocab.index("cafe") in ids for ids in ours)  # the accent was stripped
  assert any(vocab.index("[UNK]") in ids for ids in ours)  # the emoji is unknown


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_approximate"])
def test_an_import_without_heads_exports_without_heads_to_every_target(hidden_act, rng, tmp_path):
  """A bare Hugging Face BertModel imported: the import initialises an MLM head
  (conversion_report.json's "new"); no export ships it, and the metadata says so."""
  transformers = pytest.importorskip("transformers")
  encoder = _randomized(Encoder(_config(hidden_act=hidden_act)), rng)
  bare = tmp_path / "bare"  # a BertModel: the encoder's export has no heads
  saving.export_encoder(encoder, str(tmp_path / "enc"), vocab_file=_vocab_file(tmp_path))
  export_model_dir(str(tmp_path / "enc" / layout.EXPORT_DIR), "hf", str(bare))
  imported = tmp_path / "imported"
  bert = import_bert("hf", str(bare))
  assert {p.split("/")[0] for p in bert.new} == {"mlm_head"}
  report = {"source": str(bare), "source_kind": "hf", "do_lower_case": True, "new": bert.new}
  saving.write_converted_dir(bert.model, str(imported), bert.vocab_file, report)
  stored = saving.open_model(str(imported))
  assert stored.kind == "converted model dir"
  assert stored.heads == {"mlm_head": False}

  for target in ("hf", "tf1", "keras_hub"):
    out = tmp_path / f"out_{target}"
    options = {"allow_gelu_approximation": True} if target == "tf1" else {}
    exported = export_model_dir(str(imported), target, str(out), **options)
    assert exported["heads"] == [] and exported["heads_left_out"] == ["mlm"], target
  hf_config = json.loads((tmp_path / "out_hf" / "config.json").read_text(encoding="utf-8"))
  assert hf_config["architectures"] == ["BertModel"]
  from safetensors.numpy import load_file

  assert not [n for n in load_file(str(tmp_path / "out_hf" / "model.safetensors")) if "cls." in n]
  names = tf.train.load_checkpoint(str(tmp_path / "out_tf1" / "bert_model.ckpt"))
  assert not [n for n in names.get_variable_to_shape_map() if n.startswith("cls/")]
  hub = tmp_path / "out_keras_hub"
  metadata = json.loads((hub / "metadata.json").read_text(encoding="utf-8"))
  assert metadata["recurrent_bert"]["has_mlm"] is False
  # keras-hub's own BERT where it computes the same encoder (the tanh GELU), else ours.
  backbone = json.loads((hub / "config.json").read_text(encoding="utf-8"))["registered_name"]
  ours = "recurrent_bert>RecurrentBertBackbone"
  assert backbone == {"gelu_approximate": "keras_hub>BertBackbone", "gelu": ours}[hidden_act]
  assert not [n for n in os.listdir(hub) if n.startswith(("task", "pretraining_heads"))]
  # transformers reads a bare encoder: a BertModel with the encoder's outputs.
  hf_model = transformers.AutoModel.from_pretrained(str(tmp_path / "out_hf"), local_files_only=True)
  assert type(hf_model).__name__ == "BertModel"
  inputs = _inputs(rng)
  hidden = _run_transformers(hf_model, inputs).last_hidden_state.numpy()
  want = {"sequence_output": np.asarray(encoder(inputs, training=False)["sequence_output"])}
  _assert_close({"sequence_output": hidden}, want, ("sequence_output",), atol=1e-5)
