"""The span extractor (SQuAD): an `Encoder` with start/end logits per token."""

import keras

from recurrent_bert.models.encoder import encoder_inputs
from recurrent_bert.models.headed_model import HeadedModel
from recurrent_bert.models.heads import SpanHead


@keras.saving.register_keras_serializable(package="recurrent_bert")
class SpanExtractor(HeadedModel):
  """Encoder + span head (SQuAD), with the optional two-layer BLSTM decoder.

  Inputs: the encoder's three [B, T] inputs. Outputs: `start_logits`, `end_logits`
  [B, T] float32, padded positions at -1e9.
  """

  def __init__(self, encoder, use_blstm_decoder=False, **kwargs):
    c = encoder.config
    self.encoder = encoder
    self.use_blstm_decoder = use_blstm_decoder
    self.head = SpanHead(
        c.hidden_size,
        use_blstm_decoder,
        c.initializer_range,
        c.blstm_implementation,
        name="span_head",
    )
    inputs = encoder_inputs()
    outputs = self.head(encoder(inputs)["sequence_output"], inputs["input_mask"])
    super().__init__(inputs=inputs, outputs=outputs, **kwargs)

  def _head_config(self):
    return {"use_blstm_decoder": self.use_blstm_decoder}
