"""TensorFlow kernels of the SwishRNN recurrence ("fused", "loop", "scan").

Chosen by `layers.swish_rnn.swish_rnn_recurrence` on Keras' TensorFlow backend only, and
imported lazily there, so no other backend loads TensorFlow.
"""

import tensorflow as tf

from recurrent_bert.layers.kernels import gated
from recurrent_bert.layers.kernels.tf_graph import dynamic_update_slice
from recurrent_bert.layers.kernels.tf_graph import in_xla_program
from recurrent_bert.layers.kernels.tf_graph import with_static_shape

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
#            place. Saves only c; the backward loop recomputes s per step. The output
#            gating (c + b_c) * gate and its gradients ride in the same loops, except
#            inside a whole-model XLA program (one elementwise pass there). Fastest
#            block in graph mode and under XLA (also inside a whole-model XLA step),
#            least memory.
#   "loop":  plain TF ops (no XLA): `unroll` blocks of k positions per while-loop
#            iteration to amortise TF's per-iteration overhead; saves c and s, and does
#            everything but the 2-op reverse recurrence in vectorised passes.
#   "scan":  the original plain `tf.scan` over T/k blocks, autodiff through the scan.
# ("auto" and the portable implementation: layers/kernels/__init__.py.)


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
      lambda i, *_: i < num_chunks,
      body,
      (tf.constant(0), initial, arrays),
      maximum_iterations=num_chunks,
  )
  results = []
  for a in arrays:
    out = a.stack()  # [num_chunks, unroll, B, k, D]
    out = tf.reshape(out, tf.concat([[padded], tf.shape(out)[2:]], 0))
    if reverse:
      out = tf.reverse(out[padded - num_blocks :], [0])
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
  elems, previous = (
      [
          t
          if isinstance(padding, int) and padding == 0
          else tf.pad(t, [[0, 0], [0, padding], [0, 0]])
          for t in ts
      ]
      for ts in (elems, previous)
  )
  shape = tf.nest.flatten(initial)[0].shape
  size = tf.shape(tf.nest.flatten(initial)[0])

  def read(t, start):
    piece = tf.slice(t, [0, start, 0], size)
    piece.set_shape(shape)
    return piece

  def body(i, state, buffers):
    start = (num_blocks - 1 - i if reverse else i) * k
    pieces = [read(t, start) for t in elems]
    pieces += [
        tf.where(start > 0, read(t, tf.maximum(start - k, 0)), tf.zeros_like(p))
        for t, p in zip(previous, pieces)
    ]
    state, outs = step(state, *pieces)
    buffers = [dynamic_update_slice(b, o, [0, start, 0]) for b, o in zip(buffers, outs)]
    return i + 1, state, buffers

  buffers = [tf.zeros_like(elems[0]) for _ in range(num_outputs)]
  _, state, buffers = tf.while_loop(
      lambda i, *_: i < num_blocks,
      body,
      (tf.constant(0), initial, buffers),
      maximum_iterations=num_blocks,
  )
  if not (isinstance(padding, int) and padding == 0):
    buffers = [b[:, :length] for b in buffers]
  return buffers + [state]


def _gate_backward(dout, c, gate, state_bias):
  """Gradient on c, and on (gate, state_bias) when there is a gate."""
  if gate is None:
    return dout, ()
  dc = dout * gate
  return dc, (dout * (c + state_bias), tf.reduce_sum(dc, [0, 1]))


def _fused_forward(x1, residual, alpha, beta, k, gate, state_bias, gate_in_loop):
  """(gated output, states c) (XLA program). residual None: x1. `gate_in_loop`: gate
  each block inside the loop (one pass over memory) rather than all of c after it."""
  in_loop = gate is not None and gate_in_loop

  def step(c_prev, x1_block, residual_block, *gate_block):
    z = c_prev - x1_block
    c = z * tf.sigmoid(alpha * z + beta) + residual_block
    return c, (c,) + tuple(gated(c, g, state_bias) for g in gate_block)

  batch, depth = tf.shape(x1)[0], tf.shape(x1)[2]
  c, *out, _ = _xla_loop(
      step,
      [x1, x1 if residual is None else residual] + ([gate] if in_loop else []),
      tf.zeros([batch, k, depth], x1.dtype),
      2 if in_loop else 1,
      k,
  )
  c = with_static_shape(c, x1.shape)
  out = out[0] if in_loop else gated(c, gate, state_bias)
  return with_static_shape(out, x1.shape), c


