"""The encoder (backbone): embeddings, L blocks, pooler. One place builds it from a config."""

import keras

from recurrent_bert.config import ModelConfig
from recurrent_bert.config import resolve_config
from recurrent_bert.layers import Embeddings
from recurrent_bert.layers import RelativePositionBias
from recurrent_bert.layers import TransformerBlock
from recurrent_bert.models.functional_subclass import FunctionalSubclass

ENCODER_INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")


def encoder_inputs():
  """Fresh symbolic inputs for a functional model: {name: int32 [B, T]} per input name."""
  return {name: keras.Input((None,), dtype="int32", name=name) for name in ENCODER_INPUT_NAMES}


@keras.saving.register_keras_serializable(package="recurrent_bert")
class Encoder(FunctionalSubclass):
  """A BERT-style encoder for every family of SPEC §5, built from a `ModelConfig`.

  Inputs (dict, int32, right-padded):
    input_ids:   [B, T] token ids.
    input_mask:  [B, T] 1 for real tokens, 0 for padding.
    segment_ids: [B, T] segment (token type) ids.
  Outputs (dict):
    sequence_output: [B, T, H], the last block's output.
    pooled_output:   [B, H], tanh(W h[CLS] + b).
    encoder_outputs: list of L tensors [B, T, H], every block's output (unused ones
      are pruned from a traced graph, so asking for them costs nothing otherwise).

  T may vary from call to call, up to `config.max_position_embeddings` when the model
  has absolute positions.
  """

  def __init__(self, config, **kwargs):
    self._defer_attributes()
    if isinstance(config, dict):
      config = ModelConfig.from_dict(config)
    c = config
    self.embeddings = Embeddings(
        c.vocab_size,
        c.hidden_size,
        c.max_position_embeddings,
        c.type_vocab_size,
        use_position_embedding=c.position_embedding == "absolute",
        dropout_rate=c.dropout_rate,
        layer_norm_epsilon=c.layer_norm_epsilon,
        initializer_range=c.initializer_range,
        name="embeddings",
    )

    def relative_bias(name):
      return RelativePositionBias(
          c.num_heads,
          c.relative_num_buckets,
          c.relative_max_distance,
          c.initializer_range,
          name=name,
      )

    uses_relative_bias = c.attention_bias == "relative"
    self.shared_relative_bias = (
        relative_bias("relative_attention_bias")
        if uses_relative_bias and c.relative_bias_shared
        else None
    )
    self.blocks = []
    self.block_relative_biases = []
    for i in range(c.num_layers):
      self.blocks.append(
          TransformerBlock(
              c.hidden_size,
              c.num_heads,
              c.intermediate_size,
              mixer=c.mixer,
              use_attention=c.use_attention,
              hidden_act=c.hidden_act,
              blstm_units=c.resolved_blstm_units,
              blstm_projection=c.blstm_projection,
              blstm_implementation=c.blstm_implementation,
              swish_rnn_size=c.resolved_swish_rnn_size,
              swish_rnn_step_size=c.swish_rnn_step_size(i),
              swish_rnn_residual=c.swish_rnn_residual,
              swish_rnn_gate=c.swish_rnn_gate,
              swish_rnn_direction=c.swish_rnn_direction,
              swish_rnn_implementation=c.swish_rnn_implementation,
              dropout_rate=c.dropout_rate,
              attention_dropout_rate=c.attention_dropout_rate,
              layer_norm_epsilon=c.layer_norm_epsilon,
              initializer_range=c.initializer_range,
              name=f"block_{i}",
          )
      )
      if uses_relative_bias and not c.relative_bias_shared:
        self.block_relative_biases.append(relative_bias(f"relative_attention_bias_{i}"))
    self.pooler = keras.layers.Dense(
        c.hidden_size,
        activation="tanh",
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=c.initializer_range),
        name="pooler",
    )

    inputs = encoder_inputs()
    x = self.embeddings(inputs["input_ids"], inputs["segment_ids"])
    shared_bias = self.shared_relative_bias(x) if self.shared_relative_bias else None
    encoder_outputs = []
    residual = block_input = None
    for i, block in enumerate(self.blocks):
      bias = self.block_relative_biases[i](x) if self.block_relative_biases else shared_bias
      # Each block but the last hands the next its output once per reader there: its
      # attention or branches, its residual sum, and a branch that reads X beside the
      # attention (`TransformerBlock`'s copies).
      copies = self.blocks[i + 1].input_copies if i + 1 < len(self.blocks) else 1
      y = block(
          x,
          inputs["input_mask"],
          bias,
          residual=residual,
          block_input=block_input,
          output_copies=copies,
      )
      x, residual, block_input = ([*y] if copies > 1 else [y]) + [None] * (3 - copies)
      encoder_outputs.append(x)
    pooled = self.pooler(x[:, 0, :])
    self._init_functional(
        inputs=inputs,
        outputs={"sequence_output": x, "pooled_output": pooled, "encoder_outputs": encoder_outputs},
        **kwargs,
    )
    self.config = config

  def call(self, inputs, training=None, mask=None):
    # Keras matches a dict with extra keys (e.g. a whole pretraining batch) to the inputs
    # by position, silently feeding one feature as another: select by name instead.
    if isinstance(inputs, dict):
      missing = [k for k in ENCODER_INPUT_NAMES if k not in inputs]
      if missing:
        raise ValueError(f"Encoder inputs lack {missing}; got keys {sorted(inputs)}")
      inputs = {k: inputs[k] for k in ENCODER_INPUT_NAMES}
    return super().call(inputs, training=training, mask=mask)

  @property
  def token_embeddings(self):
    """The [V, H] token embedding table (tied to the MLM output layer)."""
    return self.embeddings.token_embeddings

  def get_config(self):
    return {"name": self.name, "trainable": self.trainable, "config": self.config.to_dict()}

  @classmethod
  def from_config(cls, config):
    return cls(**config)


def build_encoder(config_or_preset):
  """The one place that turns a preset name, a JSON path or a ModelConfig into an Encoder.

  Args:
    config_or_preset: a `ModelConfig`, a preset name or the path of a config JSON file.

  Returns:
    A new `Encoder` with freshly initialised weights.
  """
  config = (
      config_or_preset
      if isinstance(config_or_preset, ModelConfig)
      else resolve_config(config_or_preset)
  )
  return Encoder(config)


def count_parameters(config):
  """Builds `Encoder(config)` without initialising its weights and counts them.

  Instant even for the large BLSTM presets, whose orthogonal LSTM initialisation takes
  tens of seconds. Returns (total, {top-level layer name: count}).
  """
  # Keras defers the initial values of variables created in a StatelessScope and
  # computes them all on exit; dropping that queue keeps counting free.
  # keras.src: no public API drops that queue (keras.backend.clear_session would also reset
  # every name counter and graph of the caller).
  from keras.src.backend.common import global_state

  with keras.StatelessScope():
    encoder = Encoder(config)
    by_layer = {layer.name: layer.count_params() for layer in encoder.layers if layer.weights}
    total = encoder.count_params()
    global_state.set_global_attribute("uninitialized_variables", [])
  return total, by_layer
