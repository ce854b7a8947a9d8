"""What a task head reads from the encoder: the last layer, a combination of layers
(`--layer_mix`), or frozen features through a BiLSTM (`--feature_based`, BERT Table 7).

One function builds this part of every task model's graph, so the classifier, tagger,
span extractor and multiple-choice model offer the same choices.
"""

import keras

from recurrent_bert.layers import LayerCombination
from recurrent_bert.layers import combined_width
from recurrent_bert.models.heads import FeatureBiLSTM


class FrozenEncoder(keras.layers.Layer):
  """Calls an encoder in inference mode whatever the caller's `training`.

  A functional model passes its own `training` to every layer of its graph, overriding
  one given when the graph was built; a call inside a layer keeps it. Not serialised: the
  model that owns it rebuilds it from its `feature_based` argument.

  Inputs and outputs: the encoder's.
  """

  def __init__(self, encoder, **kwargs):
    super().__init__(**kwargs)
    self.encoder = encoder

  def call(self, inputs):
    return self.encoder(inputs, training=False)

  def compute_output_spec(self, inputs):
    # The encoder's own symbolic pass: tracing `call` under JAX or PyTorch would run the
    # encoder on a symbolic T, which the position slice cannot match.
    return self.encoder.compute_output_spec(inputs)


def read_encoder(model, encoder, inputs, layer_mix="last", feature_based=False):
  """Calls `encoder` on `inputs` inside `model`'s functional graph; returns what heads read.

  With the defaults (the last layer, fine-tuned) the graph and the variables are exactly
  those of a plain encoder + head model, so older checkpoints load unchanged.

  Args:
    model: the task model being built; the layers made here become its attributes
      (`layer_combination`, `feature_bilstm`).
    encoder: the `Encoder`. `feature_based` freezes it (its weights never move) and runs it
      in inference mode (no dropout): its outputs are fixed features.
    inputs: the encoder's three [B, T] int32 inputs.
    layer_mix: one of `layers.LAYER_MIXES`.
    feature_based: read frozen features through a 2-layer BiLSTM of H/2 cells per direction.

  Returns:
    (sequence [B, T, W], pooled [B, W]): W = H except for concat_last_four without the
    BiLSTM (kH). pooled is the encoder's pooler (tanh dense on [CLS]) applied to the
    combined [CLS] vector when W = H, the combined [CLS] vector itself when W = kH, and
    the masked mean of the BiLSTM's outputs in the feature-based mode.
  """
  config = encoder.config
  if feature_based:
    encoder.trainable = False
    model.frozen_encoder = FrozenEncoder(encoder, name="frozen_encoder")
    encoded = model.frozen_encoder(inputs)
  else:
    encoded = encoder(inputs)
  if layer_mix == "last" and not feature_based:
    return encoded["sequence_output"], encoded["pooled_output"]
  model.layer_combination = LayerCombination(layer_mix, config.num_layers, name="layer_combination")
  sequence = model.layer_combination(encoded["encoder_outputs"])
  if feature_based:
    model.feature_bilstm = FeatureBiLSTM(
        config.hidden_size // 2,
        initializer_range=config.initializer_range,
        implementation=config.blstm_implementation,
        name="feature_bilstm",
    )
    sequence = model.feature_bilstm(sequence, inputs["input_mask"])
    pooled = keras.layers.GlobalAveragePooling1D(name="masked_mean")(
        sequence, mask=keras.ops.cast(inputs["input_mask"], "bool")
    )
    return sequence, pooled
  if combined_width(layer_mix, config.num_layers, config.hidden_size) == config.hidden_size:
    return sequence, encoder.pooler(sequence[:, 0, :])
  return sequence, sequence[:, 0, :]
