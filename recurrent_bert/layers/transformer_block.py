"""One post-LayerNorm encoder block with a pluggable second sublayer (SPEC §2-3)."""

import keras

from recurrent_bert.config import MIXERS
from recurrent_bert.layers import kernels
from recurrent_bert.layers.attention import SelfAttention
from recurrent_bert.layers.blstm import BidirectionalLSTM
from recurrent_bert.layers.dropout import Dropout
from recurrent_bert.layers.dropout import on_one_device
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

  Where the Pallas kernels run (JAX on a CUDA GPU with 16-bit activations, or Pallas'
  interpreter; one device), each `LN(residual + Drop(branch))` is one kernel forward and
  one backward (`kernels/pallas_layer_norm.py`): the same variables, and the same dropout
  mask from the same seed as the Dropout layer draws. Elsewhere the layers run as written.

  Inputs: x [B, T, H]; attention_mask [B, T] (1 real, 0 padding); attention_bias
  optional [1 or B, A, T, T]; residual optional [B, T, H], a second copy of x that the
  residual sums start from; block_input optional [B, T, H], a third copy of x for the
  branches that read X beside the attention (TRANS-BLSTM-2's BLSTM). Output: [B, T, H],
  or a tuple of `output_copies` of it. A block's output feeds the next block's readers
  of X and its residual sum (`input_copies` of them); as copies, their gradients reach
  this block's last kernel apart and it adds them as it reads them, where autodiff would
  add them at the fork in a pass of its own (read two [B, T, H], write one).

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

  @property
  def input_copies(self) -> int:
    """How many readers of its input X the block has (`call`'s x, residual and
    block_input): 3 where the attention and a branch both read X, else 2."""
    return 3 if self.use_attention and any(self._branch_reads_block_input) else 2

  def call(
      self,
      x,
      attention_mask,
      attention_bias=None,
      training=None,
      residual=None,
      block_input=None,
      output_copies=1,
  ):
    residual = x if residual is None else residual
    block_input = x if block_input is None else block_input
    x_bar, total = x, residual
    if self.use_attention:
      one_kernel = self._one_kernel_takes(x, self.attention_layer_norm)
      attended = self.attention(
          x, attention_mask, attention_bias, training=training, output_bias=not one_kernel
      )
      # X̄ twice: the branches read one, the residual sum starts from the other.
      x_bar, total = self._residual_norm(
          residual,
          attended,
          self.attention,
          self.attention_layer_norm,
          one_kernel,
          training,
          copies=2,
      )
    *first, (last, reads_block_input) = zip(self.branch_layers, self._branch_reads_block_input)
    for layer, reads in first:
      branch = layer(block_input if reads else x_bar, attention_mask, training=training)
      total = total + self.dropout(branch, training=training)
    one_kernel = self._one_kernel_takes(total, self.output_layer_norm)
    branch = last(
        block_input if reads_block_input else x_bar,
        attention_mask,
        training=training,
        output_bias=not one_kernel,
    )
    return self._residual_norm(
        total, branch, last, self.output_layer_norm, one_kernel, training, copies=output_copies
    )

  def _residual_norm(
      self, residual, branch, branch_layer, layer_norm, one_kernel, training, copies=1
  ):
    """layer_norm(residual + dropout(branch)): residual, branch [B, T, H]. As one Pallas
    kernel if `one_kernel` (class doc), drawing the dropout's next seed as the layer
    would, and adding the branch layer's output bias where the layer left it out.
    Returns: [B, T, H] in the layer norm's compute dtype; `copies` > 1: a tuple of that
    many (`pallas_layer_norm.residual_layer_norm`'s copies: their gradients add in the
    kernel)."""
    bias = _output_bias(branch_layer) if one_kernel else None
    if not one_kernel or branch.dtype != residual.dtype:
      # As written; a branch of another dtype (which the sum would promote) gets back
      # the bias it left out.
      if bias is not None:
        branch = branch + keras.ops.cast(bias, branch.dtype)
      y = layer_norm(residual + self.dropout(branch, training=training))
      return (y,) * copies if copies > 1 else y
    from recurrent_bert.layers.kernels import pallas_layer_norm  # pylint: disable=g-import-not-at-top

    rate = self.dropout.rate if training and 0 < self.dropout.rate < 1 else 0.0
    seed = self.dropout.seed_generator.next() if rate else None
    return pallas_layer_norm.residual_layer_norm(
        residual,
        branch,
        None if bias is None else bias.value,
        layer_norm.gamma.value,
        layer_norm.beta.value,
        layer_norm.epsilon,
        rate,
        seed,
        copies=copies,
    )

  def _one_kernel_takes(self, residual, layer_norm) -> bool:
    """Whether `LN(residual + Drop(branch))` runs as one Pallas kernel here (class doc):
    residual [B, T, H] in the layer norm's compute dtype. (The block makes its layer
    norms over the last axis, centred and scaled, and its Dropout without a noise shape:
    what the kernel computes.)"""
    # Symbolic shapes (Keras tracing a functional model's output spec) run as written.
    static = all(isinstance(n, int) for n in residual.shape)
    if not (static and kernels.pallas_takes(residual.dtype)):
      return False
    from recurrent_bert.layers.kernels import pallas_layer_norm  # pylint: disable=g-import-not-at-top

    return (
        keras.backend.standardize_dtype(residual.dtype) == layer_norm.compute_dtype
        and pallas_layer_norm.fits(int(residual.shape[-1]))
        and on_one_device()
    )

  def compute_output_shape(self, input_shape):
    return tuple(input_shape)

  def compute_output_spec(self, x, *args, output_copies=1, **kwargs):
    del args, kwargs
    # One symbolic tensor per copy: a functional model maps each to its own value (one
    # tensor twice would hand both consumers the same copy).
    shape = self.compute_output_shape(x.shape)
    copies = [keras.KerasTensor(shape, dtype=self.compute_dtype) for _ in range(output_copies)]
    return tuple(copies) if output_copies > 1 else copies[0]

  def get_config(self):
    return {**super().get_config(), **self._config}


def _output_bias(branch_layer):
  """The variable of the bias of `branch_layer`'s last matmul, or None (a BLSTM without
  its projection, for which `output_bias` changes nothing). Every branch layer leaves it
  out given `output_bias=False`."""
  dense = getattr(
      branch_layer, "projection" if isinstance(branch_layer, BidirectionalLSTM) else "output_dense"
  )
  return None if dense is None else dense.bias
