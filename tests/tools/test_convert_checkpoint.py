"""rbert-convert-checkpoint: TF1 / Hugging Face checkpoints -> model dirs, warm start."""

import json
import os
import sys

import numpy as np
import pytest

from recurrent_bert import saving
from recurrent_bert.config import get_preset
from recurrent_bert.models import Encoder
from recurrent_bert.models import Pretrainer
from tests.support import checkpoint_files
from tests.support import forkserver
from tests.support import references as ref

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
V, P, H, F, L, A = 50, 16, 8, 12, 2, 2
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(V - 5)]


def _start_tool(*flags):
  """Runs the tool as docs/export.md shows (`python -m recurrent_bert.tools.convert_checkpoint`)."""
  return forkserver.start(
      [sys.executable, "-m", "recurrent_bert.tools.convert_checkpoint", *flags],
      REPO,
      dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
  )


def _release_dir(directory, values):
  """google-research/bert's release layout: bert_model.ckpt.*, bert_config.json, vocab.txt."""
  os.makedirs(directory)
  prefix = checkpoint_files.write_tf1_checkpoint(values, os.path.join(directory, "bert_model.ckpt"))
  with open(os.path.join(directory, "bert_config.json"), "w", encoding="utf-8") as f:
    json.dump(checkpoint_files.bert_config_json(V, P, H, F, L, A), f)
  with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(VOCAB) + "\n")
  return prefix


def _inputs(rng):
  return checkpoint_files.padded_inputs(rng, V)


@pytest.mark.slow(seconds=8)
def test_tf1_release_to_model_dir_on_the_command_line(rng, tmp_path):
  values = checkpoint_files.random_tf1_bert(rng, V, P, H, F, L)
  prefix = _release_dir(str(tmp_path / "release"), values)
  broken = dict(values)
  del broken["bert/encoder/layer_1/output/LayerNorm/gamma"]
  broken_prefix = _release_dir(str(tmp_path / "broken"), broken)
  out = tmp_path / "converted"
  good = _start_tool("--source=tf1", f"--input={prefix}", f"--output_dir={out}")
  bad = _start_tool(
      "--source=tf1", f"--input={broken_prefix}", f"--output_dir={tmp_path / 'not_written'}"
  )
  stdout, stderr = good.communicate(timeout=300)
  assert good.returncode == 0, stderr[-3000:]
  _, bad_stderr = bad.communicate(timeout=300)
  assert bad.returncode == 2
  assert "no variable 'bert/encoder/layer_1/output/LayerNorm/gamma'" in bad_stderr
  assert not (tmp_path / "not_written").exists()

  assert f"copied from the source: {len(values)}" in stdout  # every weight, heads too
  assert "new (freshly initialised): 0" in stdout
  assert sorted(os.listdir(out)) == sorted(
      [
          "model_config.json",
          "encoder",
          "pretrainer.index",
          "pretrainer.data-00000-of-00001",
          "pretrainer.weights.h5",
          "vocab.txt",
          "conversion_report.json",
      ]
  )
  assert (out / "encoder" / "vocab.txt").read_text(encoding="utf-8").split() == VOCAB

  # What pretraining's loaders read: the encoder export, and the heads for
  # --init_checkpoint=DIR/pretrainer.
  inputs = _inputs(rng)
  positions = np.array([[1, 5], [2, 3]], "int32")
  want = ref.numpy_bert(
      values,
      inputs["input_ids"],
      inputs["segment_ids"],
      inputs["input_mask"],
      A,
      approximate_gelu=True,
      masked_positions=positions,
  )
  encoder = saving.open_model(str(out)).load_encoder()
  assert encoder.config.hidden_act == "gelu_approximate"  # TF1's "gelu" is the tanh form
  got = encoder(inputs, training=False)
  real = inputs["input_mask"].astype(bool)
  np.testing.assert_allclose(
      got["sequence_output"].numpy()[real], want["sequence_output"][real], atol=1e-4, rtol=1e-4
  )
  pretrainer = Pretrainer(Encoder(encoder.config), use_nsp=True)
  saving.open_model(str(out / "pretrainer")).restore_pretrainer(pretrainer)
  got = pretrainer({**inputs, "masked_lm_positions": positions}, training=False)
  np.testing.assert_allclose(got["mlm_logits"], want["mlm_logits"], atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(got["nsp_logits"], want["nsp_logits"], atol=1e-4, rtol=1e-4)


@pytest.mark.slow(seconds=4)
def test_hf_warm_start_of_trans_blstm(rng, tmp_path):
  values = checkpoint_files.random_tf1_bert(rng, V, P, H, F, L)
  checkpoint_files.write_hf_checkpoint(
      str(tmp_path / "hf"),
      checkpoint_files.hf_bert_tensors(values),
      checkpoint_files.bert_config_json(V, P, H, F, L, A),
      VOCAB,
      do_lower_case=True,
  )
  target = get_preset("trans_blstm_1_tiny").replace(
      vocab_size=V,
      max_position_embeddings=P,
      hidden_size=H,
      intermediate_size=F,
      num_layers=L,
      num_heads=A,
  )
  target_file = tmp_path / "target.json"
  target_file.write_text(target.to_json(), encoding="utf-8")
  out = tmp_path / "warm"
  # On the command line: the tool defines its flags on import, so a test process that
  # imports another command (with its own --vocab_file, --output_dir ...) must not import it.
  stdout, stderr = _start_tool(
      "--source=hf",
      f"--input={tmp_path / 'hf'}",
      f"--output_dir={out}",
      f"--target_config={target_file}",
  ).communicate(timeout=300)
  assert "new (freshly initialised)" in stdout, stderr[-3000:]
  report = json.loads((out / "conversion_report.json").read_text())
  assert report["do_lower_case"] is True
  # Per block: 2 directions x (kernel, recurrent kernel, bias) + the projection (2).
  assert all("/blstm/" in p for p in report["new"]) and len(report["new"]) == L * 8
  assert all("/ffn/" in p for p in report["unused"]) and len(report["unused"]) == 4 * L
  assert "block_1/output_layer_norm/gamma" in report["copied"]

  encoder = saving.open_model(str(out)).load_encoder()
  assert encoder.config.mixer == "blstm" and encoder.config.hidden_act == "gelu"
  np.testing.assert_array_equal(
      encoder.blocks[1].attention.query.kernel.numpy(),
      values["bert/encoder/layer_1/attention/self/query/kernel"].reshape(H, A, H // A),
  )
  info = json.loads((out / "encoder" / "export_info.json").read_text())
  assert info["do_lower_case"] is True and info["source_kind"] == "hf"