def _fused_backward(dout, c, x1, alpha, beta, k, shared, gate, state_bias, gate_in_loop):
  """Gradients on (x1, residual, alpha, beta, gate, state_bias) from the saved states
  (XLA program); no residual's if `shared` (residual is x1: one buffer instead of two
  and a sum), no gate's without a gate.

  One reverse loop; each step recomputes its gate from c[i-k] and x1[i] (cheaper than
  storing it: the loop is bound by memory traffic, not arithmetic) and carries
  dz[i] = g[i] Swish'(z[i]) to block i - k, plus the partial sums of dalpha, dbeta
  (and, with `gate_in_loop`, the gating's gradients and d state_bias).
  """
  in_loop = gate is not None and gate_in_loop
  if not in_loop:
    dout, dgating = _gate_backward(dout, c, gate, state_bias)  # now the gradient on c

  def step(state, dout_block, x1_block, *rest):
    dz_next, dalpha, dbeta, *dbias = state  # dbias: [d state_bias partial sum] in_loop
    c_prev, dgate = rest[-1], ()
    if in_loop:
      gate_block, c_block = rest[:2]
      dc, (dgate_block, _) = _gate_backward(dout_block, c_block, gate_block, state_bias)
      dbias, dgate = [dbias[0] + dc], (dgate_block,)
    else:
      dc = dout_block
    g = dc + dz_next
    z = c_prev - x1_block
    s = tf.sigmoid(alpha * z + beta)
    q = g * z * s * (1 - s)  # g dSwish/dbeta; g dSwish/dalpha = z q
    dz = g * s + alpha * q  # g dSwish/dz
    return ((dz, dalpha + z * q, dbeta + q, *dbias), ((g - dz,) if shared else (-dz, g)) + dgate)

  batch, depth = tf.shape(x1)[0], tf.shape(x1)[2]
  zeros = tf.zeros([batch, k, depth], dout.dtype)
  *dinputs, (_, *sums) = _xla_loop(
      step,
      [dout, x1] + ([gate, c] if in_loop else []),
      (zeros,) * (3 + in_loop),
      (1 if shared else 2) + in_loop,
      k,
      reverse=True,
      previous=[c],
  )
  totals = tuple(tf.reduce_sum(t, [0, 1]) for t in sums)  # dalpha, dbeta[, dbias]
  dinputs = [with_static_shape(d, x1.shape) for d in dinputs]
  if not in_loop:
    return tuple(dinputs) + totals[:2] + dgating
  return tuple(dinputs[:-1]) + totals[:2] + (dinputs[-1], totals[2])


def _loop_forward(x1, residual, alpha, beta, k, unroll):
  """States c and gates s = sigmoid(alpha z + beta), z[i] = c[i-k] - x1[i]."""

  def step(c_prev, x1_block, residual_block):
    z = c_prev - x1_block
    s = tf.sigmoid(alpha * z + beta)
    c = z * s + residual_block
    return c, (c, s)

  batch, depth = tf.shape(x1)[0], tf.shape(x1)[2]
  c, s = _chunked_loop(step, [x1, residual], tf.zeros([batch, k, depth], x1.dtype), 2, k, unroll)
  return with_static_shape(c, x1.shape), with_static_shape(s, x1.shape)


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
  (g,) = _chunked_loop(
      step,
      [_shift_earlier(dswish, k), dc],
      tf.zeros([batch, k, depth], dc.dtype),
      1,
      k,
      unroll,
      reverse=True,
  )
  g = with_static_shape(g, dc.shape)
  return -g * dswish, g, tf.reduce_sum(g * z * q, [0, 1]), tf.reduce_sum(g * q, [0, 1])


