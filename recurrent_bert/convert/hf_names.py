"""Hugging Face BERT names and layouts, to and from google-research/bert's TF1 ones.

  - `hf_to_tf1_names`: Hugging Face BERT tensors renamed and transposed (PyTorch [out, in]
    linear layouts) into the TF1 names and layouts, so that mapping.py's one TF1 table
    (`tf1_bert_layout`) reads both formats; `tf1_to_hf_names` runs its rules backwards
    for export;
  - `DictReader`: a {name: array} dict read as a TF1 checkpoint is (`get_tensor`).

Like mapping.py, everything here works on tensors already in memory, never on files.
"""

import re
from typing import Dict, List, Mapping

import numpy as np


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


def tf1_to_hf_names(tf1_values: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """google-research/bert's names and layouts to Hugging Face's: `hf_to_tf1_names`' rules
  run backwards (its tables, read the other way).

  With the `cls/...` heads the names are BertForPreTraining's (`bert.` prefix); without
  them BertModel's (no prefix). The decoder weight and bias, which `transformers` ties to
  the word embeddings and `cls.predictions.bias`, are not written, as its own
  `save_pretrained` leaves them out.
  """
  with_heads = any(name.startswith("cls/") for name in tf1_values)
  head_names = {tf1: hf for hf, tf1 in _HF_HEAD_RENAMES.items()}
  layer_norm_names = {"gamma": "weight", "beta": "bias"}
  linear_names = {tf1: hf for hf, tf1 in _HF_PARAMETER_TO_TF1.items()}
  renamed = {}
  for tf1_name, value in tf1_values.items():
    value = np.asarray(value)
    if tf1_name in head_names:
      renamed[head_names[tf1_name]] = value
      continue
    scope, parameter = tf1_name.rsplit("/", 1)
    if scope.endswith("LayerNorm"):
      parameter = layer_norm_names[parameter]
    elif parameter.endswith("_embeddings"):  # a table: [rows, H] in both
      scope, parameter = tf1_name, "weight"
    else:
      parameter = linear_names[parameter]
      if value.ndim == 2:  # TF1 [in, out] -> PyTorch Linear [out, in]
        value = value.T
    if scope.startswith("bert/") and not with_heads:
      scope = scope[len("bert/") :]
    hf_scope = re.sub(r"/layer_(\d+)/", r"/layer/\1/", scope + "/").rstrip("/")
    renamed[hf_scope.replace("/", ".") + "." + parameter] = np.ascontiguousarray(value)
  return renamed
