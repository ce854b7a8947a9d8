"""SwishRNN of Lei et al. (2022), the recurrent replacement of BERT's FFN (SPEC §4)."""

import keras
from keras import ops

from recurrent_bert.config import SWISH_RNN_DIRECTIONS
from recurrent_bert.config import SWISH_RNN_IMPLEMENTATIONS as IMPLEMENTATIONS
from recurrent_bert.config import SWISH_RNN_RESIDUALS
from recurrent_bert.layers import kernels
from recurrent_bert.layers.activations import get_activation
from recurrent_bert.layers.activations import get_biased_activation
from recurrent_bert.layers.kernels import pallas_swish_rnn
from recurrent_bert.layers.token_rows import over_token_rows
from recurrent_bert.layers.token_rows import without_bias

# How the recurrence runs, never what it computes (benchmarks/recurrence.py times them;
# layers/kernels/__init__.py says which backend offers which and what "auto" picks):
#   "fused" (TensorFlow): forward and backward each one XLA program with a hand-written
#            gradient, the output gating in the same loops; fastest and least memory there.
#   "loop" (TensorFlow): plain TF while-loops, `unroll` blocks per iteration.
#   "scan" (TensorFlow): the original `tf.scan`, autodiff through it.
#   "portable" (JAX, PyTorch): `keras.ops.scan` with the hand-written reverse gradient.
#   "pallas" (JAX on a CUDA GPU): one Pallas kernel walks T for the forward pass and one
#            for the backward, the gating fused in both; "auto" there.
#   "triton" (PyTorch on a CUDA GPU): the same kernels written in Triton, as PyTorch
#            custom operators (`torch.compile` keeps them whole); "auto" there.
# Details of each: kernels/tf_swish_rnn.py, kernels/portable_swish_rnn.py,
# kernels/pallas_swish_rnn.py, kernels/triton_swish_rnn.py.
DEFAULT_UNROLL = 16  # "loop" only: under XLA unrolling measured slower (duplicated work)
# The GPU kernels read 16-bit inputs and widen them in registers, and write the gated
# output in the gate's dtype: given the projections and gate as the matmuls make them,
# no pass over memory converts them to float32 and back (under mixed precision at
# swishrnn_base's size, about 0.7 GB a layer a training step). The same values go in as
# the others get after their float32 conversion, so the results are the same.
_READ_ANY_FLOAT = ("pallas", "triton")


def swish_rnn_recurrence(
    x1,
    residual,
    alpha,
    beta,
    step_size=1,
    implementation="auto",
    unroll=DEFAULT_UNROLL,
    gate=None,
    state_bias=None,
):
  """Runs `c[i] = Swish(c[i-k] - x1[i]) + residual[i]`, `c[<0] = 0`, left to right.

  `Swish(z) = z * sigmoid(alpha * z + beta)`. With step size k, position i depends on
  position i - k, so k positions advance together as one block [B, k, D] (the sequence
  padded to a multiple of k at the end). With a `gate`, returns the gated output
  `(c + state_bias) * gate` instead of c.

  Args:
    x1: [B, T, D] float.
    residual: [B, T, D], x1 (default) or x2; None for x1 itself, which lets the
      hand-written gradients return one gradient for both uses of x1.
    alpha, beta: [D].
    step_size: k >= 1.
    implementation: "auto" or one the running backend offers (see above).
    unroll: blocks of k positions per while-loop iteration, "loop" only.
    gate: None, or [B, T, D], the activated gate.
    state_bias: [D], with a gate.
  Returns:
    c, or the gated output: [B, T, D].
  """
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
  if step_size < 1 or unroll < 1:
    raise ValueError(f"step_size and unroll must be >= 1, got {step_size}, {unroll}")
  if (gate is None) != (state_bias is None):
    raise ValueError("gate and state_bias go together")
  implementation = kernels.resolve(kernels.SWISH_RNN_FIELD, implementation)
  if implementation == "pallas":
    from recurrent_bert.layers.kernels import pallas_swish_rnn

    return pallas_swish_rnn.recurrence(x1, residual, alpha, beta, step_size, gate, state_bias)
  if implementation == "triton":
    from recurrent_bert.layers.kernels import triton_swish_rnn

    return triton_swish_rnn.recurrence(x1, residual, alpha, beta, step_size, gate, state_bias)
  if implementation == "portable":
    from recurrent_bert.layers.kernels import portable_swish_rnn

    c = portable_swish_rnn.recurrence(x1, residual, alpha, beta, step_size)
    return kernels.gated(c, gate, state_bias)
  from recurrent_bert.layers.kernels import tf_swish_rnn

  return tf_swish_rnn.recurrence(
      x1, residual, alpha, beta, step_size, implementation, unroll, gate, state_bias
  )


