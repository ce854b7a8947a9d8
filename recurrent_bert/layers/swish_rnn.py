"""SwishRNN of Lei et al. (2022), the recurrent replacement of BERT's FFN (SPEC §4)."""

import keras
import tensorflow as tf
from tensorflow.compiler.tf2xla.python import xla
from tensorflow.python.ops import control_flow_util
from keras import ops

from recurrent_bert.layers.activations import get_activation

# How the recurrence runs. All compute SPEC §4 exactly (benchmarks/recurrence.py times them).
# "fused" and "loop" replace autodiff through the scan (which stores every step's
# intermediates) by a custom gradient: the reverse recurrence is *linear* in g, the total
# gradient of the loss on c,
#   g[i] = dc[i] + dz[i+k],   dz[i] = g[i] Swish'(z[i]),   Swish'(z) = s + alpha z s (1 - s),
#   dx1[i] = -dz[i],  dresidual[i] = g[i],  dalpha = sum g z^2 s (1-s),  dbeta = sum g z s (1-s),
# with z[i] = c[i-k] - x1[i] and s = sigmoid(alpha z + beta) recomputed from the saved c.
#   "fused": forward and backward are each one XLA program (also inside a model that is
#            not compiled with XLA): a fixed-trip-count loop over the T/k blocks that XLA
#            fuses into one kernel per step, reading and writing [B, T, D] buffers in
#            place. Saves only c; the backward loop recomputes s per step. Fastest
#            block in graph mode and under XLA, least memory.
#   "loop":  plain TF ops (no XLA): `unroll` blocks of k positions per while-loop
#            iteration to amortise TF's per-iteration overhead; saves c and s, and does
#            everything but the 2-op reverse recurrence in vectorised passes.
#   "scan":  the original plain `tf.scan` over T/k blocks, autodiff through the scan.
#   "auto":  "fused", except inside a program that XLA compiles as a whole (a model step
#            under jit_compile=True): there "scan". Known issue, not understood yet: a
#            whole-model XLA training step (dropout on) ran 3-4x slower with "fused" or
#            "loop" than with "scan" (the block alone under XLA is faster with "fused").
IMPLEMENTATIONS = ("auto", "fused", "loop", "scan")
DEFAULT_UNROLL = 16  # "loop" only: under XLA unrolling measured slower (duplicated work)


def _shift_later(t, d):
  """[B, T, D] -> out[:, i] = t[:, i - d], zeros for i < d (d >= 0, any T)."""
  length = tf.shape(t)[1]
  return tf.pad(t, [[0, 0], [d, 0], [0, 0]])[:, :length]


def _shift_earlier(t, d):
  """[B, T, D] -> out[:, i] = t[:, i + d], zeros for i + d >= T (d >= 0, any T)."""
  return tf.pad(t, [[0, 0], [0, d], [0, 0]])[:, d:]


def _to_blocks(t, num_blocks, k):
  """[B, T, D] -> [N, B, k, D], zero-padded at the end to N * k positions (N * k >= T)."""
  batch, length, depth = tf.unstack(tf.shape(t))
  t = tf.pad(t, [[0, 0], [0, num_blocks * k - length], [0, 0]])
  t = tf.reshape(t, [batch, num_blocks, k, depth])
  return tf.transpose(t, [1, 0, 2, 3])


def _from_blocks(t, length):
  """[N, B, k, D] -> [B, T, D] (drops the end padding)."""
  num_blocks, batch, k, depth = tf.unstack(tf.shape(t))
  t = tf.reshape(tf.transpose(t, [1, 0, 2, 3]), [batch, num_blocks * k, depth])
  return t[:, :length]


