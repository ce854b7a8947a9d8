"""Which encoder layers a task head reads: one layer, a fixed sum or concatenation, or a mix.

BERT's feature-based NER (Table 7) compares these; `mix_all` is ELMo's learned scalar mix.
"""

import keras
from keras import ops

from recurrent_bert.config import LAYER_MIXES
from recurrent_bert.layers.scalar_mix import ScalarMix


def layers_read(layer_mix: str, num_layers: int) -> int:
  """How many of the last blocks `layer_mix` reads from an encoder of `num_layers`."""
  if layer_mix not in LAYER_MIXES:
    raise ValueError(f"layer_mix must be one of {', '.join(LAYER_MIXES)}; got {layer_mix!r}")
  if layer_mix == "last":
    return 1
  if layer_mix == "second_to_last":
    if num_layers < 2:
      raise ValueError("layer_mix=second_to_last needs an encoder of at least 2 blocks")
    return 2
  if layer_mix == "mix_all":
    return num_layers
  return min(4, num_layers)


def combined_width(layer_mix: str, num_layers: int, hidden_size: int) -> int:
  """Feature width of the combination: H, or kH for a concatenation of k blocks."""
  if layer_mix == "concat_last_four":
    return layers_read(layer_mix, num_layers) * hidden_size
  return hidden_size


@keras.saving.register_keras_serializable(package="recurrent_bert")
class LayerCombination(keras.layers.Layer):
  """Combines an encoder's per-block outputs into the one sequence a head reads.

  Inputs: the encoder's `encoder_outputs`, a list of L tensors [B, T, H].
  Output: [B, T, H], or [B, T, kH] for `concat_last_four` (k = min(4, L)).

  Args:
    layer_mix: one of LAYER_MIXES.
    num_layers: L, the encoder's blocks.
  """

  def __init__(self, layer_mix: str, num_layers: int, **kwargs):
    super().__init__(**kwargs)
    self.layer_mix = layer_mix
    self.num_layers = num_layers
    self.num_read = layers_read(layer_mix, num_layers)
    self.scalar_mix = (
        ScalarMix(self.num_read, name="scalar_mix") if layer_mix.startswith("mix_") else None
    )

  def build(self, input_shape):
    if self.scalar_mix is not None:
      self.scalar_mix.build(input_shape[-self.num_read :])
    self.built = True

  def call(self, encoder_outputs):
    read = list(encoder_outputs[-self.num_read :])
    if self.layer_mix in ("last", "second_to_last"):
      return read[0]
    if self.layer_mix == "sum_last_four":
      return ops.sum(ops.stack(read, axis=0), axis=0)
    if self.layer_mix == "concat_last_four":
      return ops.concatenate(read, axis=-1)
    return self.scalar_mix(read)

  def compute_output_shape(self, input_shape):
    shape = tuple(input_shape[-1])
    if self.layer_mix == "concat_last_four":
      width = None if shape[-1] is None else shape[-1] * self.num_read
      return shape[:-1] + (width,)
    return shape

  def get_config(self):
    return {**super().get_config(), "layer_mix": self.layer_mix, "num_layers": self.num_layers}
