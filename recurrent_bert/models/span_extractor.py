"""The span extractor (SQuAD): an `Encoder` with start/end logits per token."""

import keras

from recurrent_bert.layers import combined_width
from recurrent_bert.models.encoder import encoder_inputs
from recurrent_bert.models.head_inputs import read_encoder
from recurrent_bert.models.headed_model import HeadedModel
from recurrent_bert.models.heads import SpanHead


@keras.saving.register_keras_serializable(package="recurrent_bert")
class SpanExtractor(HeadedModel):
  """Encoder + span head (SQuAD), with the optional two-layer BLSTM decoder.

  Inputs: the encoder's three [B, T] inputs. Outputs: `start_logits`, `end_logits`
  [B, T] float32, padded positions at -1e9.

  Args:
    encoder: the `Encoder`.
    use_blstm_decoder: TRANS-BLSTM's "+ BLSTM decoder" head.
    layer_mix: which encoder layers the head reads (`models.head_inputs.read_encoder`).
  """

  def __init__(self, encoder, use_blstm_decoder=False, layer_mix="last", **kwargs):
    self._defer_attributes()
    c = encoder.config
    self.encoder = encoder
    self.use_blstm_decoder = use_blstm_decoder
    self.layer_mix = layer_mix
    self.head = SpanHead(
        combined_width(layer_mix, c.num_layers, c.hidden_size),
        use_blstm_decoder,
        c.initializer_range,
        c.blstm_implementation,
        name="span_head",
    )
    inputs = encoder_inputs()
    sequence, _ = read_encoder(self, encoder, inputs, layer_mix)
    outputs = self.head(sequence, inputs["input_mask"])
    self._init_functional(inputs=inputs, outputs=outputs, **kwargs)

  def _head_config(self):
    return {"use_blstm_decoder": self.use_blstm_decoder, "layer_mix": self.layer_mix}
