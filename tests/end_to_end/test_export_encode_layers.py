"""encode_layers / encode_layers_pair of a text-in SavedModel, served in a fresh process
that imports only TF and TF Text, against the in-process Keras encoder's `encoder_outputs`
on inputs packed by the numpy feature pipeline (tests/support/export_checks.py)."""

import numpy as np
import pytest

from recurrent_bert import serving
from recurrent_bert.data.tokenization import BertWordpieceTokenizer
from tests.support.export_checks import MAX_LEN
from tests.support.export_checks import PAIRS
from tests.support.export_checks import TEXTS
from tests.support.export_checks import answers
from tests.support.export_checks import ask
from tests.support.export_checks import check_packing
from tests.support.export_checks import encoder
from tests.support.export_checks import reference_inputs
from tests.support.export_checks import serve
from tests.support.export_checks import write_model_dir
from tests.support.export_checks import write_vocab

pytestmark = pytest.mark.slow(seconds=50)

PRESET = "trans_blstm_2_tiny"  # blocks with a BLSTM: padding must not leak into them


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  """(models, tokenizer, requests, results) of one export of a pretraining model dir."""
  root = tmp_path_factory.mktemp("encode_layers")
  vocab_file = write_vocab(root)
  tokenizer = BertWordpieceTokenizer(vocab_file, do_lower_case=True)
  models = {PRESET: encoder(PRESET)}
  write_model_dir(root / PRESET, models[PRESET], vocab_file)
  models["signatures"] = serving.export_model_dir(
      str(root / PRESET), str(root / f"{PRESET}_saved_model"), max_seq_length=MAX_LEN
  )
  requests = []
  export_dir = root / f"{PRESET}_saved_model"
  ask(requests, export_dir, "encode_layers", text=TEXTS)
  ask(requests, export_dir, "encode_layers_pair", text=TEXTS, text_pair=PAIRS)
  ask(requests, export_dir, "encode_layers", text=TEXTS[:2])  # a shorter batch
  return models, tokenizer, requests, serve(root, requests)


@pytest.mark.parametrize("signature", ["encode_layers", "encode_layers_pair"])
def test_encode_layers_are_the_encoders_block_outputs(served, signature):
  models, tokenizer, _, _ = served
  model = models[PRESET]
  num_layers, hidden = model.config.num_layers, model.config.hidden_size
  for request, outputs in answers(served, f"{PRESET}_saved_model", signature):
    reference = reference_inputs(
        tokenizer, request["inputs"]["text"], request["inputs"].get("text_pair")
    )
    check_packing(outputs, reference)
    steps = outputs["input_ids"].shape[1]
    np.testing.assert_array_equal(outputs["segment_ids"], reference["segment_ids"][:, :steps])
    got = outputs["encoder_outputs"]
    assert got.dtype == np.float32
    assert got.shape == (len(request["inputs"]["text"]), num_layers, steps, hidden)
    want = np.stack(
        [h.numpy() for h in model(reference, training=False)["encoder_outputs"]], axis=1
    )[:, :, :steps]
    real = outputs["input_mask"].astype(bool)
    for layer in range(num_layers):
      np.testing.assert_allclose(got[:, layer][real], want[:, layer][real], atol=1e-5)


def test_signature_descriptions_list_encode_layers(served):
  signatures = served[0]["signatures"]
  assert signatures["encode_layers"].startswith("(text string[None]) ->")
  assert signatures["encode_layers_pair"].startswith(
      "(text string[None], text_pair string[None]) ->"
  )
  assert "encoder_outputs float32[None, 2, None, 128]" in signatures["encode_layers"]
  assert signatures["serving_default"] == signatures["encode"]
