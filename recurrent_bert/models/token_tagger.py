"""The token tagger (CoNLL-2003 NER): an `Encoder` with a label distribution per token."""

import keras

from recurrent_bert.models.encoder import encoder_inputs
from recurrent_bert.models.head_inputs import read_encoder
from recurrent_bert.models.headed_model import HeadedModel
from recurrent_bert.models.heads import ClassificationHead


@keras.saving.register_keras_serializable(package="recurrent_bert")
class TokenTagger(HeadedModel):
  """Encoder + dropout + dense K at every position (BERT §5.3, Figure 4d).

  Fine-tuned (the default) or feature-based (`feature_based`: the encoder frozen, a 2-layer
  BiLSTM over the chosen layers, BERT Table 7). Which positions are scored is the task's
  business (the first piece of each word); the model scores all of them.

  Inputs: the encoder's three [B, T] inputs. Output: logits [B, T, K] float32.

  Args:
    encoder: the `Encoder`.
    num_labels: K, the tag set's size.
    dropout_rate: before the dense layer; None = the encoder config's.
    layer_mix: which encoder layers the head reads (`models.head_inputs.read_encoder`).
    feature_based: freeze the encoder and read its layers through a 2-layer BiLSTM.
  """

  def __init__(
      self,
      encoder,
      num_labels,
      dropout_rate=None,
      layer_mix="last",
      feature_based=False,
      **kwargs,
  ):
    self._defer_attributes()
    c = encoder.config
    self.encoder = encoder
    self.num_labels = num_labels
    self.dropout_rate = c.dropout_rate if dropout_rate is None else dropout_rate
    self.layer_mix = layer_mix
    self.feature_based = feature_based
    self.head = ClassificationHead(
        num_labels, self.dropout_rate, c.initializer_range, name="tagging_head"
    )
    inputs = encoder_inputs()
    sequence, _ = read_encoder(self, encoder, inputs, layer_mix, feature_based)
    self._init_functional(inputs=inputs, outputs=self.head(sequence), **kwargs)

  def _head_config(self):
    return {
        "num_labels": self.num_labels,
        "dropout_rate": self.dropout_rate,
        "layer_mix": self.layer_mix,
        "feature_based": self.feature_based,
    }
