"""A pretraining model dir with a SentencePiece model, exported as a text-in SavedModel and
served in a fresh process that imports only TF and TF Text (no model file left on disk).
The reference ids are the `sentencepiece` library's; the reference outputs the in-process
Keras encoder's on them."""

import os
import shutil

import numpy as np
import pytest
import sentencepiece

from recurrent_bert import model_dir as layout
from recurrent_bert import serving
from recurrent_bert.config import get_preset
from recurrent_bert.models import build_encoder
from tests.data.conftest import corpus_file  # noqa: F401
from tests.data.sentencepiece_models import NON_ASCII
from tests.data.sentencepiece_models import build_model
from tests.support.export_checks import ask
from tests.support.export_checks import serve
from tests.support.export_checks import write_model_dir

pytestmark = pytest.mark.slow(seconds=45)

MAX_LEN = 24
TEXTS = [
    "The cat sat on the mat.",
    "Paris is the [MASK] of France.",
    NON_ASCII[0],
    NON_ASCII[2],
    " ".join(["Return the value of the attribute."] * 6),  # longer than MAX_LEN
]
PAIRS = ["Who sat?", "", NON_ASCII[4], "Hello, world!", "Short."]


@pytest.fixture(scope="module")
def served(tmp_path_factory, corpus_file):
  root = tmp_path_factory.mktemp("sp_export")
  model_file = build_model(corpus_file, "unigram", str(root / "spm"))
  reference = sentencepiece.SentencePieceProcessor(model_file=model_file)
  encoder = build_encoder(
      get_preset("bert_tiny").replace(
          vocab_size=reference.get_piece_size(), max_position_embeddings=64
      )
  )
  write_model_dir(root / "pretrained", encoder, model_file)
  export_dir = root / "saved_model"
  signatures = serving.export_model_dir(
      str(root / "pretrained"), str(export_dir), max_seq_length=MAX_LEN
  )
  # The served model needs neither the model file nor the model dir.
  shutil.rmtree(root / "pretrained")
  for name in ("spm.model", "spm.vocab"):
    os.remove(root / name)
  requests = []
  ask(requests, export_dir, "encode", text=TEXTS)
  ask(requests, export_dir, "encode_pair", text=TEXTS, text_pair=PAIRS)
  return encoder, reference, signatures, export_dir, serve(root, requests)


def packed(reference, texts, pairs=None):
  """google-research/bert's packing of the library's ids, [B, MAX_LEN] each."""
  rows = {"input_ids": [], "input_mask": [], "segment_ids": []}
  for i, text in enumerate(texts):
    a = reference.encode(text)
    b = None if pairs is None else reference.encode(pairs[i])
    if b is None:
      a = a[: MAX_LEN - 2]
      ids, segments = [2] + a + [3], [0] * (len(a) + 2)
    else:
      while len(a) + len(b) > MAX_LEN - 3:  # pop from the longer, the second on a tie
        (a if len(a) > len(b) else b).pop()
      ids = [2] + a + [3] + b + [3]
      segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    pad = MAX_LEN - len(ids)
    rows["input_ids"].append(ids + [0] * pad)
    rows["input_mask"].append([1] * len(ids) + [0] * pad)
    rows["segment_ids"].append(segments + [0] * pad)
  return {k: np.array(v, np.int32) for k, v in rows.items()}


def test_export_records_the_model_as_an_asset(served):
  _, _, signatures, export_dir, _ = served
  assert "encode" in signatures and "encode_pair" in signatures
  assert os.listdir(export_dir / "assets") == [layout.SENTENCEPIECE_MODEL_FILE]


@pytest.mark.parametrize("index, pairs", [(0, None), (1, PAIRS)])
def test_raw_text_is_served_with_the_library_ids(served, index, pairs):
  encoder, reference, _, _, results = served
  outputs = {k.split("/", 1)[1]: v for k, v in results.items() if k.startswith(f"{index}/")}
  want = packed(reference, TEXTS, pairs)
  steps = outputs["input_ids"].shape[1]
  assert steps == want["input_mask"].sum(1).max()
  for key in ("input_ids", "input_mask", "segment_ids"):
    np.testing.assert_array_equal(outputs[key], want[key][:, :steps])
  assert 4 in outputs["input_ids"][1]  # "[MASK]" in the text is the [MASK] id
  keras = encoder(want, training=False)
  real = outputs["input_mask"].astype(bool)
  np.testing.assert_allclose(
      outputs["sequence_output"][real],
      keras["sequence_output"].numpy()[:, :steps][real],
      atol=1e-5,
  )
  np.testing.assert_allclose(outputs["pooled_output"], keras["pooled_output"], atol=1e-5)
