"""The pretraining model: an `Encoder` with the masked LM head and the optional NSP head."""

import keras

from recurrent_bert.models.encoder import encoder_inputs
from recurrent_bert.models.headed_model import HeadedModel
from recurrent_bert.models.heads import ClassificationHead
from recurrent_bert.models.heads import MaskedLMHead


@keras.saving.register_keras_serializable(package="recurrent_bert")
class Pretrainer(HeadedModel):
  """Encoder + masked LM head (+ next-sentence head when `use_nsp`).

  Inputs: the encoder's three [B, T] inputs and `masked_lm_positions` int [B, P].
  Outputs: `mlm_logits` [B, P, V] and, with NSP, `nsp_logits` [B, 2] (float32).
  """

  def __init__(self, encoder, use_nsp=True, **kwargs):
    self._defer_attributes()
    c = encoder.config
    self.encoder = encoder
    self.use_nsp = use_nsp
    self.mlm_head = MaskedLMHead(
        encoder.embeddings, c.hidden_act, c.layer_norm_epsilon, c.initializer_range, name="mlm_head"
    )
    self.nsp_head = (
        ClassificationHead(2, 0.0, c.initializer_range, name="nsp_head") if use_nsp else None
    )
    inputs = encoder_inputs()
    inputs["masked_lm_positions"] = keras.Input((None,), dtype="int32", name="masked_lm_positions")
    encoded = encoder(inputs)
    outputs = {
        "mlm_logits": self.mlm_head(encoded["sequence_output"], inputs["masked_lm_positions"])
    }
    if use_nsp:
      outputs["nsp_logits"] = self.nsp_head(encoded["pooled_output"])
    self._init_functional(inputs=inputs, outputs=outputs, **kwargs)

  def _head_config(self):
    return {"use_nsp": self.use_nsp}