_fused_forward_xla = tf.function(_fused_forward, jit_compile=True, autograph=False)
_fused_backward_xla = tf.function(_fused_backward, jit_compile=True, autograph=False)


def _custom_gradient_recurrence(x1, residual, alpha, beta, gate, state_bias, k, unroll, fused):
  shared = residual is None  # residual is x1: one input, one gradient
  names = ("x1", "residual", "alpha", "beta", "gate", "state_bias")
  given = {
      n: t for n, t in zip(names, (x1, residual, alpha, beta, gate, state_bias)) if t is not None
  }

  @tf.custom_gradient
  def recurrence(*args):
    # stop_gradient: no enclosing tape may differentiate through the loop itself (that
    # would store per-step intermediates, and cannot cross the XLA boundary).
    t = dict(zip(given, (tf.stop_gradient(a) for a in args)))
    x1, residual, alpha, beta, gate, state_bias = (t.get(n) for n in names)
    if fused:
      # Measured: gating inside the loop wins when the loops are their own XLA programs
      # (graph mode); inside a whole-model XLA program a separate elementwise pass that
      # XLA fuses with its neighbours wins (latency-bound block under XLA, k=1: 1.27x
      # vs 1.20x the FFN; base 1.16x vs 1.09x).
      in_loop = not in_xla_program()
      out, c = _fused_forward_xla(x1, residual, alpha, beta, k, gate, state_bias, in_loop)
      return out, lambda dout: _fused_backward_xla(
          dout, c, x1, alpha, beta, k, shared, gate, state_bias, in_loop
      )
    c, s = _loop_forward(x1, x1 if shared else residual, alpha, beta, k, unroll)

    def grad(dout):
      dc, dgating = _gate_backward(dout, c, gate, state_bias)
      dx1, dresidual, dalpha, dbeta = _loop_backward(dc, c, s, x1, alpha, k, unroll)
      if shared:
        return (dx1 + dresidual, dalpha, dbeta) + dgating
      return (dx1, dresidual, dalpha, dbeta) + dgating

    return gated(c, gate, state_bias), grad

  return recurrence(*given.values())


def _scan_recurrence(x1, residual, alpha, beta, k):
  """The original implementation: `tf.scan` over T/k blocks, autodiff through it."""
  batch, length, depth = tf.unstack(tf.shape(x1))
  num_blocks = (length + k - 1) // k

  def step(c_prev, block):
    x1_block, residual_block = block
    z = c_prev - x1_block
    return z * tf.sigmoid(alpha * z + beta) + residual_block

  c = tf.scan(
      step,
      (_to_blocks(x1, num_blocks, k), _to_blocks(residual, num_blocks, k)),
      initializer=tf.zeros([batch, k, depth], x1.dtype),
  )
  return _from_blocks(c, length)


def recurrence(x1, residual, alpha, beta, step_size, implementation, unroll, gate, state_bias):
  """`layers.swish_rnn.swish_rnn_recurrence` with a TensorFlow implementation ("fused",
  "loop" or "scan"), arguments already checked there (same shapes and meaning).

  With a `gate`, "fused" and "loop" do the gating in the same program as the recurrence
  (one pass over memory instead of separate TF ops).
  """
  x1, residual, alpha, beta, gate, state_bias = (
      None if t is None else tf.convert_to_tensor(t)
      for t in (x1, residual, alpha, beta, gate, state_bias)
  )
  if implementation == "scan":
    c = _scan_recurrence(x1, x1 if residual is None else residual, alpha, beta, step_size)
    return gated(c, gate, state_bias)
  return _custom_gradient_recurrence(
      x1,
      residual,
      alpha,
      beta,
      gate,
      state_bias,
      step_size,
      unroll,
      fused=implementation == "fused",
  )
