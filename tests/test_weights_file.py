"""The portable weights file (weights_file.py) under TensorFlow: what the export writes is the
TensorFlow checkpoint's values, it loads back to the same outputs, and bad files are one line.

The cross-backend half (a TensorFlow-written dir loaded under JAX / PyTorch) is in
tests/backends/test_weights_portable.py.
"""

import os

import h5py
import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert import model_dir as layout
from recurrent_bert import models
from recurrent_bert import saving
from recurrent_bert import weights_file
from recurrent_bert.config import get_preset
from recurrent_bert.errors import InputError
from recurrent_bert.saving.stores import CheckpointStore

SMALL = dict(
    vocab_size=60,
    num_layers=1,
    hidden_size=32,
    num_heads=2,
    intermediate_size=64,
    max_position_embeddings=16,
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
)


def small_encoder(family="bert", **changes):
  return models.build_encoder(get_preset(f"{family}_tiny").replace(**{**SMALL, **changes}))


def padded_batch(rng):
  mask = np.ones((3, 8), "int32")
  mask[1, 5:] = 0
  mask[2, 2:] = 0
  return {
      "input_ids": rng.integers(5, SMALL["vocab_size"], (3, 8)).astype("int32"),
      "input_mask": mask,
      "segment_ids": (np.arange(8)[None, :] >= 4).astype("int32").repeat(3, 0),
  }


def encode(encoder, batch):
  outputs = encoder(batch, training=False)
  return {k: np.asarray(outputs[k]) for k in ("sequence_output", "pooled_output")}


def tf_checkpoint_values(prefix, root):
  """{variable path: value} of a tf.train.Checkpoint(root={path: variable}), read by
  TensorFlow's own reader: object names escape "." as ".." and "/" as ".S"."""
  reader = tf.train.load_checkpoint(prefix)
  values = {}
  for key in reader.get_variable_to_shape_map():
    head, _, rest = key.partition("/")
    if head != root or not rest.endswith("/.ATTRIBUTES/VARIABLE_VALUE"):
      continue
    escaped = rest[: -len("/.ATTRIBUTES/VARIABLE_VALUE")]
    path = escaped.replace(".S", "/").replace("..", ".")
    values[path] = reader.get_tensor(key)
  return values


def h5_values(path):
  """{dataset path under /weights: value}, read with h5py alone."""
  found = {}
  with h5py.File(path, "r") as f:
    f["weights"].visititems(
        lambda name, item: found.__setitem__(name, item[()])
        if isinstance(item, h5py.Dataset)
        else None
    )
  return found


def test_the_export_writes_the_tf_checkpoints_values_by_path(tmp_path):
  encoder = small_encoder("bert_rab")
  export = saving.export_encoder(encoder, str(tmp_path), with_tf_checkpoint=True)
  expected = tf_checkpoint_values(os.path.join(export, layout.EXPORT_PREFIX), "encoder")
  stored = h5_values(os.path.join(export, layout.EXPORT_WEIGHTS_FILE))
  assert sorted(stored) == sorted(expected) and len(stored) == len(encoder.weights)
  for path, value in expected.items():
    np.testing.assert_array_equal(stored[path], value, err_msg=path)
  attributes = weights_file.read_attributes(os.path.join(export, layout.EXPORT_WEIGHTS_FILE))
  assert attributes["model"] == "Encoder"
  assert attributes["model_config"] == encoder.config.to_json()


def test_every_form_of_a_model_dir_loads_the_encoder_the_tf_checkpoint_holds(tmp_path, rng):
  encoder = small_encoder()
  saving.export_encoder(encoder, str(tmp_path), with_tf_checkpoint=True)
  batch = padded_batch(rng)
  export = tmp_path / layout.EXPORT_DIR
  # The reference: the TensorFlow checkpoint beside the weights file, read by path.
  from_checkpoint = small_encoder()
  weights_file.assign(from_checkpoint, CheckpointStore(str(export / layout.EXPORT_PREFIX)))
  want = encode(from_checkpoint, batch)
  for path in (tmp_path, export, export / layout.EXPORT_WEIGHTS_FILE):
    got = encode(saving.open_model(str(path)).load_encoder(), batch)
    for name in want:
      np.testing.assert_array_equal(got[name], want[name], err_msg=f"{path}: {name}")


