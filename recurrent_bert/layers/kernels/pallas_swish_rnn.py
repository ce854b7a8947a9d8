"""The SwishRNN recurrence as one GPU kernel per direction of the pass, in Pallas ("pallas").

The portable form (portable_swish_rnn.py) is a `lax.scan` over T / k blocks: on a GPU every
step is a few kernel launches for a microsecond of work, 1,792 steps per base-size training
step. Here one Pallas kernel walks the whole sequence instead, as SRU's CUDA kernel does:
each program owns one row b and BLOCK_D channels, keeps their state c in float32 registers
and loops over T inside the launch, reading [B, T, D] in place (no transpose, no blocks).

  forward:   c[t] = Swish(c[t-k] - x1[t]) + residual[t];  out[t] = (c[t] + b_c) * gate[t]
  backward:  dc[t] = dout[t] gate[t],  g[t] = dc[t] + a[t+k] g[t+k]  (walking t down),
             a = Swish'(z) = s + alpha z s (1 - s),  z = c[t-k] - x1[t],
             dx1 = -g a,  dresidual = g,  dgate = dout (c + b_c),
             dalpha = sum g z q,  dbeta = sum g q,  db_c = sum dc,  q = z s (1 - s)

The gating is fused in both kernels, so neither c's gradient nor the gated output makes an
extra pass over memory. c itself never goes to memory: the forward saves only the k states
each iteration of its loop starts from ([B, T / w, k, D] float32, w = unroll·k positions an
iteration: an eighth of c at the default unroll), and the backward, for each iteration
from the last, runs its w positions forward again in registers from those states, keeping
z, s and c (the values its gradient needs anyway, so nothing is computed twice), then walks
them back. At swishrnn_base's size that is a [B, T, D] float32 write and read the less, 2 x
67 MB a layer a training step. The k interleaved chains of step size k are k carries of
the loop, so k need not be a power of 2.
The [D] sums come out per row ([B, D] partial sums, one writer each) and are added up
outside: no atomics.

`recurrence_of_projections` is the layer's form on a GPU: the kernels read X1 and X2 from
the one matmul's [B, T, 2, D] product in place and compute the gate act(X2 + b_g) in
registers, forward and backward, writing X1's and X2's gradients into one [B, T, 2, D]
tensor (the input's gradient is then one matmul too). Against the gate made by XLA, at
swishrnn_base's size, no pass copies X1 out of the product, writes the gate or makes
X2's gradient from the gate's (about 0.3 GB a layer a training step).

Where it runs: Pallas lowers the kernels to Triton for a CUDA GPU. `interpret=True` runs
the same kernel bodies through Pallas' interpreter on any device, which is how the CPU
tests check them against the numpy loop of SPEC §4, and how a CPU rehearses a GPU script
(`pallas_support.INTERPRET_ENV`). `triton_module_text` lowers them for CUDA without a
GPU, so the CPU tests also check that the Triton lowering accepts every kernel.

JAX is imported inside the functions, so importing this module imports no framework.
"""

import functools
from typing import NamedTuple

from recurrent_bert.layers.kernels import pallas_support


class Tiling(NamedTuple):
  """How the kernels split the work (what they compute does not depend on it).

  block_d: channels per program, one float32 vector of the state in registers.
  num_warps: warps per program (32 threads each).
  unroll: up to this many blocks of k positions per loop iteration: their loads do not
    depend on the state, so an unrolled body issues them together instead of waiting
    out one memory latency per position.
  """

  block_d: int = 128
  num_warps: int = 4
  unroll: int = 8


TILING = Tiling()


def channels_per_program(depth: int, block_d: int) -> int:
  """`block_d`, or the next power of 2 at or above a smaller depth (Triton's vectors
  have power-of-2 lengths)."""
  return min(block_d, 1 << max(depth - 1, 0).bit_length())


# Φ(x) = erfc(-x / √2) / 2 for the exact GELU: Triton has no erfc, so the kernels use a
# Chebyshev fit of erfc with fractional error below 1.2e-7 for every x (Press et al.,
# Numerical Recipes, 2nd ed., §6.2): erfc(z) = t exp(-z² + P(t)), t = 1 / (1 + z / 2),
# z >= 0, P's coefficients below from t⁰ up; erfc(-z) = 2 - erfc(z).
ERFC_FIT = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)
SQRT_HALF = 0.7071067811865476
INV_SQRT_2PI = 0.3989422804014327
GATES = ("gelu", "sigmoid")  # the gates `recurrence_of_projections` computes in a kernel


