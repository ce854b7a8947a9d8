"""The sequence classifier (and regressor): an `Encoder` with a dense head on [CLS]."""

import keras

from recurrent_bert.models.encoder import encoder_inputs
from recurrent_bert.models.headed_model import HeadedModel
from recurrent_bert.models.heads import ClassificationHead


@keras.saving.register_keras_serializable(package="recurrent_bert")
class Classifier(HeadedModel):
  """Encoder + dropout + dense K on the pooled output (K = 1: regression, e.g. STS-B).

  Inputs: the encoder's three [B, T] inputs. Output: logits [B, K] float32.
  """

  def __init__(self, encoder, num_classes, dropout_rate=None, **kwargs):
    c = encoder.config
    self.encoder = encoder
    self.num_classes = num_classes
    self.dropout_rate = c.dropout_rate if dropout_rate is None else dropout_rate
    self.head = ClassificationHead(
        num_classes, self.dropout_rate, c.initializer_range, name="classification_head"
    )
    inputs = encoder_inputs()
    logits = self.head(encoder(inputs)["pooled_output"])
    super().__init__(inputs=inputs, outputs=logits, **kwargs)

  def _head_config(self):
    return {"num_classes": self.num_classes, "dropout_rate": self.dropout_rate}
