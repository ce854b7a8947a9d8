"""Weight mappings from other BERT implementations onto our models, and the importers.

Sources:
  - keras-hub `BertBackbone` (an in-memory model, or a local preset directory);
  - google-research/bert TF1 checkpoints (`bert/...`, `cls/...` variable names);
  - Hugging Face BERT safetensors files (`[bert.]embeddings...`, `cls...` names, PyTorch
    [out, in] linear layouts), read with `safetensors.numpy` (no PyTorch needed).

Hugging Face tensors are renamed and transposed into the TF1 names and layouts, so one
mapping (`tf1_bert_pairs`) serves both. `assign_pairs` copies (variable, source) pairs
after checking every shape, and `warm_start` copies every weight two of our models share
(by variable path) from a BERT-orig model into any variant.

Every error names the source variable (and file) and our variable involved.
"""

import dataclasses
import json
import os
from typing import Dict, List, Mapping, NamedTuple, Optional, Tuple

import numpy as np

from recurrent_bert.config import ModelConfig
from recurrent_bert.config import get_preset
from recurrent_bert.models.encoder import Encoder


class CheckpointMappingError(ValueError):
  """A source checkpoint lacks a variable, or holds one of the wrong shape."""


class NamedValue(NamedTuple):
  """A source tensor and the name it has in its checkpoint (for error messages)."""
  name: str
  value: np.ndarray


def keras_hub_bert_pairs(encoder: Encoder, hub_backbone) -> List[Tuple[object, object]]:
  """Pairs (our variable, keras_hub.models.BertBackbone variable) for a BERT-orig encoder.

  The encoder must be a `bert` family config of the same sizes, with
  `hidden_act="gelu_approximate"` to reproduce keras-hub's outputs.
  """
  c = encoder.config
  if c.mixer != "ffn" or c.attention_bias != "none" or c.position_embedding != "absolute":
    raise ValueError("keras-hub's BertBackbone maps only onto the `bert` (BERT-orig) "
                     f"family; got mixer={c.mixer}, attention_bias={c.attention_bias}")
  if len(hub_backbone.transformer_layers) != c.num_layers:
    raise ValueError(f"layer count differs: ours {c.num_layers}, keras-hub "
                     f"{len(hub_backbone.transformer_layers)}")
  emb = encoder.embeddings
  pairs = [
      (emb.token_embedding.embeddings, hub_backbone.token_embedding.embeddings),
      (emb.position_embeddings, hub_backbone.position_embedding.position_embeddings),
      (emb.segment_embedding.embeddings, hub_backbone.segment_embedding.embeddings),
      (emb.layer_norm.gamma, hub_backbone.embeddings_layer_norm.gamma),
      (emb.layer_norm.beta, hub_backbone.embeddings_layer_norm.beta),
  ]
  for block, hub_layer in zip(encoder.blocks, hub_backbone.transformer_layers):
    hub_attention = hub_layer._self_attention_layer
    ffn = block.branch_layers[0]
    for ours, theirs in (
        (block.attention.query, hub_attention._query_dense),
        (block.attention.key, hub_attention._key_dense),
        (block.attention.value, hub_attention._value_dense),
        (block.attention.output_dense, hub_attention._output_dense),
        (ffn.intermediate, hub_layer._feedforward_intermediate_dense),
        (ffn.output_dense, hub_layer._feedforward_output_dense)):
      pairs += [(ours.kernel, theirs.kernel), (ours.bias, theirs.bias)]
    for ours, theirs in (
        (block.attention_layer_norm, hub_layer._self_attention_layer_norm),
        (block.output_layer_norm, hub_layer._feedforward_layer_norm)):
      pairs += [(ours.gamma, theirs.gamma), (ours.beta, theirs.beta)]
  pairs += [(encoder.pooler.kernel, hub_backbone.pooled_dense.kernel),
            (encoder.pooler.bias, hub_backbone.pooled_dense.bias)]
  return pairs


