"""Exporters: a model dir out to the formats the importers read in.

  keras_hub  a keras-hub preset directory: keras-hub's own BertBackbone (+ BertMaskedLM
             with a trained MLM head) for a BERT it can express
             (`convert.keras_hub_bert`), else our RecurrentBertBackbone, every family
             (`convert.keras_hub_preset`)
  hf         Hugging Face: model.safetensors under `transformers`' BertForPreTraining
             names (BertForMaskedLM without an NSP head, BertModel without heads),
             config.json, vocab.txt, tokenizer_config.json, special_tokens_map.json
  tf1        google-research/bert's release layout: bert_model.ckpt.{index,data-*}
             under its TF1 variable names, bert_config.json, vocab.txt

The names and layouts come from the import tables read the other way
(`mapping.tf1_bert_layout`, `hf_names.tf1_to_hf_names`; `importers.BERT_JSON_FIELDS`), so
one table serves both directions. What a target cannot hold is refused before anything is
written, in one line (an InputError: commands exit 2): another family for hf and tf1, a
SentencePiece vocabulary for their WordPiece tokenizers, the exact GELU for tf1 (its code
has only the tanh form) unless allowed. The output folder is written whole or not at all
(`io_utils.atomic_directory`).
"""

import json
import os
import shutil
from typing import Callable, Dict, List

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert.convert.hf_names import tf1_to_hf_names
from recurrent_bert.convert.importers import BERT_JSON_FIELDS
from recurrent_bert.convert.mapping import CheckpointMappingError
from recurrent_bert.convert.mapping import is_keras_hub_bert
from recurrent_bert.convert.mapping import require_bert_orig
from recurrent_bert.convert.mapping import tf1_bert_values
from recurrent_bert.convert.model_dir_source import ModelForExport
from recurrent_bert.convert.model_dir_source import read_model_dir
from recurrent_bert.data import vocab as vocab_lib

TARGETS = ("keras_hub", "hf", "tf1")
# hidden_act as each target's config spells it; an activation a target lacks is refused.
_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_new", "relu": "relu"}
# google-research/bert's get_activation: its "gelu" is the tanh approximation.
_TF1_ACTIVATIONS = {"gelu_approximate": "gelu", "relu": "relu"}
# google-research/bert's LayerNorm epsilon (not in its bert_config.json).
_TF1_LAYER_NORM_EPSILON = 1e-12
TF1_CHECKPOINT = "bert_model.ckpt"
HF_WEIGHTS_FILE = "model.safetensors"
_SPECIAL_TOKENS = {
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
}


def _bert_json(exported: ModelForExport, activations: Dict[str, str], target: str) -> dict:
  """The bert_config.json / config.json fields of a BERT-orig model, by the import table."""
  config = exported.config
  require_bert_orig(config, target)
  if config.hidden_act not in activations:
    raise CheckpointMappingError(
        f"{exported.path}: hidden_act={config.hidden_act} has no {target} form (it has "
        f"{', '.join(sorted(activations))})"
    )
  values = config.to_dict()
  fields = {key: values[field] for key, field, _ in BERT_JSON_FIELDS}
  fields["hidden_act"] = activations[config.hidden_act]
  return fields


def _wordpiece_vocab(exported: ModelForExport, target: str) -> str:
  """The model's vocab.txt; a target whose tokenizer is WordPiece refuses anything else."""
  if exported.vocab_file is None:
    raise CheckpointMappingError(
        f"{exported.path}: records no vocabulary; {target} needs its vocab.txt"
    )
  if vocab_lib.vocab_kind(exported.vocab_file) != layout.WORDPIECE:
    raise CheckpointMappingError(
        f"{exported.path}: its vocabulary is a SentencePiece model and {target}'s "
        "tokenizer is WordPiece; export it as a keras-hub preset (--target=keras_hub)"
    )
  return exported.vocab_file


def _pretraining_model(exported: ModelForExport):
  """The Pretrainer when the dir holds trained heads, else the bare encoder."""
  if not exported.has_mlm:
    return exported.encoder
  return exported.model


def write_hf(exported: ModelForExport, directory: str, allow_gelu_approximation: bool) -> List[str]:
  """Hugging Face BERT files in `directory` (see the module docstring)."""
  del allow_gelu_approximation  # Hugging Face has the exact GELU
  from safetensors.numpy import save_file

  target = "Hugging Face BERT"
  fields = _bert_json(exported, _HF_ACTIVATIONS, target)
  vocab_file = _wordpiece_vocab(exported, target)
  architecture = (
      "BertForPreTraining"
      if exported.has_nsp and exported.has_mlm
      else ("BertForMaskedLM" if exported.has_mlm else "BertModel")
  )
  # Without an NSP head the Pretrainer has none to map: BertForMaskedLM's names.
  tensors = tf1_to_hf_names(tf1_bert_values(_pretraining_model(exported)))
  # transformers refuses a safetensors file whose metadata does not name its framework.
  save_file(tensors, os.path.join(directory, HF_WEIGHTS_FILE), metadata={"format": "pt"})
  config = {
      "architectures": [architecture],
      "model_type": "bert",
      **fields,
      "position_embedding_type": "absolute",
      "pad_token_id": 0,
  }
  tokenizer_config = {
      "tokenizer_class": "BertTokenizer",
      "model_max_length": exported.config.max_position_embeddings,
      **_SPECIAL_TOKENS,
  }
  if exported.do_lower_case is not None:
    tokenizer_config["do_lower_case"] = exported.do_lower_case
  _write_json(os.path.join(directory, "config.json"), config)
  _write_json(os.path.join(directory, "tokenizer_config.json"), tokenizer_config)
  _write_json(os.path.join(directory, "special_tokens_map.json"), _SPECIAL_TOKENS)
  shutil.copyfile(vocab_file, os.path.join(directory, layout.VOCAB_FILE))
  return sorted(os.listdir(directory))


