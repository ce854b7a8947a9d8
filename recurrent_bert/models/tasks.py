"""Task models: an `Encoder` plus the heads a training objective needs.

Each is a functional Keras model that owns its encoder, so `get_config`/`from_config` and
`.keras` save/load rebuild the encoder and re-tie the MLM head to its embeddings.
"""

import keras

from recurrent_bert.config import ModelConfig
from recurrent_bert.config import resolve_config
from recurrent_bert.models.encoder import ENCODER_INPUT_NAMES
from recurrent_bert.models.encoder import Encoder
from recurrent_bert.models.heads import ClassificationHead
from recurrent_bert.models.heads import MaskedLMHead
from recurrent_bert.models.heads import SpanHead

def _encoder_inputs():
  return {name: keras.Input((None,), dtype="int32", name=name)
          for name in ENCODER_INPUT_NAMES}


class _TaskModel(keras.Model):
  """Shared (de)serialisation: the encoder is a nested Keras object, the rest kwargs."""

  def _task_config(self):
    raise NotImplementedError

  def get_config(self):
    return {"name": self.name, "trainable": self.trainable,
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            **self._task_config()}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
    return cls(**config)


@keras.saving.register_keras_serializable(package="recurrent_bert")
class Pretrainer(_TaskModel):
  """Encoder + masked LM head (+ next-sentence head when `use_nsp`).

  Inputs: the encoder's three [B, T] inputs and `masked_lm_positions` int [B, P].
  Outputs: `mlm_logits` [B, P, V] and, with NSP, `nsp_logits` [B, 2] (float32).
  """

  def __init__(self, encoder, use_nsp=True, **kwargs):
    c = encoder.config
    self.encoder = encoder
    self.use_nsp = use_nsp
    self.mlm_head = MaskedLMHead(encoder.embeddings, c.hidden_act, c.layer_norm_epsilon,
                                 c.initializer_range, name="mlm_head")
    self.nsp_head = (ClassificationHead(2, 0.0, c.initializer_range, name="nsp_head")
                     if use_nsp else None)
    inputs = _encoder_inputs()
    inputs["masked_lm_positions"] = keras.Input((None,), dtype="int32",
                                                name="masked_lm_positions")
    encoded = encoder(inputs)
    outputs = {"mlm_logits": self.mlm_head(encoded["sequence_output"],
                                           inputs["masked_lm_positions"])}
    if use_nsp:
      outputs["nsp_logits"] = self.nsp_head(encoded["pooled_output"])
    super().__init__(inputs=inputs, outputs=outputs, **kwargs)

  def _task_config(self):
    return {"use_nsp": self.use_nsp}


@keras.saving.register_keras_serializable(package="recurrent_bert")
class Classifier(_TaskModel):
  """Encoder + dropout + dense K on the pooled output (K = 1: regression, e.g. STS-B).

  Inputs: the encoder's three [B, T] inputs. Output: logits [B, K] float32.
  """

  def __init__(self, encoder, num_classes, dropout_rate=None, **kwargs):
    c = encoder.config
    self.encoder = encoder
    self.num_classes = num_classes
    self.dropout_rate = c.dropout_rate if dropout_rate is None else dropout_rate
    self.head = ClassificationHead(num_classes, self.dropout_rate, c.initializer_range,
                                   name="classification_head")
    inputs = _encoder_inputs()
    logits = self.head(encoder(inputs)["pooled_output"])
    super().__init__(inputs=inputs, outputs=logits, **kwargs)

  def _task_config(self):
    return {"num_classes": self.num_classes, "dropout_rate": self.dropout_rate}


@keras.saving.register_keras_serializable(package="recurrent_bert")
class SpanExtractor(_TaskModel):
  """Encoder + span head (SQuAD), with the optional two-layer BLSTM decoder.

  Inputs: the encoder's three [B, T] inputs. Outputs: `start_logits`, `end_logits`
  [B, T] float32, padded positions at -1e9.
  """

  def __init__(self, encoder, use_blstm_decoder=False, **kwargs):
    c = encoder.config
    self.encoder = encoder
    self.use_blstm_decoder = use_blstm_decoder
    self.head = SpanHead(c.hidden_size, use_blstm_decoder, c.initializer_range,
                         c.blstm_implementation, name="span_head")
    inputs = _encoder_inputs()
    outputs = self.head(encoder(inputs)["sequence_output"], inputs["input_mask"])
    super().__init__(inputs=inputs, outputs=outputs, **kwargs)

  def _task_config(self):
    return {"use_blstm_decoder": self.use_blstm_decoder}


def build_encoder(config_or_preset):
  """The one place that turns a preset name, a JSON path or a ModelConfig into a model."""
  config = (config_or_preset if isinstance(config_or_preset, ModelConfig)
            else resolve_config(config_or_preset))
  return Encoder(config)