def _chunked_loop(step, elems, initial, num_outputs, k, unroll, reverse=False):
  """Runs `state, outputs = step(state, *blocks)` over the blocks of k positions.

  `unroll` blocks advance per while-loop iteration (a Python loop in the body), with a
  fixed trip count, so TF's per-iteration overhead is paid T / (k * unroll) times.

  Args:
    step: (state [B, k, D], *blocks [B, k, D]) -> (new state, tuple of [B, k, D]).
    elems: list of [B, T, D] tensors.
    initial: [B, k, D] state before the first block.
    num_outputs: length of the tuple `step` returns.
    reverse: run from the last block to the first.
  Returns:
    list of num_outputs [B, T, D] tensors, each block's outputs at its positions.
  """
  length = tf.shape(elems[0])[1]
  num_blocks = (length + k - 1) // k
  num_chunks = (num_blocks + unroll - 1) // unroll
  padded = num_chunks * unroll
  blocks = []
  for t in elems:
    if reverse:  # reverse the order of the *blocks*; padding blocks then come first
      t = tf.reverse(_to_blocks(t, num_blocks, k), [0])
      t = tf.pad(t, [[padded - num_blocks, 0], [0, 0], [0, 0], [0, 0]])
    else:
      t = _to_blocks(t, padded, k)
    shape = tf.shape(t)
    blocks.append(tf.reshape(t, tf.concat([[num_chunks, unroll], shape[1:]], 0)))

  def body(i, state, arrays):
    pieces = [tf.unstack(tf.gather(b, i), num=unroll) for b in blocks]
    outputs = [[] for _ in range(num_outputs)]
    for u in range(unroll):
      state, outs = step(state, *(p[u] for p in pieces))
      for out, o in zip(outputs, outs):
        out.append(o)
    arrays = [a.write(i, tf.stack(o)) for a, o in zip(arrays, outputs)]
    return i + 1, state, arrays

  arrays = [tf.TensorArray(initial.dtype, size=num_chunks) for _ in range(num_outputs)]
  _, _, arrays = tf.while_loop(
      lambda i, *_: i < num_chunks, body, (tf.constant(0), initial, arrays),
      maximum_iterations=num_chunks)
  results = []
  for a in arrays:
    out = a.stack()  # [num_chunks, unroll, B, k, D]
    out = tf.reshape(out, tf.concat([[padded], tf.shape(out)[2:]], 0))
    if reverse:
      out = tf.reverse(out[padded - num_blocks:], [0])
    results.append(_from_blocks(out, length))
  return results


def _xla_loop(step, elems, initial, num_outputs, k, reverse=False, previous=()):
  """`_chunked_loop` for XLA programs: one block of k positions per iteration, read in
  place with dynamic slices and written in place into [B, T, D] buffers (no transposes
  to a time-major layout and back, no TensorArrays, no unrolling: XLA fuses the whole
  body into one kernel, and unrolled bodies measured slower).

  `step(state, *blocks, *previous_blocks)`, where `previous` lists [B, T, D] tensors read
  one block *earlier* (zeros before the first). `state` may be a tuple; the final state
  is returned after the outputs.
  """
  length = elems[0].shape[1]
  if length is None:
    length = tf.shape(elems[0])[1]
  num_blocks = (length + k - 1) // k
  padding = num_blocks * k - length
  # Pads (copies) only when T is not a multiple of k.
  elems, previous = ([t if isinstance(padding, int) and padding == 0
                      else tf.pad(t, [[0, 0], [0, padding], [0, 0]]) for t in ts]
                     for ts in (elems, previous))
  shape = tf.nest.flatten(initial)[0].shape
  size = tf.shape(tf.nest.flatten(initial)[0])

  def read(t, start):
    piece = tf.slice(t, [0, start, 0], size)
    piece.set_shape(shape)
    return piece

  def body(i, state, buffers):
    start = (num_blocks - 1 - i if reverse else i) * k
    pieces = [read(t, start) for t in elems]
    pieces += [tf.where(start > 0, read(t, tf.maximum(start - k, 0)), tf.zeros_like(p))
               for t, p in zip(previous, pieces)]
    state, outs = step(state, *pieces)
    buffers = [xla.dynamic_update_slice(b, o, [0, start, 0]) for b, o in zip(buffers, outs)]
    return i + 1, state, buffers

  buffers = [tf.zeros_like(elems[0]) for _ in range(num_outputs)]
  _, state, buffers = tf.while_loop(lambda i, *_: i < num_blocks, body,
                                    (tf.constant(0), initial, buffers),
                                    maximum_iterations=num_blocks)
  if not (isinstance(padding, int) and padding == 0):
    buffers = [b[:, :length] for b in buffers]
  return buffers + [state]


