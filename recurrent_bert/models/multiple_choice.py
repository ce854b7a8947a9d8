"""The multiple-choice model (SWAG): each (context, ending) pair scored, softmaxed over choices."""

import keras
from keras import ops

from recurrent_bert.models.encoder import ENCODER_INPUT_NAMES
from recurrent_bert.models.head_inputs import read_encoder
from recurrent_bert.models.headed_model import HeadedModel
from recurrent_bert.models.heads import ClassificationHead


@keras.saving.register_keras_serializable(package="recurrent_bert")
class FlattenChoices(keras.layers.Layer):
  """[B, C, T] -> [B * C, T]: every choice becomes its own encoder row."""

  def call(self, x):
    return ops.reshape(x, (-1, ops.shape(x)[-1]))

  def compute_output_shape(self, input_shape):
    return (None, input_shape[-1])


@keras.saving.register_keras_serializable(package="recurrent_bert")
class UnflattenChoices(keras.layers.Layer):
  """Scores [B * C, 1] -> logits [B, C], with C read from the [B, C, T] input ids."""

  def call(self, scores, input_ids):
    return ops.reshape(scores, (-1, ops.shape(input_ids)[1]))

  def compute_output_shape(self, scores_shape, input_ids_shape):
    return (input_ids_shape[0], input_ids_shape[1])


@keras.saving.register_keras_serializable(package="recurrent_bert")
class MultipleChoice(HeadedModel):
  """Encoder + one vector on the pooled [CLS] of each choice (BERT §4.4).

  Each choice is packed as `[CLS] context [SEP] ending [SEP]`; the score of choice c is
  `v · pooled_c + b` and the choices are softmaxed together by the objective. C may differ
  from call to call (it is read from the inputs' shape).

  Inputs: the encoder's three inputs as [B, C, T] int32. Output: logits [B, C] float32.

  Args:
    encoder: the `Encoder`.
    dropout_rate: before the scoring vector; None = the encoder config's.
    layer_mix: which encoder layers are pooled (`models.head_inputs.read_encoder`).
  """

  def __init__(self, encoder, dropout_rate=None, layer_mix="last", **kwargs):
    self._defer_attributes()
    c = encoder.config
    self.encoder = encoder
    self.dropout_rate = c.dropout_rate if dropout_rate is None else dropout_rate
    self.layer_mix = layer_mix
    self.head = ClassificationHead(1, self.dropout_rate, c.initializer_range, name="choice_head")
    inputs = {
        name: keras.Input((None, None), dtype="int32", name=name) for name in ENCODER_INPUT_NAMES
    }
    flatten = FlattenChoices(name="flatten_choices")
    rows = {name: flatten(tensor) for name, tensor in inputs.items()}
    _, pooled = read_encoder(self, encoder, rows, layer_mix)  # [B * C, W]
    logits = UnflattenChoices(name="unflatten_choices")(self.head(pooled), inputs["input_ids"])
    self._init_functional(inputs=inputs, outputs=logits, **kwargs)

  def _head_config(self):
    return {"dropout_rate": self.dropout_rate, "layer_mix": self.layer_mix}
