"""The base of the models that put heads on an `Encoder` (pretraining, classification, span).

Each subclass is a functional Keras model that owns its encoder, so `get_config`/`from_config`
and `.keras` save/load rebuild the encoder and, for the MLM head, re-tie it to the embeddings.
"""

import keras

from recurrent_bert.models.functional_subclass import FunctionalSubclass


class HeadedModel(FunctionalSubclass):
  """Shared (de)serialisation: the encoder is a nested Keras object, the rest kwargs.

  Subclasses set `self.encoder` and their heads before building the functional graph
  (`FunctionalSubclass`: `_defer_attributes` first, `_init_functional` last), and
  return their own constructor arguments (all but `encoder`) from `_head_config`.
  """

  def _head_config(self):
    raise NotImplementedError

  def get_config(self):
    return {
        "name": self.name,
        "trainable": self.trainable,
        "encoder": keras.saving.serialize_keras_object(self.encoder),
        **self._head_config(),
    }

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
    return cls(**config)