def erfc(x):
  """erfc of float32 x (any shape) from exp and arithmetic alone (the fit above)."""
  from jax import numpy as jnp

  z = jnp.abs(x)
  t = 1.0 / (1.0 + 0.5 * z)
  fit = ERFC_FIT[-1]
  for coefficient in reversed(ERFC_FIT[:-1]):
    fit = fit * t + coefficient
  tail = t * jnp.exp(fit - z * z)
  return jnp.where(x >= 0, tail, 2.0 - tail)


def activated(gate, u):
  """(act(u), act'(u)) of float32 u for a gate in `GATES`."""
  import jax
  from jax import numpy as jnp

  if gate == "sigmoid":
    s = jax.nn.sigmoid(u)
    return s, s * (1.0 - s)
  cdf = 0.5 * erfc(-u * SQRT_HALF)  # exact GELU: u Φ(u), slope Φ(u) + u φ(u)
  return u * cdf, cdf + u * jnp.exp(-0.5 * u * u) * INV_SQRT_2PI


class _Reads(NamedTuple):
  """One program's reads of its inputs at position t, float32 [block_d] each: `x1(t)`,
  `residual(t)` (x1 where x1 is the residual) and `gate(t)` -> (gate, its slope), the
  slope None for a gate given activated."""

  x1: object
  residual: object
  gate: object


def _reads(refs, b, cols, has_residual, has_gate, fused_gate):
  """`_Reads` from the input refs (popped from the front of `refs`, in the order the
  kernels take them: x1 or the projections, residual, gate or gate bias, state bias)."""
  from jax import numpy as jnp

  f32 = lambda value: value.astype(jnp.float32)
  if fused_gate:  # [B, T, 2, D]: X1 in slot 0, X2 in slot 1
    projections_ref, gate_bias_ref = refs.pop(0), refs.pop(0)
    gate_bias = f32(gate_bias_ref[cols])
    x1 = lambda t: f32(projections_ref[b, t, 0, cols])
    x2 = lambda t: f32(projections_ref[b, t, 1, cols])
    residual = x2 if has_residual else x1
    return _Reads(x1, residual, lambda t: activated(fused_gate, x2(t) + gate_bias))
  x1_ref = refs.pop(0)
  x1 = lambda t: f32(x1_ref[b, t, cols])
  residual_ref = refs.pop(0) if has_residual else None
  residual = (lambda t: f32(residual_ref[b, t, cols])) if has_residual else x1
  gate_ref = refs.pop(0) if has_gate else None
  return _Reads(x1, residual, (lambda t: (f32(gate_ref[b, t, cols]), None)) if has_gate else None)


def _swish_step(previous, x1, residual, alpha, beta):
  """(z, s, c) at one position from c[t - k] (`previous`), all float32 [block_d]:
  z = c[t - k] - x1[t], s = sigmoid(alpha z + beta), c[t] = z s + residual[t]."""
  import jax

  z = previous - x1
  s = jax.nn.sigmoid(alpha * z + beta)
  return z, s, z * s + residual


