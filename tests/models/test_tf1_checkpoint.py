"""google-research/bert TF1 checkpoints onto our Pretrainer, against a numpy BERT."""

import numpy as np
import tensorflow as tf

from recurrent_bert.config import get_preset
from recurrent_bert.models import Encoder
from recurrent_bert.models import Pretrainer
from recurrent_bert.models.checkpoint_mapping import assign_pairs
from recurrent_bert.models.checkpoint_mapping import tf1_bert_pairs
from tests import references as ref

V, P, H, F, L, A = 50, 16, 8, 12, 2, 2


def _tf1_values(rng):
  """Random weights under google-research/bert's TF1 variable names and shapes."""
  values = {
      "bert/embeddings/word_embeddings": (V, H),
      "bert/embeddings/token_type_embeddings": (2, H),
      "bert/embeddings/position_embeddings": (P, H),
      "bert/embeddings/LayerNorm/gamma": (H,), "bert/embeddings/LayerNorm/beta": (H,),
      "bert/pooler/dense/kernel": (H, H), "bert/pooler/dense/bias": (H,),
      "cls/predictions/transform/dense/kernel": (H, H),
      "cls/predictions/transform/dense/bias": (H,),
      "cls/predictions/transform/LayerNorm/gamma": (H,),
      "cls/predictions/transform/LayerNorm/beta": (H,),
      "cls/predictions/output_bias": (V,),
      "cls/seq_relationship/output_weights": (2, H),
      "cls/seq_relationship/output_bias": (2,),
  }
  for i in range(L):
    p = f"bert/encoder/layer_{i}"
    for name in ("query", "key", "value"):
      values[f"{p}/attention/self/{name}/kernel"] = (H, H)
      values[f"{p}/attention/self/{name}/bias"] = (H,)
    values.update({
        f"{p}/attention/output/dense/kernel": (H, H),
        f"{p}/attention/output/dense/bias": (H,),
        f"{p}/attention/output/LayerNorm/gamma": (H,),
        f"{p}/attention/output/LayerNorm/beta": (H,),
        f"{p}/intermediate/dense/kernel": (H, F), f"{p}/intermediate/dense/bias": (F,),
        f"{p}/output/dense/kernel": (F, H), f"{p}/output/dense/bias": (H,),
        f"{p}/output/LayerNorm/gamma": (H,), f"{p}/output/LayerNorm/beta": (H,),
    })
  return {k: rng.normal(scale=0.5, size=s).astype("float32") for k, s in values.items()}


def _write_tf1_checkpoint(values, path):
  """A real TF1 name-based checkpoint, written the way google-research/bert's Saver did."""
  with tf.Graph().as_default():
    for name, value in values.items():
      tf.compat.v1.get_variable(name, initializer=value)
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      return saver.save(sess, path)


def _numpy_bert(w, ids, segments, mask, positions):
  """BERT's forward pass from the TF1 arrays (tanh-approximate GELU, as in TF1 BERT)."""
  x = (w["bert/embeddings/word_embeddings"][ids] +
       w["bert/embeddings/token_type_embeddings"][segments] +
       w["bert/embeddings/position_embeddings"][:ids.shape[1]])
  x = ref.layer_norm(x, w["bert/embeddings/LayerNorm/gamma"],
                     w["bert/embeddings/LayerNorm/beta"])
  for i in range(L):
    p = f"bert/encoder/layer_{i}"
    heads = lambda n: (w[f"{p}/attention/self/{n}/kernel"].reshape(H, A, H // A),
                       w[f"{p}/attention/self/{n}/bias"].reshape(A, H // A))
    attended = ref.self_attention(
        x, mask, *heads("query"), *heads("key"), *heads("value"),
        w[f"{p}/attention/output/dense/kernel"].reshape(A, H // A, H),
        w[f"{p}/attention/output/dense/bias"])
    x = ref.layer_norm(x + attended, w[f"{p}/attention/output/LayerNorm/gamma"],
                       w[f"{p}/attention/output/LayerNorm/beta"])
    inner = ref.gelu(x @ w[f"{p}/intermediate/dense/kernel"] +
                     w[f"{p}/intermediate/dense/bias"], approximate=True)
    x = ref.layer_norm(
        x + inner @ w[f"{p}/output/dense/kernel"] + w[f"{p}/output/dense/bias"],
        w[f"{p}/output/LayerNorm/gamma"], w[f"{p}/output/LayerNorm/beta"])
  pooled = np.tanh(x[:, 0] @ w["bert/pooler/dense/kernel"] + w["bert/pooler/dense/bias"])
  gathered = np.stack([x[b, positions[b]] for b in range(len(ids))])
  h = ref.gelu(gathered @ w["cls/predictions/transform/dense/kernel"] +
               w["cls/predictions/transform/dense/bias"], approximate=True)
  h = ref.layer_norm(h, w["cls/predictions/transform/LayerNorm/gamma"],
                     w["cls/predictions/transform/LayerNorm/beta"])
  mlm = h @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
  nsp = pooled @ w["cls/seq_relationship/output_weights"].T + w[
      "cls/seq_relationship/output_bias"]
  return mlm, nsp


def test_tf1_checkpoint_gives_numpy_bert_outputs(rng, tmp_path):
  values = _tf1_values(rng)
  path = _write_tf1_checkpoint(values, str(tmp_path / "bert_model.ckpt"))
  config = get_preset("bert_tiny").replace(
      vocab_size=V, hidden_size=H, intermediate_size=F, num_layers=L, num_heads=A,
      max_position_embeddings=P, hidden_act="gelu_approximate")
  model = Pretrainer(Encoder(config), use_nsp=True)
  pairs = tf1_bert_pairs(model, tf.train.load_checkpoint(path))
  assert assign_pairs(pairs) == sum(v.size for v in values.values())
  assert {id(v) for v, _ in pairs} == {id(v) for v in model.weights}  # nothing left out

  ids = rng.integers(0, V, size=(2, 7)).astype("int32")
  segments = np.array([[0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0, 0]], "int32")
  mask = np.array([[1] * 7, [1] * 4 + [0] * 3], "int32")
  positions = np.array([[1, 5], [2, 3]], "int32")
  out = model({"input_ids": ids, "segment_ids": segments, "input_mask": mask,
               "masked_lm_positions": positions}, training=False)
  want_mlm, want_nsp = _numpy_bert(values, ids, segments, mask, positions)
  np.testing.assert_allclose(out["mlm_logits"], want_mlm, atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(out["nsp_logits"], want_nsp, atol=1e-4, rtol=1e-4)
