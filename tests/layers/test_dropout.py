"""The package's Dropout is Keras' Dropout to everything that saves or reads a model: its
layer names, config, seed-generator variable and, under TensorFlow, its masks."""

import keras
import numpy as np

from recurrent_bert.layers.dropout import Dropout


def test_names_config_and_variables_are_keras_dropouts():
  ours, theirs = Dropout(0.3, seed=5), keras.layers.Dropout(0.3, seed=5)
  assert ours.name.split("_")[0] == theirs.name.split("_")[0] == "dropout"
  drop_name = lambda config: {k: v for k, v in config.items() if k != "name"}
  assert drop_name(ours.get_config()) == drop_name(theirs.get_config())
  assert [v.name for v in ours.variables] == [v.name for v in theirs.variables]
  assert [v.path.split("/")[0].rstrip("_0123456789") for v in ours.variables] == ["seed_generator"]
  np.testing.assert_array_equal(ours.seed_generator.state, theirs.seed_generator.state)
  restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(ours))
  assert type(restored) is Dropout and restored.rate == 0.3


def test_tensorflow_draws_keras_masks():
  x = np.ones((64, 64), "float32")
  ours, theirs = Dropout(0.3, seed=5), keras.layers.Dropout(0.3, seed=5)
  for _ in range(2):
    np.testing.assert_array_equal(ours(x, training=True), theirs(x, training=True))