def _forward_kernel(*refs, k, unroll, num_blocks, block_d, has_residual, has_gate, fused_gate):
  """One program: row b, channels [j·block_d, (j+1)·block_d), all T positions. Writes
  the gated output (or c, ungated) and the states each loop iteration starts from."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  refs = list(refs)
  b, cols = pl.program_id(0), pl.ds(pl.program_id(1) * block_d, block_d)
  read = _reads(refs, b, cols, has_residual, has_gate, fused_gate)
  state_bias = refs.pop(0)[cols].astype(jnp.float32) if has_gate else None
  alpha_ref, beta_ref, starts_ref, out_ref = refs
  alpha = alpha_ref[cols].astype(jnp.float32)
  beta = beta_ref[cols].astype(jnp.float32)

  width = unroll * k  # positions per iteration

  def blocks(n, chains):  # chains[p]: c at position n·width + p - k, [block_d] float32
    for j in range(k):  # what the backward restarts this iteration from
      starts_ref[b, n, j, cols] = chains[j]
    chains = list(chains)
    for p in range(width):
      t = n * width + p
      c = _swish_step(chains[p % k], read.x1(t), read.residual(t), alpha, beta)[2]
      out = (c + state_bias) * read.gate(t)[0] if has_gate else c
      out_ref[b, t, cols] = out.astype(out_ref.dtype)
      chains[p % k] = c
    return tuple(chains)

  zeros = jnp.zeros((block_d,), jnp.float32)
  jax.lax.fori_loop(0, num_blocks // unroll, blocks, (zeros,) * k)


def _backward_kernel(*refs, k, unroll, num_blocks, block_d, has_residual, has_gate, fused_gate):
  """The reverse walk of one program (module docstring); partial [D] sums per row. The
  fused form writes dX1 and dX2 (the gate's gradient through act', plus g where X2 is
  the residual) into one [B, T, 2, D] output and sums the gate bias' gradient too."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  refs = list(refs)
  b, cols = pl.program_id(0), pl.ds(pl.program_id(1) * block_d, block_d)
  dout_ref, starts_ref = refs.pop(0), refs.pop(0)
  read = _reads(refs, b, cols, has_residual, has_gate, fused_gate)
  state_bias = refs.pop(0)[cols].astype(jnp.float32) if has_gate else None
  alpha = refs.pop(0)[cols].astype(jnp.float32)
  beta = refs.pop(0)[cols].astype(jnp.float32)
  dx1_ref = refs.pop(0)  # the fused form's [B, T, 2, D] gradient
  dresidual_ref = refs.pop(0) if has_residual and not fused_gate else None
  dgate_ref = refs.pop(0) if has_gate and not fused_gate else None
  # [B, S, D]: per row, dalpha, dbeta, then d state bias and d gate bias where present
  (sums_ref,) = refs

  width = unroll * k  # positions per iteration
  iterations = num_blocks // unroll

  def blocks(m, carry):  # walks the iterations' positions T-1 .. 0
    chains, sums = carry  # chains[p % k]: (g, a) at position t + k
    n = iterations - 1 - m
    chains, sums = list(chains), list(sums)
    # The forward's positions of this iteration again, from the states it started with.
    state = [starts_ref[b, n, j, cols] for j in range(k)]
    steps = []  # (z, s, c) per position
    for p in range(width):
      t = n * width + p
      steps.append(_swish_step(state[p % k], read.x1(t), read.residual(t), alpha, beta))
      state[p % k] = steps[-1][2]
    for p in reversed(range(width)):
      t = n * width + p
      dout = dout_ref[b, t, cols].astype(jnp.float32)
      z, s, c = steps[p]
      dc, dx2 = dout, None
      if has_gate:
        gate, slope = read.gate(t)
        dgate = dout * (c + state_bias)
        dc = dout * gate
        sums[2] = sums[2] + dc
        if fused_gate:
          dx2 = dgate * slope
          sums[3] = sums[3] + dx2
        else:
          dgate_ref[b, t, cols] = dgate.astype(dgate_ref.dtype)
      g_next, a_next = chains[p % k]
      g = dc + a_next * g_next
      q = z * s * (1.0 - s)
      a = s + alpha * q
      dx1 = -g * a if has_residual else g - g * a  # x1 as the residual: both uses in one
      if fused_gate:
        dx1_ref[b, t, 0, cols] = dx1.astype(dx1_ref.dtype)
        dx1_ref[b, t, 1, cols] = (dx2 + g if has_residual else dx2).astype(dx1_ref.dtype)
      else:
        dx1_ref[b, t, cols] = dx1.astype(dx1_ref.dtype)
        if has_residual:
          dresidual_ref[b, t, cols] = g.astype(dresidual_ref.dtype)
      sums[0] = sums[0] + g * z * q
      sums[1] = sums[1] + g * q
      chains[p % k] = (g, a)
    return tuple(chains), tuple(sums)

  zeros = jnp.zeros((block_d,), jnp.float32)
  _, sums = jax.lax.fori_loop(
      0, iterations, blocks, (((zeros, zeros),) * k, (zeros,) * sums_ref.shape[1])
  )
  for i, total in enumerate(sums):
    sums_ref[b, i, cols] = total


def _padded(t, length, depth):
  """[B, T, ..., D] zero-padded at the end to [B, length, ..., depth]; [D] to [depth]."""
  from jax import numpy as jnp

  widths = [(0, 0)] * t.ndim
  widths[-1] = (0, depth - t.shape[-1])
  if t.ndim > 1:
    widths[1] = (0, length - t.shape[1])
  return jnp.pad(t, widths) if any(w for _, w in widths) else t