def _dense(x, kernel, bias=None, activation=None):
  """act(x W + b): [B, T, H] -> [B, T, D]. TensorFlow's is one 2-D MatMul + BiasAdd, the
  chain its graph rewriter fuses into one kernel (`kernels.tf_graph.dense_2d`)."""
  if kernels.backend() == "tensorflow":
    from recurrent_bert.layers.kernels.tf_graph import dense_2d

    return dense_2d(x, kernel, bias, activation)
  y = ops.matmul(x, kernel)
  if bias is not None:
    y = y + bias
  return y if activation is None else activation(y)


@keras.saving.register_keras_serializable(package="recurrent_bert")
class SwishRNN(keras.layers.Layer):
  """The SwishRNN block: projections, Swish recurrence, gated output projection.

    X1, X2 = X W1, X W2                        (two [H, d'] kernels, no bias)
    c[i]   = Swish(c[i-k] - x1[i]) + x1[i]     (or + x2[i]: `residual="x2"`)
    out    = W3((C + b_c) * gate(X2 + b_g)) + b3

  Direction "forward" scans left to right, so right padding never reaches a real token.
  "backward" and "bidirectional" (half the channels each way) zero the inputs at padded
  positions: the state then stays exactly 0 across the padding (Swish(0) = 0) and each
  sequence's backward scan starts clean at its last real token.

  The recurrence and the gating run in float32 even under mixed precision: a 512-step
  chain of bfloat16 roundings would drift. (The GPU kernels take 16-bit projections and
  widen them as they read; the others get them converted to float32.)

  `implementation` and `unroll` choose how the recurrence runs, not what it computes
  (see `swish_rnn_recurrence`); the defaults are the fastest measured
  (benchmarks/recurrence.py). W1 and W2 are two kernels, not one [H, 2d'] kernel split
  in two: X2 + b_g and the gate then fuse into its MatMul as in the FFN, and no slice
  or concatenation of a [B, T, 2d'] tensor is needed (measured 10-15% of the block).
  On the GPU kernels (forward direction) the two are side by side in one matmul
  instead, whose [B, T, 2, d'] product the kernels read as it is, making the gate
  themselves (`_gated_from_projections`).

  Inputs: x [B, T, H]; attention_mask [B, T] (1 real, 0 padding).
  Output: [B, T, H].
  """

  def __init__(
      self,
      hidden_size,
      inner_size,
      step_size=1,
      residual="x1",
      gate="gelu",
      direction="forward",
      initializer_range=0.02,
      implementation="auto",
      unroll=DEFAULT_UNROLL,
      **kwargs,
  ):
    super().__init__(**kwargs)
    if implementation not in IMPLEMENTATIONS:
      raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    kernels.check(kernels.SWISH_RNN_FIELD, implementation)
    if residual not in SWISH_RNN_RESIDUALS:
      raise ValueError(f"residual must be one of {SWISH_RNN_RESIDUALS}, got {residual!r}")
    if direction not in SWISH_RNN_DIRECTIONS:
      raise ValueError(f"unknown direction {direction!r}")
    if direction == "bidirectional" and inner_size % 2:
      raise ValueError(f"bidirectional needs an even inner_size, got {inner_size}")
    self.hidden_size = hidden_size
    self.inner_size = inner_size
    self.step_size = step_size
    self.residual = residual
    self.gate = gate
    self.direction = direction
    self.initializer_range = initializer_range
    self.implementation = implementation
    self.unroll = unroll
    self._gate_fn = get_activation(gate)
    self._biased_gate = get_biased_activation(gate)  # None where the backend has none
    self.output_dense = keras.layers.Dense(
        hidden_size,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
        name="output",
    )

  def build(self, input_shape):
    init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
    h, d = self.hidden_size, self.inner_size
    self.x1_kernel = self.add_weight(name="x1_kernel", shape=(h, d), initializer=init)
    self.x2_kernel = self.add_weight(name="x2_kernel", shape=(h, d), initializer=init)
    self.alpha = self.add_weight(name="alpha", shape=(d,), initializer="ones")
    self.beta = self.add_weight(name="beta", shape=(d,), initializer="zeros")
    self.state_bias = self.add_weight(name="state_bias", shape=(d,), initializer="zeros")
    self.gate_bias = self.add_weight(name="gate_bias", shape=(d,), initializer="zeros")
    self.output_dense.build((None, None, d))
    self.built = True

  def _flip_backward_channels(self, t):
    """Reverses time on the channels that scan right to left ([B, T, D] -> same)."""
    if self.direction == "forward":
      return t
    if self.direction == "backward":
      return ops.flip(t, axis=1)
    half = self.inner_size // 2
    return ops.concatenate([t[..., :half], ops.flip(t[..., half:], axis=1)], axis=-1)

  def _gated_from_projections(self, x, implementation):
    """The GPU kernels' form of the forward direction: one matmul makes X1 and X2 side by
    side, [B, T, 2, d'], which the kernels ("pallas" or "triton") read in place,
    computing the gate in registers (`recurrence_of_projections`): [B, T, H] -> the gated
    output [B, T, d']. Padding needs nothing: the scan runs left to right."""
    if implementation == "pallas":
      module = pallas_swish_rnn
    else:
      from recurrent_bert.layers.kernels import triton_swish_rnn as module
    batch, length = ops.shape(x)[0], ops.shape(x)[1]
    kernel = ops.stack([self.x1_kernel, self.x2_kernel], axis=1)  # [H, 2, d']
    kernel = ops.reshape(ops.cast(kernel, x.dtype), (self.hidden_size, 2 * self.inner_size))
    projections = ops.reshape(ops.matmul(x, kernel), (batch, length, 2, self.inner_size))
    float32 = lambda v: ops.cast(v, "float32")
    return module.recurrence_of_projections(
        projections,
        *map(float32, (self.gate_bias, self.state_bias, self.alpha, self.beta)),
        self.step_size,
        self.gate,
        residual_is_x2=self.residual == "x2",
    )

  def call(self, x, attention_mask=None, training=None, output_bias=True):
    """x [B, T, H]; attention_mask [B, T] or None. Returns [B, T, H]; with
    `output_bias=False`, W3's product without b3 (for a caller that adds it)."""
    implementation = kernels.resolve(kernels.SWISH_RNN_FIELD, self.implementation)
    fused = self.direction == "forward" and self.gate in pallas_swish_rnn.GATES
    if implementation in _READ_ANY_FLOAT and fused:
      return self._output(self._gated_from_projections(x, implementation), output_bias)
    x1 = _dense(x, ops.cast(self.x1_kernel, x.dtype))  # [B, T, d']
    gate_bias = ops.cast(self.gate_bias, x.dtype)
    x2_kernel = ops.cast(self.x2_kernel, x.dtype)
    x2 = None
    if self._biased_gate is not None:  # it keeps X2 and b_g, not their sum (activations.py)
      x2 = ops.matmul(x, x2_kernel)
      gate = self._biased_gate(x2, gate_bias)
    elif self.residual == "x1":  # X2 + b_g and the gate fuse into the matmul (class doc)
      gate = _dense(x, x2_kernel, gate_bias, self._gate_fn)
    else:
      x2 = _dense(x, x2_kernel)
      gate = self._gate_fn(x2 + gate_bias)
    residual = x2 if self.residual == "x2" else None  # X2 itself as well as its gate
    if implementation not in _READ_ANY_FLOAT:
      x1, residual, gate = (
          None if t is None else ops.cast(t, "float32") for t in (x1, residual, gate)
      )
    if self.direction != "forward" and attention_mask is not None:
      real = ops.cast(attention_mask, x1.dtype)[:, :, None]  # 0 or 1: exact in any dtype
      x1 = x1 * real
      if residual is not None:
        residual = residual * real
    # Time-flipping inputs, gate and output together keeps every channel's gating
    # aligned: the gate is position-wise.
    flip = self._flip_backward_channels
    out = swish_rnn_recurrence(
        flip(x1),
        None if residual is None else flip(residual),
        ops.cast(self.alpha, "float32"),
        ops.cast(self.beta, "float32"),
        self.step_size,
        implementation=implementation,
        unroll=self.unroll,
        gate=flip(gate),
        state_bias=ops.cast(self.state_bias, "float32"),
    )
    return self._output(ops.cast(flip(out), x.dtype), output_bias)

  def _output(self, gated, with_bias):
    """W3 gated (+ b3 `with_bias`): [B, T, d'] -> [B, T, H]."""
    if with_bias:
      return self.output_dense(gated)
    return over_token_rows(without_bias(self.output_dense), gated)

  def get_config(self):
    return {
        **super().get_config(),
        **{
            k: getattr(self, k)
            for k in (
                "hidden_size",
                "inner_size",
                "step_size",
                "residual",
                "gate",
                "direction",
                "initializer_range",
                "implementation",
                "unroll",
            )
        },
    }
