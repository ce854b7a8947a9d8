"""Name and layout mappings from other BERT implementations onto our variables.

Contract: everything here works on tensors already in memory, never on files.
  - `keras_hub_bert_pairs`: our encoder's variables against a keras-hub `BertBackbone`,
    read by `load_from_keras_hub_bert` (import) and `store_to_keras_hub_bert` (export);
    `keras_hub_mlm_head_pairs` likewise pairs our MLM head with `BertMaskedLM`'s;
  - `is_keras_hub_bert`: whether keras-hub's BertBackbone reproduces a config's encoder;
  - `tf1_bert_layout`: the table of our variables against google-research/bert's TF1
    names (`bert/...`, `cls/...`) and layouts; `tf1_bert_pairs` reads a checkpoint
    through it (anything with `get_tensor(name)`), `tf1_bert_values` exports by it;
  - Hugging Face's names are renamed to and from the TF1 ones in hf_names.py, so
    `tf1_bert_layout` serves both formats;
  - `require_bert_orig`: the family check of every BERT-only format;
  - `assign_pairs`: copies (our variable, source) pairs after checking every shape;
    `store_pairs` copies the other way, into the paired variables.

Every error names the source variable and our variable involved.
"""

from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from recurrent_bert.errors import InputError
from recurrent_bert.models.encoder import Encoder
from recurrent_bert.weights_file import variables_by_path


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
  """get(name, shape=None) -> NamedValue, with named errors; `shape` is the layout the
  source must have (None: checked against ours when assigned)."""

  def get(name, shape=None):
    try:
      value = np.asarray(reader.get_tensor(name))
    except Exception:  # TF1 readers raise NotFoundError, dict readers KeyError
      raise CheckpointMappingError(f"{source}: no variable {name!r}") from None
    if shape is not None and tuple(value.shape) != tuple(shape):
      raise CheckpointMappingError(
          f"{source}: variable {name!r} has shape {tuple(value.shape)}, the model config "
          f"needs {tuple(shape)}"
      )
    return NamedValue(name, value)

  return get


def is_bert_orig(config) -> bool:
  """Whether `config` is BERT-orig: attention with no bias term, absolute positions, the
  feed-forward mixer (the `bert` family, whatever its sizes and activation)."""
  return (
      config.mixer == "ffn"
      and config.attention_bias == "none"
      and config.use_attention
      and config.position_embedding == "absolute"
  )


def require_bert_orig(config, target: str) -> None:
  """Raises CheckpointMappingError unless `config` is BERT-orig, the one family that
  google-research/bert and Hugging Face's BertModel can hold (`target` names them)."""
  if not is_bert_orig(config):
    raise CheckpointMappingError(
        f"{target} holds only the `bert` (BERT-orig) family; this model has "
        f"mixer={config.mixer}, attention_bias={config.attention_bias}, "
        f"use_attention={config.use_attention}, "
        f"position_embedding={config.position_embedding}: export it as a keras-hub preset "
        "(--target=keras_hub), which holds every family"
    )


# What keras-hub's BertBackbone hard-codes (keras_hub/src/models/bert/bert_backbone.py):
# the tanh GELU in every feed-forward layer and LayerNorm epsilon 1e-12 everywhere. Its
# sizes, vocabulary, positions and segment count are constructor arguments; its one
# dropout rate serves attention and hidden layers alike, which changes training, not the
# outputs, so the dropout rates are not compared.
_KERAS_HUB_BERT_ACTIVATION = "gelu_approximate"
_KERAS_HUB_BERT_LAYER_NORM_EPSILON = 1e-12