@functools.cache
def _recurrence(k, has_residual, has_gate, fused_gate, interpret, shape, dtypes, tiling):
  """The custom-gradient function of (x1, residual, gate, state_bias, alpha, beta) for
  one static configuration: x1's `shape` [B, T, D], `dtypes` of (x1, residual, gate, alpha,
  beta, state_bias) (None where absent; absent inputs are passed as None), a `Tiling`.
  With a `fused_gate` (a name in `GATES`), x1 is the [B, T, 2, D] projections, gate the
  gate's bias [D] and `has_residual` says the residual is X2 (residual passed as None)."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  batch, length, depth = shape[0], shape[1], shape[-1]
  block_d = channels_per_program(depth, tiling.block_d)
  num_blocks = -(-length // k)
  padded_length, padded_depth = num_blocks * k, -(-depth // block_d) * block_d
  statics = dict(
      k=k,
      unroll=pallas_support.blocks_per_iteration(num_blocks, tiling.unroll),
      num_blocks=num_blocks,
      block_d=block_d,
      has_residual=has_residual,
      has_gate=has_gate,
      fused_gate=fused_gate,
  )
  sequence = lambda dtype, *slots: jax.ShapeDtypeStruct(
      (batch, padded_length, *slots, padded_depth), dtype
  )
  # [B, iterations, k, D]: the states each iteration of the kernels' loops starts from.
  iterations = num_blocks // statics["unroll"]
  starts = jax.ShapeDtypeStruct((batch, iterations, k, padded_depth), jnp.float32)
  pad = lambda t: None if t is None else _padded(t, padded_length, padded_depth)
  trim = lambda t: t[:, :length, ..., :depth]
  x1_dtype, residual_dtype, gate_dtype, alpha_dtype, beta_dtype, state_bias_dtype = dtypes
  separate_residual = has_residual and not fused_gate

  def call(kernel, inputs, outputs):
    return pl.pallas_call(
        functools.partial(kernel, **statics),
        out_shape=outputs,
        grid=(batch, padded_depth // block_d),
        interpret=interpret,
        compiler_params=None if interpret else pallas_support.compiler_params(tiling.num_warps),
        name=f"swish_rnn_{kernel.__name__.strip('_').split('_')[0]}_k{k}",
    )(*inputs)

  def forward(x1, residual, gate, state_bias, alpha, beta):
    inputs = [pad(x1)] + [pad(residual)] * separate_residual
    inputs += [pad(gate), pad(state_bias)] * has_gate + [pad(alpha), pad(beta)]
    out_dtype = gate_dtype if has_gate and not fused_gate else x1_dtype
    starts_of_iterations, out = call(_forward_kernel, inputs, [starts, sequence(out_dtype)])
    return trim(out), (starts_of_iterations, inputs)

  @jax.custom_vjp
  def run(x1, residual, gate, state_bias, alpha, beta):
    return forward(x1, residual, gate, state_bias, alpha, beta)[0]

  def run_backward(saved, dout):
    starts_of_iterations, inputs = saved
    kernel_inputs = [pad(dout), starts_of_iterations] + inputs
    # The [D] sums' partial sums per row, all in one array: one kernel adds them up.
    sums = jax.ShapeDtypeStruct((batch, 2 + has_gate + bool(fused_gate), padded_depth), jnp.float32)
    if fused_gate:  # dX1 and dX2 in one, then the gate bias' sums after the state bias'
      outputs = [sequence(x1_dtype, 2), sums]
    else:
      outputs = [sequence(x1_dtype)] + ([sequence(residual_dtype)] if has_residual else [])
      outputs += ([sequence(gate_dtype)] if has_gate else []) + [sums]
    results = list(call(_backward_kernel, kernel_inputs, outputs))
    dx1 = trim(results.pop(0))
    dresidual = trim(results.pop(0)) if separate_residual else None
    dgate = trim(results.pop(0)) if has_gate and not fused_gate else None
    (sums,) = results
    sums = sums.sum(axis=0)[:, :depth]  # [B, S, D] partial sums -> [S, D]
    dalpha, dbeta = sums[0].astype(alpha_dtype), sums[1].astype(beta_dtype)
    dstate_bias = sums[2].astype(state_bias_dtype) if has_gate else None
    if fused_gate:
      dgate = sums[3].astype(gate_dtype)  # the gate bias'
    return dx1, dresidual, dgate, dstate_bias, dalpha, dbeta

  run.defvjp(forward, run_backward)
  return run


def recurrence(
    x1, residual, alpha, beta, step_size, gate=None, state_bias=None, interpret=None, tiling=None
):
  """c[i] = Swish(c[i - k] - x1[i]) + residual[i], c[< 0] = 0, gated when `gate` is given.

  Args:
    x1: [B, T, D] float (any float dtype; the kernels compute in float32).
    residual: [B, T, D], or None for x1 itself (one input and one gradient for both uses).
    alpha, beta: [D].
    step_size: k >= 1.
    gate: None, or [B, T, D], the activated gate; then `state_bias` [D] too.
    interpret: run Pallas' interpreter (any device); None reads `pallas_support.INTERPRET_ENV`.
    tiling: a `Tiling`; None is `TILING`.
  Returns:
    (c + state_bias) * gate in gate's dtype, or c in x1's dtype: [B, T, D].
  """
  run = _configured(x1, residual, gate, alpha, beta, state_bias, step_size, None, interpret, tiling)
  return run(x1, residual, gate, state_bias, alpha, beta)


def recurrence_of_projections(
    projections,
    gate_bias,
    state_bias,
    alpha,
    beta,
    step_size,
    gate,
    residual_is_x2=False,
    interpret=None,
    tiling=None,
):
  """The gated recurrence from the [B, T, 2, D] product of X W1 and X W2 as it is:

    c[i] = Swish(c[i - k] - X1[i]) + (X2[i] if residual_is_x2 else X1[i]),  c[< 0] = 0
    out  = (c + state_bias) * gate(X2 + gate_bias)

  Args:
    projections: [B, T, 2, D] float: X1 in slot 0, X2 in slot 1.
    gate_bias, state_bias, alpha, beta: [D].
    step_size: k >= 1.
    gate: the gate's activation, a name in `GATES` (the exact GELU for "gelu").
    residual_is_x2: the paper's eq. 3 residual, X2; else X1.
    interpret, tiling: as for `recurrence`.
  Returns:
    out: [B, T, D] in the projections' dtype. Its gradient reaches the projections as one
    [B, T, 2, D] tensor.
  """
  if gate not in GATES:
    raise ValueError(f"gate must be one of {GATES}, got {gate!r}")
  residual = projections if residual_is_x2 else None  # only says there is one
  run = _configured(
      projections, residual, gate_bias, alpha, beta, state_bias, step_size, gate, interpret, tiling
  )
  return run(projections, None, gate_bias, state_bias, alpha, beta)


def _configured(
    x1, residual, gate, alpha, beta, state_bias, step_size, fused_gate, interpret, tiling
):
  dtypes = tuple(
      None if t is None else str(t.dtype) for t in (x1, residual, gate, alpha, beta, state_bias)
  )
  has_residual, has_gate = residual is not None, gate is not None
  return _recurrence(
      step_size,
      has_residual,
      has_gate,
      fused_gate,
      pallas_support.interpreted() if interpret is None else bool(interpret),
      tuple(x1.shape),
      dtypes,
      tiling or TILING,
  )


def triton_module_text(
    x1_shape, step_size, has_residual, has_gate, dtype="float32", fused_gate=None
):
  """The StableHLO text of the forward and backward kernels lowered for a CUDA GPU, which
  needs no GPU: lowering fails here if Triton cannot take a kernel at these shapes. With
  a `fused_gate`, the form of `recurrence_of_projections` ([B, T, 2, D] from x1_shape)."""
  import jax
  from jax import numpy as jnp

  batch, length, depth = x1_shape
  shape = (batch, length, 2, depth) if fused_gate else x1_shape
  sequence = jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))
  vector = jax.ShapeDtypeStruct((depth,), jnp.float32)
  residual = sequence if has_residual else None
  gate = (vector if fused_gate else sequence) if has_gate or fused_gate else None
  state_bias = vector if gate is not None else None
  run = _configured(
      sequence, residual, gate, vector, vector, state_bias, step_size, fused_gate, False, None
  )

  def loss(x1, residual, gate, state_bias, alpha, beta):
    return run(x1, residual, gate, state_bias, alpha, beta).astype(jnp.float32).sum()

  args = (sequence, None if fused_gate else residual, gate, state_bias, vector, vector)
  return pallas_support.cuda_module_text(jax.grad(loss, argnums=(0, 4, 5)), *args)