def _tensor_getter(reader, source: str):
  """get(name, shape=None, reshape_to=None) -> NamedValue, with named errors.

  `shape` is the layout the source must have; `reshape_to` our (equal-size) layout.
  """

  def get(name, shape=None, reshape_to=None):
    try:
      value = np.asarray(reader.get_tensor(name))
    except Exception:  # TF1 readers raise NotFoundError, dict readers KeyError
      raise CheckpointMappingError(f"{source}: no variable {name!r}") from None
    if shape is not None and tuple(value.shape) != tuple(shape):
      raise CheckpointMappingError(
          f"{source}: variable {name!r} has shape {tuple(value.shape)}, the model config "
          f"needs {tuple(shape)}")
    return NamedValue(name, value if reshape_to is None else value.reshape(reshape_to))

  return get


def tf1_bert_pairs(model, reader, source: str = "checkpoint") -> List[Tuple[object, NamedValue]]:
  """Pairs (our variable, NamedValue) from a google-research/bert TF1 checkpoint.

  Args:
    model: an `Encoder` (BERT-orig sizes), or a `Pretrainer` (then the `cls/...` MLM and
      NSP weights are mapped too; NSP only if it has an NSP head).
    reader: anything with `get_tensor(name)`, e.g. `tf.train.load_checkpoint(path)`, or
      a `DictReader` of Hugging Face tensors renamed by `hf_to_tf1_names`.
    source: names the checkpoint in error messages.
  Returns:
    A list of (variable, NamedValue) pairs, reshaped to our layouts (TF1 keeps the
    attention kernels as [H, H] and the NSP weights as [2, H]).
  Raises:
    CheckpointMappingError: a variable is missing or has the wrong shape (named).
  """
  encoder = getattr(model, "encoder", model)
  c = encoder.config
  if c.mixer != "ffn" or c.attention_bias != "none" or not c.use_attention:
    raise ValueError("TF1 BERT checkpoints map only onto the `bert` family")
  H, heads, head_size = c.hidden_size, c.num_heads, c.head_size
  get = _tensor_getter(reader, source)

  emb = encoder.embeddings
  pairs = [
      (emb.token_embedding.embeddings, get("bert/embeddings/word_embeddings")),
      (emb.segment_embedding.embeddings, get("bert/embeddings/token_type_embeddings")),
      (emb.position_embeddings, get("bert/embeddings/position_embeddings")),
      (emb.layer_norm.gamma, get("bert/embeddings/LayerNorm/gamma")),
      (emb.layer_norm.beta, get("bert/embeddings/LayerNorm/beta")),
  ]
  for i, block in enumerate(encoder.blocks):
    prefix = f"bert/encoder/layer_{i}"
    attention, ffn = block.attention, block.branch_layers[0]
    for ours, name in ((attention.query, "query"), (attention.key, "key"),
                       (attention.value, "value")):
      pairs += [(ours.kernel, get(f"{prefix}/attention/self/{name}/kernel", (H, H),
                                  (H, heads, head_size))),
                (ours.bias, get(f"{prefix}/attention/self/{name}/bias", (H,),
                                (heads, head_size)))]
    pairs += [
        (attention.output_dense.kernel, get(f"{prefix}/attention/output/dense/kernel",
                                            (H, H), (heads, head_size, H))),
        (attention.output_dense.bias, get(f"{prefix}/attention/output/dense/bias")),
        (ffn.intermediate.kernel, get(f"{prefix}/intermediate/dense/kernel")),
        (ffn.intermediate.bias, get(f"{prefix}/intermediate/dense/bias")),
        (ffn.output_dense.kernel, get(f"{prefix}/output/dense/kernel")),
        (ffn.output_dense.bias, get(f"{prefix}/output/dense/bias")),
    ]
    for ours, name in ((block.attention_layer_norm, "attention/output/LayerNorm"),
                       (block.output_layer_norm, "output/LayerNorm")):
      pairs += [(ours.gamma, get(f"{prefix}/{name}/gamma")),
                (ours.beta, get(f"{prefix}/{name}/beta"))]
  pairs += [(encoder.pooler.kernel, get("bert/pooler/dense/kernel")),
            (encoder.pooler.bias, get("bert/pooler/dense/bias"))]
  mlm_head = getattr(model, "mlm_head", None)
  if mlm_head is not None:
    pairs += [
        (mlm_head.transform.kernel, get("cls/predictions/transform/dense/kernel")),
        (mlm_head.transform.bias, get("cls/predictions/transform/dense/bias")),
        (mlm_head.layer_norm.gamma, get("cls/predictions/transform/LayerNorm/gamma")),
        (mlm_head.layer_norm.beta, get("cls/predictions/transform/LayerNorm/beta")),
        (mlm_head.output_bias, get("cls/predictions/output_bias")),
    ]
  nsp_head = getattr(model, "nsp_head", None)
  if nsp_head is not None:
    weights = get("cls/seq_relationship/output_weights", (2, H))
    pairs += [(nsp_head.dense.kernel, NamedValue(weights.name, weights.value.T)),
              (nsp_head.dense.bias, get("cls/seq_relationship/output_bias"))]
  return pairs