def keras_hub_bert_mismatch(config) -> Optional[str]:
  """Why keras-hub's BertBackbone cannot reproduce the encoder of `config`, in words;
  None when it can (`is_keras_hub_bert`)."""
  if not is_bert_orig(config):
    return (
        f"only the `bert` (BERT-orig) family is a keras-hub BertBackbone; this model has "
        f"mixer={config.mixer}, attention_bias={config.attention_bias}, "
        f"use_attention={config.use_attention}, position_embedding={config.position_embedding}"
    )
  if config.hidden_act != _KERAS_HUB_BERT_ACTIVATION:
    return (
        f"keras-hub's BertBackbone computes the tanh GELU (hidden_act="
        f"{_KERAS_HUB_BERT_ACTIVATION}); this model has hidden_act={config.hidden_act}"
    )
  if config.layer_norm_epsilon != _KERAS_HUB_BERT_LAYER_NORM_EPSILON:
    return (
        f"keras-hub's BertBackbone fixes layer_norm_epsilon="
        f"{_KERAS_HUB_BERT_LAYER_NORM_EPSILON:g}; this model has {config.layer_norm_epsilon:g}"
    )
  return None


def is_keras_hub_bert(config) -> bool:
  """True exactly when keras-hub's `BertBackbone` computes the same outputs as our encoder
  of `config` (`keras_hub_bert_mismatch` says why not)."""
  return keras_hub_bert_mismatch(config) is None


class Tf1Tensor(NamedTuple):
  """One of our variables under its google-research/bert TF1 name and layout.

  Attributes:
    variable: our variable.
    name: the TF1 variable name ("bert/encoder/layer_0/attention/self/query/kernel").
    shape: TF1's shape when its layout differs from ours (e.g. [H, H] for our
      [H, heads, head_size] query kernel), else None (the same shape).
    transposed: TF1 keeps the transpose of ours (the NSP weights, [2, H]).
  """

  variable: object
  name: str
  shape: Optional[Tuple[int, ...]] = None
  transposed: bool = False


def tf1_bert_layout(model) -> List[Tf1Tensor]:
  """Every variable of a BERT-orig model with its TF1 name and layout: the one table both
  directions read (`tf1_bert_pairs` imports through it, `tf1_bert_values` exports).

  Args:
    model: an `Encoder`, or a `Pretrainer` (its `cls/...` MLM weights, and NSP weights
      when it has an NSP head, are included).
  Raises:
    CheckpointMappingError: the model is not BERT-orig.
  """
  encoder = getattr(model, "encoder", model)
  c = encoder.config
  require_bert_orig(c, "a TF1 / Hugging Face BERT checkpoint")
  H = c.hidden_size
  emb = encoder.embeddings
  table = [
      Tf1Tensor(emb.token_embedding.embeddings, "bert/embeddings/word_embeddings"),
      Tf1Tensor(emb.segment_embedding.embeddings, "bert/embeddings/token_type_embeddings"),
      Tf1Tensor(emb.position_embeddings, "bert/embeddings/position_embeddings"),
      Tf1Tensor(emb.layer_norm.gamma, "bert/embeddings/LayerNorm/gamma"),
      Tf1Tensor(emb.layer_norm.beta, "bert/embeddings/LayerNorm/beta"),
  ]
  for i, block in enumerate(encoder.blocks):
    prefix = f"bert/encoder/layer_{i}"
    attention, ffn = block.attention, block.branch_layers[0]
    for ours, name in (
        (attention.query, "query"),
        (attention.key, "key"),
        (attention.value, "value"),
    ):
      # TF1 keeps the heads folded into H: kernels [H, H], biases [H].
      table += [
          Tf1Tensor(ours.kernel, f"{prefix}/attention/self/{name}/kernel", (H, H)),
          Tf1Tensor(ours.bias, f"{prefix}/attention/self/{name}/bias", (H,)),
      ]
    table += [
        Tf1Tensor(attention.output_dense.kernel, f"{prefix}/attention/output/dense/kernel", (H, H)),
        Tf1Tensor(attention.output_dense.bias, f"{prefix}/attention/output/dense/bias"),
        Tf1Tensor(ffn.intermediate.kernel, f"{prefix}/intermediate/dense/kernel"),
        Tf1Tensor(ffn.intermediate.bias, f"{prefix}/intermediate/dense/bias"),
        Tf1Tensor(ffn.output_dense.kernel, f"{prefix}/output/dense/kernel"),
        Tf1Tensor(ffn.output_dense.bias, f"{prefix}/output/dense/bias"),
    ]
    for ours, name in (
        (block.attention_layer_norm, "attention/output/LayerNorm"),
        (block.output_layer_norm, "output/LayerNorm"),
    ):
      table += [
          Tf1Tensor(ours.gamma, f"{prefix}/{name}/gamma"),
          Tf1Tensor(ours.beta, f"{prefix}/{name}/beta"),
      ]
  table += [
      Tf1Tensor(encoder.pooler.kernel, "bert/pooler/dense/kernel"),
      Tf1Tensor(encoder.pooler.bias, "bert/pooler/dense/bias"),
  ]
  mlm_head = getattr(model, "mlm_head", None)
  if mlm_head is not None:
    table += [
        Tf1Tensor(mlm_head.transform.kernel, "cls/predictions/transform/dense/kernel"),
        Tf1Tensor(mlm_head.transform.bias, "cls/predictions/transform/dense/bias"),
        Tf1Tensor(mlm_head.layer_norm.gamma, "cls/predictions/transform/LayerNorm/gamma"),
        Tf1Tensor(mlm_head.layer_norm.beta, "cls/predictions/transform/LayerNorm/beta"),
        Tf1Tensor(mlm_head.output_bias, "cls/predictions/output_bias"),
    ]
  nsp_head = getattr(model, "nsp_head", None)
  if nsp_head is not None:
    table += [
        Tf1Tensor(nsp_head.dense.kernel, "cls/seq_relationship/output_weights", (2, H), True),
        Tf1Tensor(nsp_head.dense.bias, "cls/seq_relationship/output_bias"),
    ]
  return table