def write_tf1(
    exported: ModelForExport, directory: str, allow_gelu_approximation: bool
) -> List[str]:
  """google-research/bert's release layout in `directory` (see the module docstring)."""
  try:
    import tensorflow as tf
  except ImportError:
    raise CheckpointMappingError(
        f"{exported.path}: --target=tf1 writes a TensorFlow checkpoint and TensorFlow is not "
        "installed; install tensorflow, or export with --target=hf or --target=keras_hub"
    ) from None

  target = "google-research/bert (TF1)"
  activations = dict(_TF1_ACTIVATIONS)
  if allow_gelu_approximation:
    activations["gelu"] = "gelu"
  elif exported.config.hidden_act == "gelu":
    raise CheckpointMappingError(
        f"{exported.path}: the model uses the exact GELU (hidden_act=gelu) and "
        "google-research/bert's code has only the tanh approximation, so its outputs would "
        "differ slightly; export with --target=hf (exact GELU), or pass "
        "--allow_gelu_approximation to write it anyway"
    )
  fields = _bert_json(exported, activations, target)
  if exported.config.layer_norm_epsilon != _TF1_LAYER_NORM_EPSILON:
    raise CheckpointMappingError(
        f"{exported.path}: layer_norm_epsilon={exported.config.layer_norm_epsilon}; "
        f"google-research/bert's LayerNorm has {_TF1_LAYER_NORM_EPSILON} built in: export "
        "with --target=hf (its config.json holds layer_norm_eps)"
    )
  vocab_file = _wordpiece_vocab(exported, target)
  values = tf1_bert_values(_pretraining_model(exported))
  names = sorted(values)
  # SaveV2 writes the name-based checkpoint TF1's Saver wrote: tf.train.list_variables
  # and init_from_checkpoint (run_classifier.py's --init_checkpoint) read it by name.
  tf.raw_ops.SaveV2(
      prefix=os.path.join(directory, TF1_CHECKPOINT),
      tensor_names=names,
      shape_and_slices=[""] * len(names),
      tensors=[tf.constant(values[name]) for name in names],
  )
  fields.pop("layer_norm_eps")
  _write_json(os.path.join(directory, "bert_config.json"), fields)
  shutil.copyfile(vocab_file, os.path.join(directory, layout.VOCAB_FILE))
  return sorted(os.listdir(directory))


def writes_keras_hub_bert(exported: ModelForExport) -> bool:
  """Whether --target=keras_hub writes keras-hub's own BERT classes: a model its
  BertBackbone reproduces, with a WordPiece vocabulary (or none)."""
  wordpiece = exported.vocab_file is None or (
      vocab_lib.vocab_kind(exported.vocab_file) == layout.WORDPIECE
  )
  return wordpiece and is_keras_hub_bert(exported.config)


def write_keras_hub(
    exported: ModelForExport, directory: str, allow_gelu_approximation: bool
) -> List[str]:
  """A keras-hub preset in `directory`: keras-hub's BERT where it can express the model
  (`convert.keras_hub_bert`), else ours (`convert.keras_hub_preset`)."""
  del allow_gelu_approximation  # the preset keeps the model's own activation
  from recurrent_bert.convert.keras_hub_bert import write_keras_hub_bert_preset
  from recurrent_bert.convert.keras_hub_preset import write_keras_hub_preset

  if writes_keras_hub_bert(exported):
    return sorted(write_keras_hub_bert_preset(exported, directory))
  return sorted(write_keras_hub_preset(exported, directory))


WRITERS: Dict[str, Callable[[ModelForExport, str, bool], List[str]]] = {
    "keras_hub": write_keras_hub,
    "hf": write_hf,
    "tf1": write_tf1,
}


def _write_json(path: str, value: dict) -> None:
  with open(path, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=2, sort_keys=True)
    f.write("\n")


def export_model_dir(
    model_dir: str,
    target: str,
    output_dir: str,
    overwrite: bool = False,
    allow_gelu_approximation: bool = False,
) -> dict:
  """Writes the model in `model_dir` to `output_dir` in the `target` format (TARGETS).

  Returns:
    The export report: target, source, source_kind, model_config, heads (the
    pretraining heads written: "mlm", "nsp"), heads_left_out (heads the dir holds only
    initialised, as an import without them records), files.
  Raises:
    InputError (CheckpointMappingError): one line naming what the target cannot hold,
      a model dir without weights, or an existing non-empty `output_dir`.
  """
  if target not in WRITERS:
    raise CheckpointMappingError(f"--target={target!r} is not one of {list(TARGETS)}")
  if layout.has_scheme(output_dir):
    raise CheckpointMappingError(
        f"--output_dir={output_dir}: exports are written to local folders; copy the folder "
        "to its destination afterwards"
    )
  output_dir = os.path.abspath(output_dir)
  io_utils.check_replaceable_dir(output_dir, overwrite)
  exported = read_model_dir(model_dir)
  with io_utils.atomic_directory(output_dir) as tmp_dir:
    files = WRITERS[target](exported, tmp_dir, allow_gelu_approximation)
  # keras-hub's BERT has no next-sentence task to hold an NSP head.
  has_nsp = exported.has_nsp and not (target == "keras_hub" and writes_keras_hub_bert(exported))
  heads = [name for name, present in (("mlm", exported.has_mlm), ("nsp", has_nsp)) if present]
  return {
      "target": target,
      "source": os.path.abspath(model_dir),
      "source_kind": exported.kind,
      "model_config": exported.config.to_dict(),
      "heads": heads,
      "heads_left_out": [head.removesuffix("_head") for head in exported.untrained_heads],
      "files": files,
  }