def _fused_forward(x1, residual, alpha, beta, k):
  """States c (XLA program). residual None: x1."""
  def step(c_prev, x1_block, residual_block):
    z = c_prev - x1_block
    c = z * tf.sigmoid(alpha * z + beta) + residual_block
    return c, (c,)

  batch, depth = tf.shape(x1)[0], tf.shape(x1)[2]
  c, _ = _xla_loop(step, [x1, x1 if residual is None else residual],
                   tf.zeros([batch, k, depth], x1.dtype), 1, k)
  return tf.ensure_shape(c, x1.shape)


def _fused_backward(dc, c, x1, alpha, beta, k, shared):
  """Gradients on (x1, residual, alpha, beta) from the saved states (XLA program);
  on (x1, alpha, beta) if `shared` (residual is x1: one buffer instead of two and a sum).

  One reverse loop; each step recomputes its gate from c[i-k] and x1[i] (cheaper than
  storing it: the loop is bound by memory traffic, not arithmetic) and carries
  dz[i] = g[i] Swish'(z[i]) to block i - k, plus the dalpha, dbeta partial sums.
  """
  def step(state, dc_block, x1_block, c_prev):
    dz_next, dalpha, dbeta = state
    g = dc_block + dz_next
    z = c_prev - x1_block
    s = tf.sigmoid(alpha * z + beta)
    q = g * z * s * (1 - s)  # g dSwish/dbeta; g dSwish/dalpha = z q
    dz = g * s + alpha * q  # g dSwish/dz
    return (dz, dalpha + z * q, dbeta + q), (g - dz,) if shared else (-dz, g)

  batch, depth = tf.shape(x1)[0], tf.shape(x1)[2]
  zeros = tf.zeros([batch, k, depth], dc.dtype)
  *dinputs, (_, dalpha, dbeta) = _xla_loop(
      step, [dc, x1], (zeros, zeros, zeros), 1 if shared else 2, k, reverse=True,
      previous=[c])
  return tuple(tf.ensure_shape(d, x1.shape) for d in dinputs) + (
      tf.reduce_sum(dalpha, [0, 1]), tf.reduce_sum(dbeta, [0, 1]))


def _loop_forward(x1, residual, alpha, beta, k, unroll):
  """States c and gates s = sigmoid(alpha z + beta), z[i] = c[i-k] - x1[i]."""
  def step(c_prev, x1_block, residual_block):
    z = c_prev - x1_block
    s = tf.sigmoid(alpha * z + beta)
    c = z * s + residual_block
    return c, (c, s)

  batch, depth = tf.shape(x1)[0], tf.shape(x1)[2]
  c, s = _chunked_loop(step, [x1, residual], tf.zeros([batch, k, depth], x1.dtype), 2, k,
                       unroll)
  return tf.ensure_shape(c, x1.shape), tf.ensure_shape(s, x1.shape)


def _loop_backward(dc, c, s, x1, alpha, k, unroll):
  """Gradients on (x1, residual, alpha, beta) from the saved c and s: the reverse
  recurrence in the loop, everything else in vectorised passes (in plain TF every op
  in the loop costs a fixed overhead per step)."""
  z = _shift_later(c, k) - x1
  q = z * s * (1 - s)  # dSwish/dbeta; dSwish/dalpha = z q
  dswish = s + alpha * q  # dSwish/dz

  def step(g_next, a, dc_block):
    g = dc_block + a * g_next
    return g, (g,)

  batch, depth = tf.shape(x1)[0], tf.shape(x1)[2]
  g, = _chunked_loop(step, [_shift_earlier(dswish, k), dc],
                     tf.zeros([batch, k, depth], dc.dtype), 1, k, unroll, reverse=True)
  g = tf.ensure_shape(g, dc.shape)
  return -g * dswish, g, tf.reduce_sum(g * z * q, [0, 1]), tf.reduce_sum(g * q, [0, 1])