def _source_name(theirs) -> str:
  if isinstance(theirs, NamedValue):
    return theirs.name
  return getattr(theirs, "path", None) or getattr(theirs, "name", "?")


def assign_pairs(pairs) -> int:
  """Copies each source value into our variable; returns the number of values copied.

  Every shape is checked before anything is assigned, so a mismatch leaves the model
  untouched.

  Raises:
    CheckpointMappingError: naming our variable and the source variable.
  """
  checked = []
  for ours, theirs in pairs:
    value = np.asarray(theirs.value if isinstance(theirs, NamedValue) else theirs)
    if tuple(ours.shape) != value.shape:
      raise CheckpointMappingError(
          f"shape mismatch: our {ours.path} is {tuple(ours.shape)}, source "
          f"{_source_name(theirs)} is {value.shape}")
    checked.append((ours, value))
  for ours, value in checked:
    ours.assign(value)
  return sum(value.size for _, value in checked)


def load_from_keras_hub_bert(encoder: Encoder, hub_backbone) -> int:
  """Copies every weight of a keras-hub BertBackbone into `encoder`; returns the count."""
  pairs = keras_hub_bert_pairs(encoder, hub_backbone)
  ours = {id(v) for v, _ in pairs}
  missing = [v.path for v in encoder.weights if id(v) not in ours]
  if missing:
    raise ValueError(f"no keras-hub source for: {missing}")
  return assign_pairs(pairs)


# ---------------------------------------------------------------- Hugging Face names

class DictReader:
  """A `tf.train.load_checkpoint`-like reader over a {name: numpy array} dict."""

  def __init__(self, tensors: Mapping[str, np.ndarray]):
    self._tensors = dict(tensors)

  def get_tensor(self, name: str) -> np.ndarray:
    return self._tensors[name]

  def has_tensor(self, name: str) -> bool:
    return name in self._tensors

  def names(self) -> List[str]:
    return sorted(self._tensors)


# Hugging Face module path -> TF1 scope, for the parts whose names differ beyond the
# mechanical "." -> "/" and "layer.N" -> "layer_N".
_HF_PARAMETER_TO_TF1 = {"weight": "kernel", "bias": "bias"}
_HF_LAYER_NORM_PARAMETER_TO_TF1 = {"weight": "gamma", "bias": "beta",
                                   "gamma": "gamma", "beta": "beta"}
# Embedding tables are stored [rows, H] in both; every other HF matrix is a PyTorch
# Linear weight, [out, in], the transpose of TF1's [in, out] kernel.
_HF_UNTRANSPOSED_SUFFIXES = ("_embeddings.weight",)
_HF_HEAD_RENAMES = {
    "cls.predictions.bias": "cls/predictions/output_bias",
    "cls.seq_relationship.weight": "cls/seq_relationship/output_weights",
    "cls.seq_relationship.bias": "cls/seq_relationship/output_bias",
}
# Tied to the word embeddings (decoder.weight) or a duplicate of cls.predictions.bias.
_HF_IGNORED = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias",
               "embeddings.position_ids")