def tf1_bert_pairs(model, reader, source: str = "checkpoint") -> List[Tuple[object, NamedValue]]:
  """Pairs (our variable, NamedValue) from a google-research/bert TF1 checkpoint.

  Args:
    model: as `tf1_bert_layout`.
    reader: anything with `get_tensor(name)`, e.g. `tf.train.load_checkpoint(path)`, or
      a `DictReader` of Hugging Face tensors renamed by `hf_to_tf1_names`.
    source: names the checkpoint in error messages.
  Returns:
    A list of (variable, NamedValue) pairs, in our layouts.
  Raises:
    CheckpointMappingError: a variable is missing or has the wrong shape (named).
  """
  get = _tensor_getter(reader, source)
  pairs = []
  for entry in tf1_bert_layout(model):
    theirs = get(entry.name, entry.shape)
    value = theirs.value.T if entry.transposed else theirs.value
    if entry.shape is not None and not entry.transposed:
      value = value.reshape(tuple(entry.variable.shape))
    pairs.append((entry.variable, NamedValue(theirs.name, value)))
  return pairs


def tf1_bert_values(model) -> Dict[str, np.ndarray]:
  """{TF1 name: value in TF1's layout} of a BERT-orig model (`tf1_bert_layout`'s inverse
  direction), float32."""
  values = {}
  for entry in tf1_bert_layout(model):
    value = np.asarray(entry.variable, dtype=np.float32)
    if entry.transposed:
      value = value.T
    elif entry.shape is not None:
      value = value.reshape(entry.shape)
    values[entry.name] = np.ascontiguousarray(value)
  return values


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


def _uncovered(variables, covered) -> List[str]:
  """The paths of `variables` not among `covered` (variables, compared by identity)."""
  ids = {id(v) for v in covered}
  return [v.path for v in variables if id(v) not in ids]


def store_pairs(pairs) -> int:
  """`assign_pairs` the other way: copies each of our variables into its paired variable
  of the other model; returns the number of values copied.

  Every shape is checked before anything is assigned.

  Raises:
    CheckpointMappingError: naming both variables.
  """
  for ours, theirs in pairs:
    if tuple(ours.shape) != tuple(theirs.shape):
      raise CheckpointMappingError(
          f"shape mismatch: our {ours.path} is {tuple(ours.shape)}, its target "
          f"{_source_name(theirs)} is {tuple(theirs.shape)}"
      )
  for ours, theirs in pairs:
    theirs.assign(np.asarray(ours))
  return sum(int(np.prod(ours.shape)) for ours, _ in pairs)