_fused_forward_xla = tf.function(_fused_forward, jit_compile=True, autograph=False)
_fused_backward_xla = tf.function(_fused_backward, jit_compile=True, autograph=False)


def _custom_gradient_recurrence(x1, residual, alpha, beta, k, unroll, fused):
  shared = residual is None  # residual is x1: one input, one gradient

  @tf.custom_gradient
  def recurrence(*args):
    # stop_gradient: no enclosing tape may differentiate through the loop itself (that
    # would store per-step intermediates, and cannot cross the XLA boundary).
    x1, residual, alpha, beta = [None if t is None else tf.stop_gradient(t) for t in (
        (args[0], None) + args[1:] if shared else args)]
    if fused:
      c = _fused_forward_xla(x1, residual, alpha, beta, k)
      return c, lambda dc: _fused_backward_xla(dc, c, x1, alpha, beta, k, shared)
    c, s = _loop_forward(x1, x1 if shared else residual, alpha, beta, k, unroll)

    def grad(dc):
      dx1, dresidual, dalpha, dbeta = _loop_backward(dc, c, s, x1, alpha, k, unroll)
      if shared:
        return dx1 + dresidual, dalpha, dbeta
      return dx1, dresidual, dalpha, dbeta

    return c, grad

  return recurrence(*[t for t in (x1, residual, alpha, beta) if t is not None])


def _scan_recurrence(x1, residual, alpha, beta, k):
  """The original implementation: `tf.scan` over T/k blocks, autodiff through it."""
  batch, length, depth = tf.unstack(tf.shape(x1))
  num_blocks = (length + k - 1) // k

  def step(c_prev, block):
    x1_block, residual_block = block
    z = c_prev - x1_block
    return z * tf.sigmoid(alpha * z + beta) + residual_block

  c = tf.scan(step, (_to_blocks(x1, num_blocks, k), _to_blocks(residual, num_blocks, k)),
              initializer=tf.zeros([batch, k, depth], x1.dtype))
  return _from_blocks(c, length)


def _in_xla_program():
  return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def swish_rnn_recurrence(x1, residual, alpha, beta, step_size=1, implementation="auto",
                         unroll=DEFAULT_UNROLL):
  """Runs `c[i] = Swish(c[i-k] - x1[i]) + residual[i]`, `c[<0] = 0`, left to right.

  `Swish(z) = z * sigmoid(alpha * z + beta)`. With step size k, position i depends on
  position i - k, so k positions advance together as one block [B, k, D] (the sequence
  padded to a multiple of k at the end).

  Args:
    x1: [B, T, D] float.
    residual: [B, T, D], x1 (default) or x2; None for x1 itself, which lets "fused"
      and "loop" return one gradient for both uses of x1 (less memory traffic).
    alpha, beta: [D].
    step_size: k >= 1.
    implementation: "auto" (default), "fused", "loop" or "scan" (see IMPLEMENTATIONS).
    unroll: blocks of k positions per while-loop iteration, "loop" only.
  Returns:
    c: [B, T, D].
  """
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, "
                     f"got {implementation!r}")
  if step_size < 1 or unroll < 1:
    raise ValueError(f"step_size and unroll must be >= 1, got {step_size}, {unroll}")
  if implementation == "auto":
    implementation = "scan" if _in_xla_program() else "fused"
  x1, residual, alpha, beta = (None if t is None else tf.convert_to_tensor(t)
                                for t in (x1, residual, alpha, beta))
  if implementation == "scan":
    return _scan_recurrence(x1, x1 if residual is None else residual, alpha, beta,
                            step_size)
  return _custom_gradient_recurrence(x1, residual, alpha, beta, step_size, unroll,
                                     fused=implementation == "fused")


