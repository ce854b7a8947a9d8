"""Backends agree on the same weights, for the encoder of every family and every head.

Here (JAX or PyTorch) each model is built, its weights moved off their initial values (so
no bias or gain is left at 0 or 1, where a swapped or skipped one would go unseen), saved
with `weights_file.save_weights`, and run on a padded batch. One TensorFlow process then
builds every model again, loads each file, and runs the same batch: the outputs must agree
to 1e-5 (float32). Padded positions of sequence outputs are left out of the comparison:
what a backend leaves there is no contract, and nothing downstream reads them.
"""

import os

import keras
import numpy as np
import pytest

from recurrent_bert import models
from recurrent_bert import weights_file
from recurrent_bert.config import get_preset
from tests.backends.support import run_under_backend
from tests.backends.support import to_numpy

FAMILIES = (
    "bert",
    "bert_rab",
    "trans_blstm_1",
    "trans_blstm_2",
    "trans_blstm_small_1",
    "trans_blstm_small_2",
    "blstm",
    "swishrnn",
)
# name -> (constructor of the task model around an encoder, its keyword arguments).
HEADS = {
    "pretrainer": ("Pretrainer", dict(use_nsp=True)),
    "classifier": ("Classifier", dict(num_classes=3)),
    "classifier_feature_based": (
        "Classifier",
        dict(num_classes=3, layer_mix="concat_last_four", feature_based=True),
    ),
    "token_tagger": ("TokenTagger", dict(num_labels=5, layer_mix="mix_all")),
    "span_extractor_blstm_decoder": ("SpanExtractor", dict(use_blstm_decoder=True)),
    "multiple_choice": ("MultipleChoice", dict(layer_mix="sum_last_four")),
}
HEADS_FAMILY = "bert"
VOCAB = 100
B, C, T, P = 3, 2, 10, 4


def config(family):
  """The family's tiny preset with a small vocabulary (what is compared does not need 30K rows)."""
  return get_preset(f"{family}_tiny").replace(vocab_size=VOCAB, max_position_embeddings=32)


def build(name, encoder=None):
  """The model `name` (a family's encoder, or a head's task model around `encoder`, by
  default a new one), freshly initialised."""
  if name in FAMILIES:
    return models.build_encoder(config(name))
  constructor, kwargs = HEADS[name]
  encoder = encoder or models.build_encoder(config(HEADS_FAMILY))
  return getattr(models, constructor)(encoder, **kwargs)


def run(model, name, inputs):
  """{output name: numpy array} of `model` on the batch (inference mode)."""
  if name in FAMILIES:
    out = model({k: inputs[k] for k in ("input_ids", "input_mask", "segment_ids")}, training=False)
    return {"sequence_output": out["sequence_output"], "pooled_output": out["pooled_output"]}
  if HEADS[name][0] == "MultipleChoice":
    rows = {k: inputs["choice_" + k] for k in ("input_ids", "input_mask", "segment_ids")}
    return {"logits": model(rows, training=False)}
  features = {k: inputs[k] for k in ("input_ids", "input_mask", "segment_ids")}
  if HEADS[name][0] == "Pretrainer":
    features["masked_lm_positions"] = inputs["masked_lm_positions"]
  out = model(features, training=False)
  return out if isinstance(out, dict) else {"logits": out}


def padded_inputs():
  """[B, T] encoder inputs (rows 1 and 2 padded), MLM positions, and [B, C, T] choices."""
  rng = np.random.default_rng(0)
  lengths = np.array([T, 7, 3])
  mask = (np.arange(T)[None, :] < lengths[:, None]).astype("int32")
  choice_lengths = rng.integers(3, T + 1, (B, C))
  choice_mask = (np.arange(T)[None, None, :] < choice_lengths[..., None]).astype("int32")
  return {
      "input_ids": rng.integers(5, VOCAB, (B, T)).astype("int32") * mask,
      "input_mask": mask,
      "segment_ids": (np.arange(T)[None, :] >= 4).astype("int32") * mask,
      "masked_lm_positions": np.array([[1, 4, 8, 9], [0, 2, 6, 0], [1, 2, 0, 0]], "int32"),
      "choice_input_ids": rng.integers(5, VOCAB, (B, C, T)).astype("int32") * choice_mask,
      "choice_input_mask": choice_mask,
      "choice_segment_ids": np.zeros((B, C, T), "int32"),
  }


def perturb(model, rng):
  for variable in model.weights:
    value = to_numpy(variable)
    variable.assign((value + rng.normal(0.0, 0.05, value.shape)).astype(value.dtype))


# The TensorFlow side: every model of `names` rebuilt, loaded from its file, run.
TENSORFLOW_CODE = """
import os
from recurrent_bert import weights_file
from tests.backends.test_backends_agree import build, run

folder = str(inputs.pop("folder"))
for name in str(inputs.pop("names")).split(","):
  model = build(name)
  weights_file.load_weights(model, os.path.join(folder, name + ".weights.h5"))
  for key, value in run(model, name, inputs).items():
    outputs[name + "__" + key] = value
"""


@pytest.fixture(scope="module")
def agreement(tmp_path_factory):
  """{name: (this backend's outputs, TensorFlow's outputs) or the error this backend raised}."""
  folder = str(tmp_path_factory.mktemp("weights"))
  inputs = padded_inputs()
  rng = np.random.default_rng(1)
  here, errors, built = {}, {}, {}
  for name in FAMILIES + tuple(HEADS):
    try:
      keras.utils.set_random_seed(0)
      # The heads share the bert encoder here (a build costs seconds under JAX); each file
      # still holds its whole model, and TensorFlow builds each model on its own.
      model = built[name] = build(name, built.get(HEADS_FAMILY))
      perturb(model, rng)
      weights_file.save_weights(model, os.path.join(folder, name + ".weights.h5"))
      here[name] = {k: to_numpy(v) for k, v in run(model, name, inputs).items()}
    except Exception as e:  # reported by that model's own test, not the others'
      errors[name] = f"{type(e).__name__}: {e}"
  reference = run_under_backend(
      TENSORFLOW_CODE, folder=np.array(folder), names=np.array(",".join(here)), **inputs
  )
  results = dict(errors)
  for name, outputs in here.items():
    results[name] = (outputs, {k: reference[f"{name}__{k}"] for k in outputs})
  return inputs, results


def assert_agree(name, agreement):
  inputs, results = agreement
  if isinstance(results[name], str):
    pytest.fail(f"{name} does not run on this backend: {results[name]}")
  here, tensorflow = results[name]
  for key, value in here.items():
    want = tensorflow[key]
    assert value.shape == want.shape, key
    if value.shape[:2] == inputs["input_mask"].shape:  # [B, T] or [B, T, ...]: per token
      real = inputs["input_mask"].astype(bool)
      value, want = value[real], want[real]
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-5, err_msg=f"{name}: {key}")


@pytest.mark.parametrize("family", FAMILIES)
def test_the_encoder_agrees_with_tensorflow(family, agreement):
  assert_agree(family, agreement)


@pytest.mark.parametrize("head", sorted(HEADS))
def test_the_head_agrees_with_tensorflow(head, agreement):
  assert_agree(head, agreement)
