"""A model dir written by the TensorFlow pretrain command loads under this session's backend.

The real commands run in TensorFlow processes (the data tool, then `recurrent_bert.pretrain`
for two steps, which exports encoder/); a third TensorFlow process reads the encoder back
through its TensorFlow training checkpoint and encodes a padded batch.
A process of this session's backend that cannot import TensorFlow reads the same dir through
its encoder.weights.h5 alone, and must encode the batch to the same outputs.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from recurrent_bert import model_dir as layout
from recurrent_bert import saving
from recurrent_bert.config import get_preset
from recurrent_bert.data import builtin_corpus
from recurrent_bert.errors import InputError
from tests.backends.support import BACKEND
from tests.backends.support import REPO
from tests.backends.support import backend_env
from tests.backends.support import run_under_backend
from tests.data.conftest import vocab_from_text
from tests.data.conftest import write_vocab

SEQ_LEN = 32
# bert_tiny cut to one block, 32 wide: the load path is the same at any size.
CONFIG = get_preset("bert_tiny").replace(
    num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64, max_position_embeddings=64
)


def run_tensorflow_command(*args):
  result = subprocess.run(
      [sys.executable, "-m", *args],
      cwd=REPO,
      env=backend_env("tensorflow"),
      capture_output=True,
      text=True,
      timeout=300,
  )
  assert result.returncode == 0, f"{args[0]} failed:\n{result.stderr[-4000:]}"


@pytest.fixture(scope="module")
def pretrained_dir(tmp_path_factory):
  """A pretraining model_dir written by the TensorFlow pretrain command (2 steps)."""
  folder = tmp_path_factory.mktemp("pretrained")
  corpus = str(folder / "corpus.txt")
  builtin_corpus.write_corpus(corpus, max_bytes=40_000)
  with open(corpus, encoding="utf-8") as f:
    vocab = write_vocab(folder / "vocab.txt", vocab_from_text(f.read(), num_words=400))
  config = folder / "config.json"
  config.write_text(CONFIG.to_json())
  run_tensorflow_command(
      "recurrent_bert.tools.create_pretraining_data",
      f"--input_files={corpus}",
      f"--vocab_file={vocab}",
      f"--output_dir={folder / 'records'}",
      f"--max_seq_length={SEQ_LEN}",
      "--max_predictions_per_seq=5",
      "--dupe_factor=1",
      "--num_output_shards=1",
      "--noprogress",
  )
  model_dir = folder / "model"
  run_tensorflow_command(
      "recurrent_bert.pretrain",
      f"--model_dir={model_dir}",
      f"--vocab_file={vocab}",
      f"--input_files={folder / 'records' / '*.tfrecord'}",
      f"--model_config={config}",
      f"--max_seq_length={SEQ_LEN}",
      "--max_predictions_per_seq=5",
      "--train_batch_size=4",
      "--num_train_steps=2",
      "--warmup_steps=1",
      "--learning_rate=1e-2",
      "--steps_per_loop=1",
      "--save_checkpoints_steps=2",
      "--shuffle_buffer_size=10",
  )
  return str(model_dir)


def padded_batch():
  rng = np.random.default_rng(0)
  mask = np.ones((3, 12), "int32")
  mask[1, 7:] = 0
  mask[2, 3:] = 0
  return {
      "input_ids": rng.integers(5, 400, (3, 12)).astype("int32") * mask,
      "input_mask": mask,
      "segment_ids": (np.arange(12)[None, :] >= 6).astype("int32").repeat(3, 0) * mask,
  }


ENCODE = """
from keras.ops import convert_to_numpy
from recurrent_bert import saving
from recurrent_bert.saving.stores import CheckpointStore
from recurrent_bert.weights_file import assign
stored = saving.open_model({model_dir!r})
encoder = stored.load_encoder()
if {from_checkpoint}:  # the TensorFlow checkpoint itself, not the export of its step
  assign(encoder, CheckpointStore(stored.weights), encoder_only=True)