@keras.saving.register_keras_serializable(package="recurrent_bert")
class SwishRNN(keras.layers.Layer):
  """The SwishRNN block: projections, Swish recurrence, gated output projection.

    X1, X2 = X W1, X W2                        (one fused [H, 2d'] matmul, no bias)
    c[i]   = Swish(c[i-k] - x1[i]) + x1[i]     (or + x2[i]: `residual="x2"`)
    out    = W3((C + b_c) * gate(X2 + b_g)) + b3

  Direction "forward" scans left to right, so right padding never reaches a real token.
  "backward" and "bidirectional" (half the channels each way) zero the inputs at padded
  positions: the state then stays exactly 0 across the padding (Swish(0) = 0) and each
  sequence's backward scan starts clean at its last real token.

  The recurrence runs in float32 even under mixed precision: a 512-step chain of
  bfloat16 roundings would drift.

  `implementation` and `unroll` choose how the recurrence runs, not what it computes
  (see `swish_rnn_recurrence`); the defaults are the fastest measured
  (benchmarks/recurrence.py).

  Inputs: x [B, T, H]; attention_mask [B, T] (1 real, 0 padding).
  Output: [B, T, H].
  """

  def __init__(self, hidden_size, inner_size, step_size=1, residual="x1", gate="gelu",
               direction="forward", initializer_range=0.02, implementation="auto",
               unroll=DEFAULT_UNROLL, **kwargs):
    super().__init__(**kwargs)
    if implementation not in IMPLEMENTATIONS:
      raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, "
                       f"got {implementation!r}")
    if residual not in ("x1", "x2"):
      raise ValueError(f"residual must be 'x1' or 'x2', got {residual!r}")
    if direction not in ("forward", "backward", "bidirectional"):
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
    self.output_dense = keras.layers.Dense(
        hidden_size,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
        name="output")

  def build(self, input_shape):
    init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
    d = self.inner_size
    self.input_kernel = self.add_weight(name="input_kernel",
                                        shape=(self.hidden_size, 2 * d),
                                        initializer=init)
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
      return tf.reverse(t, axis=[1])
    half = self.inner_size // 2
    return tf.concat([t[..., :half], tf.reverse(t[..., half:], axis=[1])], axis=-1)

  def call(self, x, attention_mask=None, training=None):
    # One fused [H, 2d'] projection as a 2-D MatMul (tf.matmul on [B, T, H] would be a
    # broadcasting BatchMatMul, whose kernel gradient is much slower).
    x1, x2 = tf.split(tf.tensordot(x, ops.cast(self.input_kernel, x.dtype), 1), 2, axis=-1)
    x1_state = tf.cast(x1, "float32")
    residual_state = None if self.residual == "x1" else tf.cast(x2, "float32")
    if self.direction != "forward" and attention_mask is not None:
      real = tf.cast(attention_mask, "float32")[:, :, None]
      x1_state = x1_state * real
      if residual_state is not None:
        residual_state = residual_state * real
    if residual_state is not None:
      residual_state = self._flip_backward_channels(residual_state)
    c = swish_rnn_recurrence(
        self._flip_backward_channels(x1_state), residual_state,
        tf.cast(self.alpha, "float32"), tf.cast(self.beta, "float32"), self.step_size,
        implementation=self.implementation, unroll=self.unroll)
    c = tf.cast(self._flip_backward_channels(c), x.dtype)
    gated = (c + ops.cast(self.state_bias, x.dtype)) * self._gate_fn(
        x2 + ops.cast(self.gate_bias, x.dtype))
    return self.output_dense(gated)

  def get_config(self):
    return {**super().get_config(), **{
        k: getattr(self, k) for k in ("hidden_size", "inner_size", "step_size",
                                      "residual", "gate", "direction",
                                      "initializer_range", "implementation",
                                      "unroll")}}
