"""Weight mappings from other BERT implementations onto our `Encoder`.

The start of the checkpoint importer: each source gets a function that pairs our
variables with the source's, and `assign_pairs` copies them, checking shapes.
"""

from typing import List, Tuple

import numpy as np

from recurrent_bert.models.encoder import Encoder


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


def tf1_bert_pairs(model, reader) -> List[Tuple[object, object]]:
  """Pairs (our variable, value) from a google-research/bert TF1 checkpoint.

  Args:
    model: an `Encoder` (BERT-orig sizes), or a `Pretrainer` (then the `cls/...` MLM and
      NSP weights are mapped too; NSP only if it has an NSP head).
    reader: `tf.train.load_checkpoint(path)` of the TF1 checkpoint.
  Returns:
    A list of (variable, numpy value) pairs, reshaped to our layouts (TF1 keeps the
    attention kernels as [H, H] and the NSP weights as [2, H]).
  """
  encoder = getattr(model, "encoder", model)
  c = encoder.config
  if c.mixer != "ffn" or c.attention_bias != "none":
    raise ValueError("TF1 BERT checkpoints map only onto the `bert` family")
  heads, head_size = c.num_heads, c.head_size

  def get(name, shape=None):
    value = reader.get_tensor(name)
    return value if shape is None else value.reshape(shape)

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
      pairs += [(ours.kernel, get(f"{prefix}/attention/self/{name}/kernel",
                                  (c.hidden_size, heads, head_size))),
                (ours.bias, get(f"{prefix}/attention/self/{name}/bias",
                                (heads, head_size)))]
    pairs += [
        (attention.output_dense.kernel, get(f"{prefix}/attention/output/dense/kernel",
                                            (heads, head_size, c.hidden_size))),
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
    pairs += [(nsp_head.dense.kernel, get("cls/seq_relationship/output_weights").T),
              (nsp_head.dense.bias, get("cls/seq_relationship/output_bias"))]
  return pairs


def assign_pairs(pairs) -> int:
  """Copies each source value into our variable; returns the number of values copied."""
  copied = 0
  for ours, theirs in pairs:
    value = np.asarray(theirs)
    if tuple(ours.shape) != value.shape:
      raise ValueError(f"shape mismatch for {ours.path}: ours {tuple(ours.shape)}, "
                       f"source {getattr(theirs, 'path', '?')} {value.shape}")
    ours.assign(value)
    copied += value.size
  return copied


def load_from_keras_hub_bert(encoder: Encoder, hub_backbone) -> int:
  """Copies every weight of a keras-hub BertBackbone into `encoder`; returns the count."""
  pairs = keras_hub_bert_pairs(encoder, hub_backbone)
  ours = {id(v) for v, _ in pairs}
  missing = [v.path for v in encoder.weights if id(v) not in ours]
  if missing:
    raise ValueError(f"no keras-hub source for: {missing}")
  return assign_pairs(pairs)
