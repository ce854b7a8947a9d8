"""BERT checkpoints in other implementations' formats, written by the tests themselves.

Random weights under google-research/bert's TF1 names (the names `references.numpy_bert`
reads), a real TF1 name-based checkpoint writer, and a Hugging Face safetensors writer
whose name table is spelled out here, independently of the importer's renaming rules.
"""

import json
import os

import numpy as np
import tensorflow as tf

from tests.support.references import random_tf1_bert  # noqa: F401  (re-exported)


def bert_config_json(
    vocab_size, max_positions, hidden, intermediate, num_layers, num_heads, hidden_act="gelu"
):
  """The fields google-research/bert's bert_config.json and HF's config.json share."""
  return {
      "vocab_size": vocab_size,
      "hidden_size": hidden,
      "num_hidden_layers": num_layers,
      "num_attention_heads": num_heads,
      "intermediate_size": intermediate,
      "max_position_embeddings": max_positions,
      "type_vocab_size": 2,
      "hidden_act": hidden_act,
      "hidden_dropout_prob": 0.1,
      "attention_probs_dropout_prob": 0.1,
      "initializer_range": 0.02,
  }


def padded_inputs(rng, vocab_size):
  """Encoder inputs [2, 7]: random ids, two segments, the second row padded after 4."""
  ids = rng.integers(0, vocab_size, size=(2, 7)).astype("int32")
  segments = np.array([[0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0, 0]], "int32")
  mask = np.array([[1] * 7, [1] * 4 + [0] * 3], "int32")
  return {"input_ids": ids, "segment_ids": segments, "input_mask": mask}


def write_tf1_checkpoint(values, path):
  """A real TF1 name-based checkpoint, written the way google-research/bert's Saver did."""
  with tf.Graph().as_default():
    for name, value in values.items():
      tf.compat.v1.get_variable(name, initializer=value)
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      return saver.save(sess, path)


def hf_bert_tensors(tf1_values, prefix="bert."):
  """The same weights under Hugging Face names and PyTorch layouts.

  Linear weights are [out, in] (TF1 kernels transposed); LayerNorm weight/bias;
  BertForPreTraining puts the encoder under `bert.` and the heads under `cls.`.
  """
  w = tf1_values
  num_layers = len({k.split("/")[2] for k in w if k.startswith("bert/encoder/layer_")})
  hf = {
      f"{prefix}embeddings.word_embeddings.weight": w["bert/embeddings/word_embeddings"],
      f"{prefix}embeddings.token_type_embeddings.weight": w[
          "bert/embeddings/token_type_embeddings"
      ],
      f"{prefix}embeddings.position_embeddings.weight": w["bert/embeddings/position_embeddings"],
      f"{prefix}embeddings.LayerNorm.weight": w["bert/embeddings/LayerNorm/gamma"],
      f"{prefix}embeddings.LayerNorm.bias": w["bert/embeddings/LayerNorm/beta"],
      f"{prefix}pooler.dense.weight": w["bert/pooler/dense/kernel"].T,
      f"{prefix}pooler.dense.bias": w["bert/pooler/dense/bias"],
  }
  for i in range(num_layers):
    t, h = f"bert/encoder/layer_{i}", f"{prefix}encoder.layer.{i}"
    for tf1_scope, hf_scope in (
        ("attention/self/query", "attention.self.query"),
        ("attention/self/key", "attention.self.key"),
        ("attention/self/value", "attention.self.value"),
        ("attention/output/dense", "attention.output.dense"),
        ("intermediate/dense", "intermediate.dense"),
        ("output/dense", "output.dense"),
    ):
      hf[f"{h}.{hf_scope}.weight"] = w[f"{t}/{tf1_scope}/kernel"].T
      hf[f"{h}.{hf_scope}.bias"] = w[f"{t}/{tf1_scope}/bias"]
    for tf1_scope, hf_scope in (
        ("attention/output/LayerNorm", "attention.output.LayerNorm"),
        ("output/LayerNorm", "output.LayerNorm"),
    ):
      hf[f"{h}.{hf_scope}.weight"] = w[f"{t}/{tf1_scope}/gamma"]
      hf[f"{h}.{hf_scope}.bias"] = w[f"{t}/{tf1_scope}/beta"]
  if "cls/predictions/output_bias" in w:
    hf.update(
        {
            "cls.predictions.transform.dense.weight": w["cls/predictions/transform/dense/kernel"].T,
            "cls.predictions.transform.dense.bias": w["cls/predictions/transform/dense/bias"],
            "cls.predictions.transform.LayerNorm.weight": w[
                "cls/predictions/transform/LayerNorm/gamma"
            ],
            "cls.predictions.transform.LayerNorm.bias": w[
                "cls/predictions/transform/LayerNorm/beta"
            ],
            "cls.predictions.bias": w["cls/predictions/output_bias"],
            # Tied to the word embeddings in PyTorch; saved files often carry both.
            "cls.predictions.decoder.weight": w["bert/embeddings/word_embeddings"],
            "cls.predictions.decoder.bias": w["cls/predictions/output_bias"],
            "cls.seq_relationship.weight": w["cls/seq_relationship/output_weights"],
            "cls.seq_relationship.bias": w["cls/seq_relationship/output_bias"],
        }
    )
  return {k: np.ascontiguousarray(v) for k, v in hf.items()}


def write_hf_checkpoint(directory, tensors, config, vocab_tokens=None, do_lower_case=None):
  """model.safetensors + config.json (+ vocab.txt, tokenizer_config.json) in `directory`."""
  from safetensors.numpy import save_file

  os.makedirs(directory, exist_ok=True)
  save_file(tensors, os.path.join(directory, "model.safetensors"))
  with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
    json.dump({"model_type": "bert", "layer_norm_eps": 1e-12, **config}, f)
  if vocab_tokens is not None:
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
      f.write("\n".join(vocab_tokens) + "\n")
  if do_lower_case is not None:
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
      json.dump({"do_lower_case": do_lower_case}, f)
  return os.path.join(directory, "model.safetensors")
