"""One post-LayerNorm encoder block with a pluggable second sublayer (SPEC §2-3)."""

import keras

from recurrent_bert.config import MIXERS
from recurrent_bert.layers.attention import SelfAttention
from recurrent_bert.layers.blstm import BidirectionalLSTM
from recurrent_bert.layers.dropout import Dropout
from recurrent_bert.layers.feedforward import FeedForward
from recurrent_bert.layers.layer_norm import LayerNormalization
from recurrent_bert.layers.swish_rnn import SwishRNN


@keras.saving.register_keras_serializable(package="recurrent_bert")
class TransformerBlock(keras.layers.Layer):
  """`Xbar = LN(X + Drop(Att(X)))`, then `Y = LN(Xbar + sum of Drop(branch(input)))`.

  The mixer picks the branches of the second sublayer and what each reads:

    ffn             FFN(Xbar)                              BERT
    blstm           BLSTM(Xbar)                            TRANS-BLSTM-1
    parallel_blstm  FFN(Xbar) + BLSTM(X)                   TRANS-BLSTM-2
    swishrnn        SwishRNN(Xbar)                         SwishRNN-BERT

  With `use_attention=False` there is no attention sublayer (Xbar = X): with the
  `blstm` mixer that is the block of the BLSTM-only encoder, `LN(X + Drop(BLSTM(X)))`.

  Inputs: x [B, T, H]; attention_mask [B, T] (1 real, 0 padding); attention_bias
  optional [1 or B, A, T, T]. Output: [B, T, H].

  Args:
    blstm_units: u per direction; `blstm_projection` adds the 2u -> H dense layer;
      `blstm_implementation` see `BidirectionalLSTM`.
    swish_rnn_*: see `SwishRNN`.
  """

  def __init__(
      self,
      hidden_size,
      num_heads,
      intermediate_size,
      mixer="ffn",
      use_attention=True,
      hidden_act="gelu",
      blstm_units=None,
      blstm_projection=True,
      blstm_implementation="auto",
      swish_rnn_size=None,
      swish_rnn_step_size=1,
      swish_rnn_residual="x1",
      swish_rnn_gate="gelu",
      swish_rnn_direction="forward",
      swish_rnn_implementation="auto",
      dropout_rate=0.1,
      attention_dropout_rate=0.1,
      layer_norm_epsilon=1e-12,
      initializer_range=0.02,
      **kwargs,
  ):
    super().__init__(**kwargs)
    if mixer not in MIXERS:
      raise ValueError(f"mixer must be one of {MIXERS}, got {mixer!r}")
    self._config = dict(
        hidden_size=hidden_size,
        num_heads=num_heads,
        intermediate_size=intermediate_size,
        mixer=mixer,
        use_attention=use_attention,
        hidden_act=hidden_act,
        blstm_units=blstm_units,
        blstm_projection=blstm_projection,
        blstm_implementation=blstm_implementation,
        swish_rnn_size=swish_rnn_size,
        swish_rnn_step_size=swish_rnn_step_size,
        swish_rnn_residual=swish_rnn_residual,
        swish_rnn_gate=swish_rnn_gate,
        swish_rnn_direction=swish_rnn_direction,
        swish_rnn_implementation=swish_rnn_implementation,
        dropout_rate=dropout_rate,
        attention_dropout_rate=attention_dropout_rate,
        layer_norm_epsilon=layer_norm_epsilon,
        initializer_range=initializer_range,
    )
    self.hidden_size = hidden_size
    self.mixer = mixer
    self.use_attention = use_attention

    if use_attention:
      self.attention = SelfAttention(
          hidden_size, num_heads, attention_dropout_rate, initializer_range, name="attention"
      )
      self.attention_layer_norm = LayerNormalization(
          epsilon=layer_norm_epsilon, name="attention_layer_norm"
      )

    def blstm():
      units = blstm_units or hidden_size
      return BidirectionalLSTM(
          units,
          hidden_size if blstm_projection else None,
          initializer_range,
          blstm_implementation,
          name="blstm",
      )

    def ffn():
      return FeedForward(hidden_size, intermediate_size, hidden_act, initializer_range, name="ffn")

    # Each branch of the second sublayer, and whether it reads X (True) or Xbar.
    if mixer == "ffn":
      branches = [(ffn(), False)]
    elif mixer == "blstm":
      branches = [(blstm(), False)]
    elif mixer == "parallel_blstm":
      branches = [(ffn(), False), (blstm(), True)]
    else:
      branches = [
          (
              SwishRNN(
                  hidden_size,
                  swish_rnn_size,
                  swish_rnn_step_size,
                  swish_rnn_residual,
                  swish_rnn_gate,
                  swish_rnn_direction,
                  initializer_range,
                  swish_rnn_implementation,
                  name="swish_rnn",
              ),
              False,
          )
      ]
    self.branch_layers = [layer for layer, _ in branches]
    self._branch_reads_block_input = [reads for _, reads in branches]
    self.dropout = Dropout(dropout_rate)
    self.output_layer_norm = LayerNormalization(
        epsilon=layer_norm_epsilon, name="output_layer_norm"
    )

  def build(self, input_shape):
    shape = (None, None, self.hidden_size)
    if self.use_attention:
      self.attention.build(shape)
      self.attention_layer_norm.build(shape)
    for layer in self.branch_layers:
      layer.build(shape)
    self.output_layer_norm.build(shape)
    self.built = True

  def call(self, x, attention_mask, attention_bias=None, training=None):
    x_bar = x
    if self.use_attention:
      attended = self.attention(x, attention_mask, attention_bias, training=training)
      x_bar = self.attention_layer_norm(x + self.dropout(attended, training=training))
    total = x_bar
    for layer, reads_block_input in zip(self.branch_layers, self._branch_reads_block_input):
      branch = layer(x if reads_block_input else x_bar, attention_mask, training=training)
      total = total + self.dropout(branch, training=training)
    return self.output_layer_norm(total)

  def compute_output_shape(self, input_shape):
    return tuple(input_shape)

  def get_config(self):
    return {**super().get_config(), **self._config}
