"""The sequence classifier (and regressor): an `Encoder` with a dense head on [CLS]."""

import keras

from recurrent_bert.models.encoder import encoder_inputs
from recurrent_bert.models.head_inputs import read_encoder
from recurrent_bert.models.headed_model import HeadedModel
from recurrent_bert.models.heads import ClassificationHead


@keras.saving.register_keras_serializable(package="recurrent_bert")
class Classifier(HeadedModel):
  """Encoder + dropout + dense K on the pooled output (K = 1: regression, e.g. STS-B).

  Inputs: the encoder's three [B, T] inputs. Output: logits [B, K] float32.

  Args:
    encoder: the `Encoder`.
    num_classes: K.
    dropout_rate: before the dense layer; None = the encoder config's.
    layer_mix: which encoder layers the head reads (`models.head_inputs.read_encoder`).
    feature_based: frozen encoder, 2-layer BiLSTM, masked mean (BERT Table 7's mode).
  """

  def __init__(
      self,
      encoder,
      num_classes,
      dropout_rate=None,
      layer_mix="last",
      feature_based=False,
      **kwargs,
  ):
    self._defer_attributes()
    c = encoder.config
    self.encoder = encoder
    self.num_classes = num_classes
    self.dropout_rate = c.dropout_rate if dropout_rate is None else dropout_rate
    self.layer_mix = layer_mix
    self.feature_based = feature_based
    self.head = ClassificationHead(
        num_classes, self.dropout_rate, c.initializer_range, name="classification_head"
    )
    inputs = encoder_inputs()
    _, pooled = read_encoder(self, encoder, inputs, layer_mix, feature_based)
    self._init_functional(inputs=inputs, outputs=self.head(pooled), **kwargs)

  def _head_config(self):
    return {
        "num_classes": self.num_classes,
        "dropout_rate": self.dropout_rate,
        "layer_mix": self.layer_mix,
        "feature_based": self.feature_based,
    }