out = encoder({{k: inputs[k] for k in ("input_ids", "input_mask", "segment_ids")}}, training=False)
outputs["sequence"] = convert_to_numpy(out["sequence_output"])
outputs["pooled"] = convert_to_numpy(out["pooled_output"])
outputs["pooler_kernel"] = convert_to_numpy(encoder.pooler.kernel)
"""


def test_a_tensorflow_pretrained_dir_encodes_alike_without_tensorflow(pretrained_dir):
  assert os.path.isfile(os.path.join(pretrained_dir, layout.EXPORT_DIR, layout.EXPORT_WEIGHTS_FILE))
  batch = padded_batch()
  # TensorFlow's own reader of the dir: the TensorFlow checkpoint, not the weights file.
  want = run_under_backend(ENCODE.format(from_checkpoint=True, model_dir=pretrained_dir), **batch)
  # This backend, in a process where importing TensorFlow fails.
  got = run_under_backend(
      "import sys\nsys.modules['tensorflow'] = None\n"
      + ENCODE.format(from_checkpoint=False, model_dir=pretrained_dir),
      backend=BACKEND,
      **batch,
  )
  real = batch["input_mask"].astype(bool)
  # Padded positions hold whatever each backend leaves there; nothing reads them.
  np.testing.assert_allclose(got["sequence"][real], want["sequence"][real], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got["pooled"], want["pooled"], rtol=1e-5, atol=1e-5)
  # The stored values themselves are the checkpoint's, bit for bit.
  np.testing.assert_array_equal(got["pooler_kernel"], want["pooler_kernel"])


def test_an_encoder_of_another_size_is_refused_naming_the_variable(pretrained_dir):
  wider = CONFIG.replace(hidden_size=48, intermediate_size=96)
  with pytest.raises(InputError) as caught:
    saving.open_model(pretrained_dir).load_encoder(wider)
  weights = os.path.join(pretrained_dir, layout.EXPORT_DIR, layout.EXPORT_WEIGHTS_FILE)
  assert str(caught.value) == (
      f"{weights}: variable 'embeddings/position_embeddings' has shape (64, 32) in the file "
      "but (64, 48) in the Encoder (a model of another size?)"
  )


PRESET_ENCODE = """
import keras_hub
from keras.ops import convert_to_numpy
import recurrent_bert.convert.keras_hub_preset  # registers the backbone with Keras
backbone = keras_hub.models.Backbone.from_preset({preset!r})
out = backbone(
    {{"token_ids": inputs["input_ids"], "padding_mask": inputs["input_mask"],
      "segment_ids": inputs["segment_ids"]}},
    training=False,
)
outputs["sequence"] = convert_to_numpy(out["sequence_output"])
outputs["pooled"] = convert_to_numpy(out["pooled_output"])
outputs["backbone"] = type(backbone).__name__
"""


def test_a_keras_hub_preset_exported_under_tensorflow_loads_under_this_backend(
    pretrained_dir, tmp_path
):
  """keras-hub's own loader, on this backend, rebuilds what the TensorFlow export wrote."""
  preset = tmp_path / "preset"
  run_tensorflow_command(
      "recurrent_bert.tools.convert_checkpoint",
      "--direction=export",
      "--target=keras_hub",
      f"--input={pretrained_dir}",
      f"--output_dir={preset}",
  )
  batch = padded_batch()
  want = run_under_backend(ENCODE.format(from_checkpoint=True, model_dir=pretrained_dir), **batch)
  got = run_under_backend(PRESET_ENCODE.format(preset=str(preset)), BACKEND, **batch)
  assert str(got["backbone"]) == "RecurrentBertBackbone"
  real = batch["input_mask"].astype(bool)
  np.testing.assert_allclose(got["sequence"][real], want["sequence"][real], atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(got["pooled"], want["pooled"], atol=1e-5, rtol=1e-5)
