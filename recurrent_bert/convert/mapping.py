"""Name and layout mappings from other BERT implementations onto our variables.

Contract: everything here works on tensors already in memory, never on files.
  - `keras_hub_bert_pairs`: our encoder's variables against a keras-hub `BertBackbone`;
  - `tf1_bert_pairs`: our variables against google-research/bert's TF1 names
    (`bert/...`, `cls/...`) and layouts, read through anything with `get_tensor(name)`;
  - `hf_to_tf1_names`: Hugging Face BERT tensors renamed and transposed (PyTorch [out, in]
    linear layouts) into the TF1 names and layouts, so one mapping serves both;
  - `assign_pairs`: copies (our variable, source) pairs after checking every shape.

Every error names the source variable and our variable involved.
"""

from typing import Dict, List, Mapping, NamedTuple, Tuple

import numpy as np

from recurrent_bert.errors import InputError
from recurrent_bert.models.encoder import Encoder


class CheckpointMappingError(InputError):
  """A source checkpoint lacks a variable, holds one of the wrong shape, or comes with a
  config the model cannot be built from: bad input, one line naming the file (an
  InputError, so commands exit 2 without a traceback)."""


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
    raise ValueError(
        "keras-hub's BertBackbone maps only onto the `bert` (BERT-orig) "
        f"family; got mixer={c.mixer}, attention_bias={c.attention_bias}"
    )
  if len(hub_backbone.transformer_layers) != c.num_layers:
    raise ValueError(
        f"layer count differs: ours {c.num_layers}, keras-hub "
        f"{len(hub_backbone.transformer_layers)}"
    )
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
        (ffn.output_dense, hub_layer._feedforward_output_dense),
    ):
      pairs += [(ours.kernel, theirs.kernel), (ours.bias, theirs.bias)]
    for ours, theirs in (
        (block.attention_layer_norm, hub_layer._self_attention_layer_norm),
        (block.output_layer_norm, hub_layer._feedforward_layer_norm),
    ):
      pairs += [(ours.gamma, theirs.gamma), (ours.beta, theirs.beta)]
  pairs += [
      (encoder.pooler.kernel, hub_backbone.pooled_dense.kernel),
      (encoder.pooler.bias, hub_backbone.pooled_dense.bias),
  ]
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
          f"needs {tuple(shape)}"
      )
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
    for ours, name in (
        (attention.query, "query"),
        (attention.key, "key"),
        (attention.value, "value"),
    ):
      pairs += [
          (
              ours.kernel,
              get(f"{prefix}/attention/self/{name}/kernel", (H, H), (H, heads, head_size)),
          ),
          (ours.bias, get(f"{prefix}/attention/self/{name}/bias", (H,), (heads, head_size))),
      ]
    pairs += [
        (
            attention.output_dense.kernel,
            get(f"{prefix}/attention/output/dense/kernel", (H, H), (heads, head_size, H)),
        ),
        (attention.output_dense.bias, get(f"{prefix}/attention/output/dense/bias")),
        (ffn.intermediate.kernel, get(f"{prefix}/intermediate/dense/kernel")),
        (ffn.intermediate.bias, get(f"{prefix}/intermediate/dense/bias")),
        (ffn.output_dense.kernel, get(f"{prefix}/output/dense/kernel")),
        (ffn.output_dense.bias, get(f"{prefix}/output/dense/bias")),
    ]
    for ours, name in (
        (block.attention_layer_norm, "attention/output/LayerNorm"),
        (block.output_layer_norm, "output/LayerNorm"),
    ):
      pairs += [
          (ours.gamma, get(f"{prefix}/{name}/gamma")),
          (ours.beta, get(f"{prefix}/{name}/beta")),
      ]
  pairs += [
      (encoder.pooler.kernel, get("bert/pooler/dense/kernel")),
      (encoder.pooler.bias, get("bert/pooler/dense/bias")),
  ]
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
    pairs += [
        (nsp_head.dense.kernel, NamedValue(weights.name, weights.value.T)),
        (nsp_head.dense.bias, get("cls/seq_relationship/output_bias")),
    ]
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
          f"{_source_name(theirs)} is {value.shape}"
      )
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
_HF_LAYER_NORM_PARAMETER_TO_TF1 = {
    "weight": "gamma",
    "bias": "beta",
    "gamma": "gamma",
    "beta": "beta",
}
# Embedding tables are stored [rows, H] in both; every other HF matrix is a PyTorch
# Linear weight, [out, in], the transpose of TF1's [in, out] kernel.
_HF_UNTRANSPOSED_SUFFIXES = ("_embeddings.weight",)
_HF_HEAD_RENAMES = {
    "cls.predictions.bias": "cls/predictions/output_bias",
    "cls.seq_relationship.weight": "cls/seq_relationship/output_weights",
    "cls.seq_relationship.bias": "cls/seq_relationship/output_bias",
}
# Tied to the word embeddings (decoder.weight) or a duplicate of cls.predictions.bias.
_HF_IGNORED = (
    "cls.predictions.decoder.weight",
    "cls.predictions.decoder.bias",
    "embeddings.position_ids",
)


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
    name = hf_name[len("bert.") :] if hf_name.startswith("bert.") else hf_name
    if name in _HF_IGNORED or not (name.startswith(("embeddings.", "encoder.", "pooler.", "cls."))):
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