def test_a_task_models_file_loads_whole_and_gives_its_encoder(tmp_path, rng):
  """best/model.weights.h5: the whole Classifier (heads included) and its encoder alone."""
  classifier = models.Classifier(small_encoder(num_layers=2), num_classes=3, layer_mix="mix_all")
  best = tmp_path / layout.BEST_DIR
  saving.write_model_weights(classifier, str(best))
  saving.write_model_config(str(best), classifier.encoder.config)
  task = layout.TaskInfo(task="custom", kind="classifier", label_names=("a", "b", "c"))
  for directory in (tmp_path, best):  # a fine-tuning run writes it to both
    (directory / layout.TASK_INFO_FILE).write_text(task.to_json(), encoding="utf-8")
  batch = padded_batch(rng)

  fresh = models.Classifier(small_encoder(num_layers=2), num_classes=3, layer_mix="mix_all")
  weights_file.load_weights(fresh, str(best / layout.MODEL_WEIGHTS_FILE))
  np.testing.assert_array_equal(
      np.asarray(fresh(batch, training=False)), np.asarray(classifier(batch, training=False))
  )
  for path in (tmp_path, best):  # a fine-tuning model_dir and its best/
    encoder = saving.open_model(str(path)).load_encoder()
    want = encode(classifier.encoder, batch)
    got = encode(encoder, batch)
    for name in want:
      np.testing.assert_array_equal(got[name], want[name], err_msg=f"{path}: {name}")
  # Without encoder_only, the heads are variables the bare encoder lacks.
  with pytest.raises(InputError, match=r"'classification_head/.*' .* is not in the Encoder"):
    weights_file.load_weights(small_encoder(num_layers=2), str(best / layout.MODEL_WEIGHTS_FILE))


def one_line_error(function, *args, **kwargs) -> str:
  with pytest.raises(InputError) as caught:
    function(*args, **kwargs)
  message = str(caught.value)
  assert "\n" not in message
  return message


def test_a_file_of_another_model_names_the_first_mismatched_variable(tmp_path):
  path = str(tmp_path / "bert.weights.h5")
  weights_file.save_weights(small_encoder(), path)

  wider = small_encoder(hidden_size=48, intermediate_size=96)
  before = [np.asarray(v) for v in wider.weights]
  message = one_line_error(weights_file.load_weights, wider, path)
  assert message.startswith(path + ": variable 'embeddings/")
  assert "(16, 32) in the file but (16, 48)" in message or "(60, 32) in the file but (60, 48)" in (
      message
  )
  # Nothing was assigned.
  for variable, value in zip(wider.weights, before):
    np.testing.assert_array_equal(np.asarray(variable), value)

  message = one_line_error(weights_file.load_weights, small_encoder(num_layers=2), path)
  assert message.startswith(path + ": variable 'block_1/") and "is not in the file" in message

  message = one_line_error(weights_file.load_weights, small_encoder("bert_rab"), path)
  assert "'relative_attention_bias/" in message and "is not in the file" in message

  deeper = str(tmp_path / "deeper.weights.h5")
  weights_file.save_weights(small_encoder(num_layers=2), deeper)
  message = one_line_error(saving.open_model(deeper).load_encoder, small_encoder().config)
  assert message.startswith(deeper + ": variable 'block_1/") and "not in the Encoder" in message


def test_a_file_that_is_not_a_weights_file_is_named(tmp_path):
  text = tmp_path / "encoder.weights.h5"
  text.write_text("not hdf5\n")
  message = one_line_error(weights_file.load_weights, small_encoder(), str(text))
  assert message.startswith(f"{text}: not an HDF5 weights file")

  other = tmp_path / "other.h5"
  with h5py.File(other, "w") as f:
    f.create_dataset("x", data=np.zeros(3))
  message = one_line_error(lambda: saving.open_model(str(other)).load_encoder())
  assert message.startswith(f"{other}: an HDF5 file without a 'weights' group")

  empty = tmp_path / "empty"
  empty.mkdir()
  message = one_line_error(saving.open_model, str(empty))
  assert message.startswith(f"{str(empty)!r} is a directory without checkpoints; a model is")
  missing = tmp_path / "nowhere"
  message = one_line_error(saving.open_model, str(missing))
  assert message.startswith(f"{str(missing)!r} is not a file or directory; a model is")


def test_a_failed_write_leaves_the_previous_file_and_no_leftovers(tmp_path, rng):
  import keras

  path = tmp_path / "model.weights.h5"
  encoder = small_encoder()
  weights_file.save_weights(encoder, str(path))
  before = path.read_bytes()

  class Clashing(keras.layers.Layer):
    """Two weights under one path: found only once the file is being written."""

    def build(self, _):
      self.a = self.add_weight(shape=(2,), name="w")
      self.b = self.add_weight(shape=(3,), name="w")

  layer = Clashing(name="clash")
  layer.build(None)
  with pytest.raises(ValueError, match="not unique"):
    weights_file.save_weights(layer, str(path))
  assert path.read_bytes() == before
  assert sorted(os.listdir(tmp_path)) == ["model.weights.h5"]


def test_a_path_with_a_scheme_round_trips(rng):
  """gs:// and other TensorFlow file systems: written through a local copy, read as a stream."""
  path = "ram://weights_file_test/encoder.weights.h5"
  encoder = small_encoder()
  weights_file.save_weights(encoder, path)
  fresh = small_encoder()
  weights_file.load_weights(fresh, path)
  batch = padded_batch(rng)
  np.testing.assert_array_equal(
      encode(fresh, batch)["pooled_output"], encode(encoder, batch)["pooled_output"]
  )