def hf_to_tf1_names(tensors: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """Renames Hugging Face BERT tensors to google-research/bert's names and layouts.

  Accepts BertModel names (`embeddings.word_embeddings.weight`,
  `encoder.layer.0.attention.self.query.weight`, `pooler.dense.weight`) and
  BertForPreTraining names (the same under `bert.`, plus `cls.predictions.*` and
  `cls.seq_relationship.*`). Linear weights [out, in] are transposed to [in, out];
  `cls.seq_relationship.weight` keeps its [2, H] layout, as TF1 does. Tensors of other
  models (e.g. `qa_outputs.*`, `classifier.*`) are not BERT weights and are left out.
  """
  renamed = {}
  for hf_name, value in tensors.items():
    name = hf_name[len("bert."):] if hf_name.startswith("bert.") else hf_name
    if name in _HF_IGNORED or not (name.startswith(("embeddings.", "encoder.", "pooler.",
                                                    "cls."))):
      continue
    value = np.asarray(value)
    if name in _HF_HEAD_RENAMES:
      renamed[_HF_HEAD_RENAMES[name]] = value
      continue
    scope, parameter = name.rsplit(".", 1)
    if scope.endswith("LayerNorm"):
      parameter = _HF_LAYER_NORM_PARAMETER_TO_TF1.get(parameter, parameter)
    elif name.endswith(_HF_UNTRANSPOSED_SUFFIXES):
      parameter = None
    else:
      parameter = _HF_PARAMETER_TO_TF1.get(parameter, parameter)
      if value.ndim == 2:
        value = value.T
    scope = scope.replace("encoder.layer.", "encoder.layer_")
    tf1_scope = scope if name.startswith("cls.") else "bert." + scope
    tf1_name = tf1_scope.replace(".", "/")
    if parameter:
      tf1_name += "/" + parameter
    renamed[tf1_name] = np.ascontiguousarray(value)
  return renamed


# ------------------------------------------------------------------------ configs

def config_from_bert_json(fields: Mapping, gelu_is_exact: bool, source: str) -> ModelConfig:
  """A BERT-orig ModelConfig from a bert_config.json (TF1) or config.json (HF).

  Args:
    fields: the parsed JSON.
    gelu_is_exact: what `hidden_act: "gelu"` means: exact erf form for Hugging Face,
      the tanh approximation in google-research/bert's TF1 code.
    source: the file, for error messages.
  """
  required = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size")
  missing = [k for k in required if k not in fields]
  if missing:
    raise CheckpointMappingError(f"{source}: lacks {missing}")
  act = fields.get("hidden_act", "gelu")
  acts = {"gelu": "gelu" if gelu_is_exact else "gelu_approximate",
          "gelu_new": "gelu_approximate", "gelu_pytorch_tanh": "gelu_approximate",
          "gelu_fast": "gelu_approximate", "relu": "relu"}
  if act not in acts:
    raise CheckpointMappingError(f"{source}: hidden_act={act!r} is not one of {sorted(acts)}")
  if fields.get("position_embedding_type", "absolute") != "absolute":
    raise CheckpointMappingError(
        f"{source}: position_embedding_type={fields['position_embedding_type']!r}; only "
        "absolute position embeddings map onto BERT-orig")
  return get_preset("bert_base").replace(
      vocab_size=int(fields["vocab_size"]), hidden_size=int(fields["hidden_size"]),
      num_layers=int(fields["num_hidden_layers"]),
      num_heads=int(fields["num_attention_heads"]),
      intermediate_size=int(fields["intermediate_size"]),
      max_position_embeddings=int(fields.get("max_position_embeddings", 512)),
      type_vocab_size=int(fields.get("type_vocab_size", 2)),
      hidden_act=acts[act],
      dropout_rate=float(fields.get("hidden_dropout_prob", 0.1)),
      attention_dropout_rate=float(fields.get("attention_probs_dropout_prob", 0.1)),
      layer_norm_epsilon=float(fields.get("layer_norm_eps", 1e-12)),
      initializer_range=float(fields.get("initializer_range", 0.02)))


def _read_json(path: str, what: str) -> dict:
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except OSError as e:
    raise CheckpointMappingError(f"cannot read {what} {path!r}: {e.strerror}") from None
  except json.JSONDecodeError as e:
    raise CheckpointMappingError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None


# ---------------------------------------------------------------------- importers

@dataclasses.dataclass
class ImportedBert:
  """A BERT checkpoint loaded into our models.

  Attributes:
    model: a `Pretrainer` (encoder + MLM head, + NSP head when the source has one).
    vocab_file: the source's vocabulary, when it ships one.
    do_lower_case: the source's casing when it records it, else None.
    copied: our variable paths that received a source weight.
    new: our variable paths the source has no weight for (freshly initialised).
    source: description of where the weights came from.
  """
  model: object
  vocab_file: Optional[str]
  do_lower_case: Optional[bool]
  copied: List[str]
  new: List[str]
  source: str


def _load_bert(config: ModelConfig, reader, has_mlm: bool, has_nsp: bool, source: str,
               vocab_file: Optional[str], do_lower_case: Optional[bool]) -> ImportedBert:
  """Builds a Pretrainer for `config` and fills it from a TF1-named reader."""
  from recurrent_bert.models.pretrainer import Pretrainer  # pylint: disable=g-import-not-at-top
  model = Pretrainer(Encoder(config), use_nsp=has_nsp)
  pairs = tf1_bert_pairs(model if has_mlm else model.encoder, reader, source)
  assign_pairs(pairs)
  copied_ids = {id(v) for v, _ in pairs}
  return ImportedBert(
      model=model, vocab_file=vocab_file, do_lower_case=do_lower_case,
      copied=[v.path for v in model.weights if id(v) in copied_ids],
      new=[v.path for v in model.weights if id(v) not in copied_ids], source=source)


def _existing(path: Optional[str]) -> Optional[str]:
  return path if path and os.path.isfile(path) else None


def _check_given(path: Optional[str], flag: str) -> None:
  if path and not os.path.isfile(path):
    raise CheckpointMappingError(f"{flag}={path!r} does not exist")


def load_tf1_bert(checkpoint_prefix: str, bert_config_file: Optional[str] = None,
                  vocab_file: Optional[str] = None) -> ImportedBert:
  """Imports a google-research/bert checkpoint (e.g. `.../bert_model.ckpt`).

  `bert_config.json` and `vocab.txt` are looked up beside the checkpoint (the release
  layout) unless given. Its `hidden_act: "gelu"` is the tanh approximation of the TF1
  code. The MLM and NSP heads are imported when the checkpoint has them.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  _check_given(bert_config_file, "bert_config_file")
  _check_given(vocab_file, "vocab_file")
  directory = os.path.dirname(checkpoint_prefix)
  bert_config_file = bert_config_file or os.path.join(directory, "bert_config.json")
  if not os.path.isfile(bert_config_file):
    raise CheckpointMappingError(f"no bert_config.json beside {checkpoint_prefix!r}; "
                                 "pass --bert_config_file")
  try:
    reader = tf.train.load_checkpoint(checkpoint_prefix)
  except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as e:
    raise CheckpointMappingError(
        f"cannot read TF1 checkpoint {checkpoint_prefix!r}: {e}") from None
  names = reader.get_variable_to_shape_map()
  config = config_from_bert_json(_read_json(bert_config_file, "bert_config_file"),
                                 gelu_is_exact=False, source=bert_config_file)
  return _load_bert(config, reader, has_mlm="cls/predictions/output_bias" in names,
                    has_nsp="cls/seq_relationship/output_weights" in names,
                    source=checkpoint_prefix,
                    vocab_file=vocab_file or _existing(os.path.join(directory, "vocab.txt")),
                    do_lower_case=None)


def load_hf_bert(path: str, bert_config_file: Optional[str] = None,
                 vocab_file: Optional[str] = None) -> ImportedBert:
  """Imports a Hugging Face BERT safetensors checkpoint.

  Args:
    path: a `.safetensors` file, or a directory holding `model.safetensors`.
    bert_config_file: the model's `config.json`; default: beside the weights.
    vocab_file: default: `vocab.txt` beside the weights, if any.
  The casing comes from `tokenizer_config.json` (`do_lower_case`) when present.
  """
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  _check_given(bert_config_file, "bert_config_file")
  _check_given(vocab_file, "vocab_file")
  weights_file = os.path.join(path, "model.safetensors") if os.path.isdir(path) else path
  if not os.path.isfile(weights_file):
    raise CheckpointMappingError(f"no safetensors file at {weights_file!r}")
  directory = os.path.dirname(weights_file)
  config_file = bert_config_file or os.path.join(directory, "config.json")
  if not os.path.isfile(config_file):
    raise CheckpointMappingError(f"no config.json beside {weights_file!r}; pass "
                                 "--bert_config_file")
  try:
    tensors = load_file(weights_file)
  except Exception as e:  # safetensors raises its own SafetensorError
    raise CheckpointMappingError(f"cannot read safetensors file {weights_file!r}: {e}") from None
  renamed = hf_to_tf1_names(tensors)
  config = config_from_bert_json(_read_json(config_file, "bert_config_file"),
                                 gelu_is_exact=True, source=config_file)
  tokenizer_config = os.path.join(directory, "tokenizer_config.json")
  do_lower_case = (_read_json(tokenizer_config, "tokenizer config").get("do_lower_case")
                   if os.path.isfile(tokenizer_config) else None)
  return _load_bert(config, DictReader(renamed),
                    has_mlm="cls/predictions/output_bias" in renamed,
                    has_nsp="cls/seq_relationship/output_weights" in renamed,
                    source=weights_file,
                    vocab_file=vocab_file or _existing(os.path.join(directory, "vocab.txt")),
                    do_lower_case=do_lower_case)


def load_keras_hub_preset(preset_dir: str, vocab_file: Optional[str] = None) -> ImportedBert:
  """Imports a local keras-hub BertBackbone preset (from `backbone.save_to_preset(dir)`).

  The backbone has no MLM/NSP heads: ours stay freshly initialised (listed in `new`).
  The vocabulary and casing come from the preset's tokenizer when it has one.
  """
  import keras_hub  # pylint: disable=g-import-not-at-top
  from recurrent_bert.models.pretrainer import Pretrainer  # pylint: disable=g-import-not-at-top
  _check_given(vocab_file, "vocab_file")
  if not os.path.isfile(os.path.join(preset_dir, "config.json")):
    raise CheckpointMappingError(f"{preset_dir!r} is not a keras-hub preset directory "
                                 "(no config.json)")
  hub = keras_hub.models.BertBackbone.from_preset(preset_dir)
  # keras-hub's BERT uses the tanh GELU and LayerNorm epsilon 1e-12.
  config = get_preset("bert_base").replace(
      vocab_size=hub.vocabulary_size, hidden_size=hub.hidden_dim, num_layers=hub.num_layers,
      num_heads=hub.num_heads, intermediate_size=hub.intermediate_dim,
      max_position_embeddings=hub.max_sequence_length, type_vocab_size=hub.num_segments,
      hidden_act="gelu_approximate")
  model = Pretrainer(Encoder(config), use_nsp=True)
  load_from_keras_hub_bert(model.encoder, hub)
  encoder_ids = {id(v) for v in model.encoder.weights}
  do_lower_case = None
  tokenizer_json = os.path.join(preset_dir, "tokenizer.json")
  if os.path.isfile(tokenizer_json):
    do_lower_case = _read_json(tokenizer_json, "tokenizer config").get(
        "config", {}).get("lowercase")
  preset_vocab = os.path.join(preset_dir, "assets", "tokenizer", "vocabulary.txt")
  return ImportedBert(
      model=model, vocab_file=vocab_file or _existing(preset_vocab),
      do_lower_case=do_lower_case,
      copied=[v.path for v in model.weights if id(v) in encoder_ids],
      new=[v.path for v in model.weights if id(v) not in encoder_ids], source=preset_dir)


SOURCES = ("tf1", "hf", "keras_hub")


def import_bert(source: str, path: str, bert_config_file: Optional[str] = None,
                vocab_file: Optional[str] = None) -> ImportedBert:
  """Imports a BERT checkpoint of kind `source` (one of SOURCES) from `path`."""
  if source == "tf1":
    return load_tf1_bert(path, bert_config_file, vocab_file)
  if source == "hf":
    return load_hf_bert(path, bert_config_file, vocab_file)
  if source == "keras_hub":
    if bert_config_file:
      raise CheckpointMappingError("--bert_config_file does not apply to keras_hub presets "
                                   "(their config.json is read)")
    return load_keras_hub_preset(path, vocab_file)
  raise CheckpointMappingError(f"source={source!r} is not one of {SOURCES}")


# ---------------------------------------------------------------------- warm start

@dataclasses.dataclass
class WarmStartReport:
  """What `warm_start` did, by our variable paths.

  Attributes:
    copied: target weights that received the source weight of the same path.
    new: target weights the source has no counterpart for (e.g. BLSTM, SwishRNN,
      relative attention bias): they keep their fresh initialisation.
    unused: source weights the target has no place for (e.g. the FFN of a
      TRANS-BLSTM-1 or SwishRNN block).
  """
  copied: List[str]
  new: List[str]
  unused: List[str]


_MAX_NAMED_MISMATCHES = 8  # enough to see the pattern; a wrong size fails every layer


def warm_start(target, source) -> WarmStartReport:
  """Copies every weight `target` shares with `source` (same variable path).

  Our variable paths name the role of a weight, not the model it sits in
  ("block_3/attention/query/kernel", "block_3/output_layer_norm/gamma",
  "mlm_head/transform/kernel"), so a BERT-orig model and any variant of the same sizes
  share embeddings, attention, FFN (where the variant keeps one), LayerNorms, pooler and
  heads.

  Args:
    target: an `Encoder` or task model of any family (e.g. a `Pretrainer`).
    source: an `Encoder` or task model (usually the imported BERT `Pretrainer`).
  Returns:
    WarmStartReport.
  Raises:
    CheckpointMappingError: a shared weight differs in shape; lists every such weight,
      nothing is assigned.
  """
  source_weights = {v.path: v for v in source.weights}
  target_weights = {v.path: v for v in target.weights}
  shared = [p for p in target_weights if p in source_weights]
  mismatched = [f"{p}: target {tuple(target_weights[p].shape)}, source "
                f"{tuple(source_weights[p].shape)}" for p in shared
                if tuple(target_weights[p].shape) != tuple(source_weights[p].shape)]
  if mismatched:
    shown = "; ".join(mismatched[:_MAX_NAMED_MISMATCHES])
    more = len(mismatched) - _MAX_NAMED_MISMATCHES
    raise CheckpointMappingError(
        f"warm start: shape mismatch for {len(mismatched)} shared weight(s): {shown}"
        + (f"; and {more} more" if more > 0 else "") +
        " (the target config needs the source's sizes)")
  assign_pairs([(target_weights[p], source_weights[p].numpy()) for p in shared])
  return WarmStartReport(copied=shared,
                         new=[p for p in target_weights if p not in source_weights],
                         unused=[p for p in source_weights if p not in target_weights])