def load_from_keras_hub_bert(encoder: Encoder, hub_backbone) -> int:
  """Copies every weight of a keras-hub BertBackbone into `encoder`; returns the count."""
  pairs = keras_hub_bert_pairs(encoder, hub_backbone)
  missing = _uncovered(encoder.weights, [ours for ours, _ in pairs])
  if missing:
    raise ValueError(f"no keras-hub source for: {missing}")
  return assign_pairs(pairs)


def store_to_keras_hub_bert(encoder: Encoder, hub_backbone) -> int:
  """Copies every weight of `encoder` into a keras-hub BertBackbone of the same sizes
  (`keras_hub_bert_pairs` read the other way); returns the count."""
  pairs = keras_hub_bert_pairs(encoder, hub_backbone)
  missing = _uncovered(hub_backbone.weights, [theirs for _, theirs in pairs])
  if missing:
    raise ValueError(f"no weight of ours for keras-hub's: {missing}")
  return store_pairs(pairs)


# Our Pretrainer's MLM head against keras-hub's MaskedLMHead (of `BertMaskedLM`): (our
# variable path, its path under keras-hub's head layer). Both project onto the vocabulary
# through the token embedding, which is the encoder's / backbone's and mapped with them.
_KERAS_HUB_MLM_HEAD_NAMES = (
    ("mlm_head/transform/kernel", "intermediate_dense/kernel"),
    ("mlm_head/transform/bias", "intermediate_dense/bias"),
    ("mlm_head/layer_norm/gamma", "intermediate_layer_norm/gamma"),
    ("mlm_head/layer_norm/beta", "intermediate_layer_norm/beta"),
    ("mlm_head/output_bias", "output_bias"),
)


def keras_hub_mlm_head_pairs(pretrainer, hub_masked_lm) -> List[Tuple[object, object]]:
  """Pairs (our variable, keras-hub variable) of the MLM heads.

  keras-hub's BertMaskedLM head computes the exact GELU and LayerNorm epsilon 1e-5
  whatever the backbone; ours the config's `hidden_act` and `layer_norm_epsilon` (tanh
  GELU and 1e-12 for a keras-hub BERT), so the same weights give logits that differ
  slightly (of the order of 1e-3).

  Args:
    pretrainer: our `Pretrainer`.
    hub_masked_lm: a `keras_hub.models.BertMaskedLM` over a backbone of the same sizes.
  Raises:
    CheckpointMappingError: a variable of the table is missing on either side.
  """
  ours = variables_by_path(pretrainer)
  head = hub_masked_lm.masked_lm_head
  prefix = head.name + "/"
  theirs = {v.path[len(prefix) :]: v for v in head.weights if v.path.startswith(prefix)}
  pairs = []
  for our_path, their_path in _KERAS_HUB_MLM_HEAD_NAMES:
    if our_path not in ours or their_path not in theirs:
      side = "our Pretrainer" if our_path not in ours else "keras-hub's MaskedLMHead"
      raise CheckpointMappingError(
          f"the MLM head mapping {our_path} <-> {prefix}{their_path}: {side} has no such variable"
      )
    pairs.append((ours[our_path], theirs[their_path]))
  return pairs


def load_from_keras_hub_mlm_head(pretrainer, hub_masked_lm) -> int:
  """Copies keras-hub BertMaskedLM's MLM head weights into `pretrainer`'s; returns the count."""
  return assign_pairs(keras_hub_mlm_head_pairs(pretrainer, hub_masked_lm))


def store_to_keras_hub_mlm_head(pretrainer, hub_masked_lm) -> int:
  """Copies `pretrainer`'s MLM head weights into keras-hub BertMaskedLM's; returns the count.

  The tied token embedding is the backbone's: `store_to_keras_hub_bert` copies it.
  """
  return store_pairs(keras_hub_mlm_head_pairs(pretrainer, hub_masked_lm))
