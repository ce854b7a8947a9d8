"""Bidirectional LSTM mixer of TRANS-BLSTM (SPEC §3)."""

import keras
from keras import ops

from recurrent_bert.config import BLSTM_IMPLEMENTATIONS as IMPLEMENTATIONS
from recurrent_bert.layers import kernels
from recurrent_bert.layers.token_rows import over_token_rows
from recurrent_bert.layers.token_rows import without_bias


@keras.saving.register_keras_serializable(package="recurrent_bert")
class BidirectionalLSTM(keras.layers.Layer):
  """Forward and backward LSTMs of `units` each, concatenated, optionally projected.

  Full size (TRANS-BLSTM): units = H, then a dense 2H -> H projection. SMALL: units = H/2,
  no projection (2u = H already).

  Padding never reaches real tokens: the backward direction starts at each sequence's
  last real token, and outputs at padded positions are zero.

  Implementations over the same variables (a `keras.layers.Bidirectional(LSTM)`, so
  checkpoints do not depend on the choice, and it can change after training; which
  backend offers which, and what "auto" picks, is `layers/kernels/__init__.py`'s):
    "keras": Keras' LSTM with the mask. On TensorFlow its defaults (tanh/sigmoid, no
      recurrent dropout, not unrolled, use_bias, use_cudnn="auto") with right padding are
      what make it run the fused cuDNN kernel on GPU; on JAX and PyTorch a mask makes
      Keras fall back to a per-step loop.
    "cudnn" (JAX, PyTorch): cuDNN's LSTM fed by each row's length
      (`jax.experimental.rnn`, PyTorch packed sequences).
    "portable" (JAX, PyTorch): `kernels.portable_blstm`, both directions in one
      `keras.ops.scan` with a float32 cell state and a hand-written backward (one matmul
      a step; the recurrent kernel's gradient one matmul after the loop); the CPU
      choice there.
    "pallas" (JAX on a CUDA GPU): `kernels.pallas_blstm`, the portable form's algorithm
      with each time step one kernel (the recurrent matmul and the cell, or its
      gradient, fused), where XLA makes each step several, and no reversed copies.
    TensorFlow's kernels (`kernels.tf_blstm`):
    "fused": `bidirectional_lstm_recurrence`: both directions in one XLA loop (one
      batched [2, B, u] x [2, u, 4u] matmul per step, the backward direction read and
      written at reversed positions in place) and a hand-written backward loop over the
      saved gates; its own XLA programs in graph mode, inlined in a whole-model XLA
      program. The input projections stay outside, one big matmul per direction.
    "block": `block_lstm`, TensorFlow's fused C++ kernel per direction. Has no XLA
      kernel: inside an XLA program it runs "fused".
    "scan": `lstm_scan`, a `tf.scan` with the input projection hoisted out of the loop and
      `tf.reverse_sequence` for the backward direction, autodiff through the scan.
    "auto" (default): the backend's cuDNN path ("keras" on TensorFlow, "cudnn" on JAX
      and PyTorch) when a GPU is visible, else "fused" on TensorFlow (the fastest
      measured on CPU in graph mode and under XLA, benchmarks/recurrence.py) and
      "portable" elsewhere.
  All but "cudnn" run every direction over the whole padded length and zero the padded
  outputs; the backward direction starts at each row's last real token, reading the row
  reversed within its real prefix ("pallas": walking it from the end with the state held
  at 0 over the padding, which needs no reversed copy).

  Inputs: x [B, T, H_in]; attention_mask [B, T] (1 real, 0 padding).
  Output: [B, T, projection_size] if projecting, else [B, T, 2 * units].
  """

  def __init__(
      self, units, projection_size=None, initializer_range=0.02, implementation="auto", **kwargs
  ):
    super().__init__(**kwargs)
    if implementation not in IMPLEMENTATIONS:
      raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    kernels.check(kernels.BLSTM_FIELD, implementation)
    # The padding mask arrives explicitly as `attention_mask`; accepting Keras' implicit
    # mask too lets stacked BLSTMs (the span decoder) pass tensors to each other.
    self.supports_masking = True
    self.units = units
    self.projection_size = projection_size
    self.initializer_range = initializer_range
    self.implementation = implementation
    # Fixed names: unnamed LSTMs are numbered per process (lstm_2, ...), which would make
    # checkpoint keys depend on how many LSTMs were built before this one.
    # Both directions are given, and the templates kept alive (untracked): inside
    # `keras.models.load_model`, Keras shares deserialised objects by `id()`, so a
    # template garbage-collected here could hand its id, and so an earlier block's
    # layer, to the next block's Bidirectional (seen as an intermittent load error).
    self._lstm_templates = (
        keras.layers.LSTM(units, return_sequences=True, name="lstm"),
        keras.layers.LSTM(units, return_sequences=True, go_backwards=True, name="backward_lstm"),
    )
    self.bilstm = keras.layers.Bidirectional(
        self._lstm_templates[0],
        backward_layer=self._lstm_templates[1],
        merge_mode="concat",
        name="bilstm",
    )
    self.projection = None
    if projection_size:
      self.projection = keras.layers.Dense(
          projection_size,
          kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
          name="projection",
      )

  def __setattr__(self, name, value):
    if name == "_lstm_templates":  # not sublayers: the Bidirectional owns the weights
      object.__setattr__(self, name, value)
      return
    super().__setattr__(name, value)

  def build(self, input_shape):
    self.bilstm.build(tuple(input_shape))
    if self.projection is not None:
      self.projection.build((None, None, 2 * self.units))
    self.built = True

  @property
  def resolved_implementation(self):
    implementation = kernels.resolve(kernels.BLSTM_FIELD, self.implementation)
    if implementation == "block":
      from recurrent_bert.layers.kernels.tf_graph import in_xla_program

      if in_xla_program():
        return "fused"  # BlockLSTMV2 has no XLA kernel
    return implementation

  def call(self, x, attention_mask, training=None, output_bias=True):
    """x [B, T, D]; attention_mask [B, T]. Returns [B, T, projection_size or 2u]; with
    `output_bias=False`, the projection without its bias (for a caller that adds it)."""
    implementation = self.resolved_implementation
    if implementation == "keras":
      y = self.bilstm(x, mask=ops.cast(attention_mask, "bool"), training=training)
    else:
      cells = (self.bilstm.forward_layer.cell, self.bilstm.backward_layer.cell)
      if implementation in ("fused", "block", "scan"):
        from recurrent_bert.layers.kernels import tf_blstm

        y = getattr(tf_blstm, f"{implementation}_directions")(cells, x, attention_mask)
      else:
        if implementation == "portable":
          from recurrent_bert.layers.kernels import portable_blstm as run
        elif implementation == "pallas":
          from recurrent_bert.layers.kernels import pallas_blstm as run
        else:
          run = kernels.cudnn_lstm()
        weights = [
            tuple(ops.cast(w, x.dtype) for w in (c.kernel, c.recurrent_kernel, c.bias))
            for c in cells
        ]
        lengths = ops.sum(ops.cast(attention_mask, "int32"), axis=1)
        y = run.bidirectional_lstm(x, lengths, *weights)
    if self.projection is not None:
      y = over_token_rows(self.projection if output_bias else without_bias(self.projection), y)
    return y

  def compute_output_shape(self, input_shape):
    width = self.projection_size or 2 * self.units
    return tuple(input_shape[:-1]) + (width,)

  def get_config(self):
    return {
        **super().get_config(),
        "units": self.units,
        "projection_size": self.projection_size,
        "initializer_range": self.initializer_range,
        "implementation": self.implementation,
    }
