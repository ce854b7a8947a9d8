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
extra pass over memory. The forward saves c (float32) for the backward, which recomputes
z, s and a from it, as the other implementations' hand-written gradients do. The k
interleaved chains of step size k are k carries of the loop, so k need not be a power of 2.
The [D] sums come out per row ([B, D] partial sums, one writer each) and are added up
outside: no atomics.

Where it runs: Pallas lowers the kernels to Triton for a CUDA GPU. `interpret=True` runs
the same kernel bodies through Pallas' interpreter on any device, which is how the CPU
tests check them against the numpy loop of SPEC §4, and how a CPU rehearses a GPU script
(`INTERPRET_ENV`). `triton_module_text` lowers them for CUDA without a GPU, so the CPU
tests also check that the Triton lowering accepts every kernel.

JAX is imported inside the functions, so importing this module imports no framework.
"""

import functools
import os
from typing import NamedTuple


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
# Set to 1, Pallas runs these kernels in its interpreter on whatever device JAX has.
INTERPRET_ENV = "RECURRENT_BERT_PALLAS_INTERPRET"


def interpreted() -> bool:
  return os.environ.get(INTERPRET_ENV, "") == "1"


def channels_per_program(depth: int, block_d: int) -> int:
  """`block_d`, or the next power of 2 at or above a smaller depth (Triton's vectors
  have power-of-2 lengths)."""
  return min(block_d, 1 << max(depth - 1, 0).bit_length())


def blocks_per_iteration(num_blocks: int, unroll: int) -> int:
  """The largest power of 2 up to `unroll` that divides `num_blocks` (no extra padding)."""
  u = 1
  while u * 2 <= unroll and num_blocks % (u * 2) == 0:
    u *= 2
  return u


def compiler_params(num_warps, num_stages=1):
  """Triton's settings for a recurrence kernel (this module's and pallas_blstm's)."""
  from jax.experimental.pallas import triton as pallas_triton

  # Here one stage: the loop's loads feed a serial chain; the unrolled body issues them
  # early. pallas_blstm's loops are matmuls' reductions, which stages can pipeline.
  return pallas_triton.CompilerParams(num_warps=num_warps, num_stages=num_stages)


def _forward_kernel(*refs, k, unroll, num_blocks, block_d, has_residual, has_gate):
  """One program: row b, channels [j·block_d, (j+1)·block_d), all T positions."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  refs = list(refs)
  x1_ref = refs.pop(0)
  residual_ref = refs.pop(0) if has_residual else None
  gate_ref, state_bias_ref = (refs.pop(0), refs.pop(0)) if has_gate else (None, None)
  alpha_ref, beta_ref, c_ref = refs[:3]
  out_ref = refs[3] if has_gate else None

  b, cols = pl.program_id(0), pl.ds(pl.program_id(1) * block_d, block_d)
  alpha = alpha_ref[cols].astype(jnp.float32)
  beta = beta_ref[cols].astype(jnp.float32)
  state_bias = state_bias_ref[cols].astype(jnp.float32) if has_gate else None

  width = unroll * k  # positions per iteration

  def blocks(n, chains):  # chains[p]: c at position n·width + p - k, [block_d] float32
    chains = list(chains)
    for p in range(width):
      t = n * width + p
      x1 = x1_ref[b, t, cols].astype(jnp.float32)
      residual = residual_ref[b, t, cols].astype(jnp.float32) if has_residual else x1
      z = chains[p % k] - x1
      c = z * jax.nn.sigmoid(alpha * z + beta) + residual
      c_ref[b, t, cols] = c
      if has_gate:
        gate = gate_ref[b, t, cols].astype(jnp.float32)
        out_ref[b, t, cols] = ((c + state_bias) * gate).astype(out_ref.dtype)
      chains[p % k] = c
    return tuple(chains)

  zeros = jnp.zeros((block_d,), jnp.float32)
  jax.lax.fori_loop(0, num_blocks // unroll, blocks, (zeros,) * k)


def _backward_kernel(*refs, k, unroll, num_blocks, block_d, has_residual, has_gate):
  """The reverse walk of one program (module docstring); partial [D] sums per row."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  refs = list(refs)
  dout_ref, c_ref, x1_ref = refs.pop(0), refs.pop(0), refs.pop(0)
  gate_ref, state_bias_ref = (refs.pop(0), refs.pop(0)) if has_gate else (None, None)
  alpha_ref, beta_ref, dx1_ref = refs.pop(0), refs.pop(0), refs.pop(0)
  dresidual_ref = refs.pop(0) if has_residual else None
  dgate_ref = refs.pop(0) if has_gate else None
  dalpha_ref, dbeta_ref = refs.pop(0), refs.pop(0)
  dstate_bias_ref = refs.pop(0) if has_gate else None

  b, cols = pl.program_id(0), pl.ds(pl.program_id(1) * block_d, block_d)
  alpha = alpha_ref[cols].astype(jnp.float32)
  beta = beta_ref[cols].astype(jnp.float32)
  state_bias = state_bias_ref[cols].astype(jnp.float32) if has_gate else None

  width = unroll * k  # positions per iteration
  iterations = num_blocks // unroll

  def blocks(m, carry):  # walks positions T-1 .. 0
    chains, sums = carry  # chains[p % k]: (g, a) at position t + k
    n = iterations - 1 - m
    chains = list(chains)
    dalpha, dbeta, dstate_bias = sums
    for p in reversed(range(width)):
      t = n * width + p
      dout = dout_ref[b, t, cols].astype(jnp.float32)
      c = c_ref[b, t, cols]
      if has_gate:
        gate = gate_ref[b, t, cols].astype(jnp.float32)
        dgate_ref[b, t, cols] = (dout * (c + state_bias)).astype(dgate_ref.dtype)
        dc = dout * gate
        dstate_bias = dstate_bias + dc
      else:
        dc = dout
      g_next, a_next = chains[p % k]
      g = dc + a_next * g_next
      # c[t - k], 0 before the sequence: the index is clamped, the value masked.
      previous = jnp.where(t >= k, c_ref[b, jnp.maximum(t - k, 0), cols], 0.0)
      z = previous - x1_ref[b, t, cols].astype(jnp.float32)
      s = jax.nn.sigmoid(alpha * z + beta)
      q = z * s * (1.0 - s)
      a = s + alpha * q
      if has_residual:
        dx1_ref[b, t, cols] = (-g * a).astype(dx1_ref.dtype)
        dresidual_ref[b, t, cols] = g.astype(dresidual_ref.dtype)
      else:  # x1 is the residual too: both uses in one gradient
        dx1_ref[b, t, cols] = (g - g * a).astype(dx1_ref.dtype)
      dalpha = dalpha + g * z * q
      dbeta = dbeta + g * q
      chains[p % k] = (g, a)
    return tuple(chains), (dalpha, dbeta, dstate_bias)

  zeros = jnp.zeros((block_d,), jnp.float32)
  _, (dalpha, dbeta, dstate_bias) = jax.lax.fori_loop(
      0, iterations, blocks, (((zeros, zeros),) * k, (zeros, zeros, zeros))
  )
  dalpha_ref[b, cols] = dalpha
  dbeta_ref[b, cols] = dbeta
  if has_gate:
    dstate_bias_ref[b, cols] = dstate_bias


def _padded(t, length, depth):
  """[B, T, D] zero-padded at the end to [B, length, depth]; [D] to [depth]."""
  from jax import numpy as jnp

  if t.ndim == 1:
    return jnp.pad(t, [(0, depth - t.shape[0])])
  return jnp.pad(t, [(0, 0), (0, length - t.shape[1]), (0, depth - t.shape[2])])


@functools.cache
def _recurrence(k, has_residual, has_gate, interpret, shape, dtypes, tiling):
  """The custom-gradient function of (x1, residual, gate, state_bias, alpha, beta) for
  one static configuration: x1's `shape` [B, T, D], `dtypes` of (x1, residual, gate, alpha,
  beta, state_bias) (None where absent; absent inputs are passed as None), a `Tiling`."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  batch, length, depth = shape
  block_d = channels_per_program(depth, tiling.block_d)
  num_blocks = -(-length // k)
  padded_length, padded_depth = num_blocks * k, -(-depth // block_d) * block_d
  statics = dict(
      k=k,
      unroll=blocks_per_iteration(num_blocks, tiling.unroll),
      num_blocks=num_blocks,
      block_d=block_d,
      has_residual=has_residual,
      has_gate=has_gate,
  )
  sequence = lambda dtype: jax.ShapeDtypeStruct((batch, padded_length, padded_depth), dtype)
  pad = lambda t: None if t is None else _padded(t, padded_length, padded_depth)
  trim = lambda t: t[:, :length, :depth]
  x1_dtype, residual_dtype, gate_dtype, alpha_dtype, beta_dtype, state_bias_dtype = dtypes

  def call(kernel, inputs, outputs):
    return pl.pallas_call(
        functools.partial(kernel, **statics),
        out_shape=outputs,
        grid=(batch, padded_depth // block_d),
        interpret=interpret,
        compiler_params=None if interpret else compiler_params(tiling.num_warps),
        name=f"swish_rnn_{kernel.__name__.strip('_').split('_')[0]}_k{k}",
    )(*inputs)

  def forward(x1, residual, gate, state_bias, alpha, beta):
    inputs = [pad(x1)] + [pad(residual)] * has_residual + [pad(gate), pad(state_bias)] * has_gate
    inputs += [pad(alpha), pad(beta)]
    outputs = [sequence(jnp.float32)] + ([sequence(gate_dtype)] if has_gate else [])  # c, out
    results = call(_forward_kernel, inputs, outputs)
    out = results[-1] if has_gate else results[0].astype(x1_dtype)
    return trim(out), (results[0], inputs)

  @jax.custom_vjp
  def run(x1, residual, gate, state_bias, alpha, beta):
    return forward(x1, residual, gate, state_bias, alpha, beta)[0]

  def run_backward(saved, dout):
    c, inputs = saved
    x1 = inputs[0]
    gate_and_bias = inputs[1 + has_residual : 3 + has_residual] if has_gate else []
    kernel_inputs = [pad(dout), c, x1] + gate_and_bias + inputs[-2:]
    per_row = jax.ShapeDtypeStruct((batch, padded_depth), jnp.float32)
    outputs = [sequence(x1_dtype)]
    outputs += [sequence(residual_dtype)] if has_residual else []
    outputs += [sequence(gate_dtype)] if has_gate else []
    outputs += [per_row, per_row] + [per_row] * has_gate
    results = list(call(_backward_kernel, kernel_inputs, outputs))
    dx1 = trim(results.pop(0))
    dresidual = trim(results.pop(0)) if has_residual else None
    dgate = trim(results.pop(0)) if has_gate else None
    sums = [s.sum(axis=0)[:depth] for s in results]  # [B, D] partial sums -> [D]
    dalpha, dbeta = sums[0].astype(alpha_dtype), sums[1].astype(beta_dtype)
    dstate_bias = sums[2].astype(state_bias_dtype) if has_gate else None
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
    interpret: run Pallas' interpreter (any device); None reads `INTERPRET_ENV`.
    tiling: a `Tiling`; None is `TILING`.
  Returns:
    (c + state_bias) * gate in gate's dtype, or c in x1's dtype: [B, T, D].
  """
  if interpret is None:
    interpret = interpreted()
  run = _configured(x1, residual, alpha, beta, step_size, gate, state_bias, interpret, tiling)
  return run(x1, residual, gate, state_bias, alpha, beta)


def _configured(x1, residual, alpha, beta, step_size, gate, state_bias, interpret, tiling):
  dtypes = tuple(
      None if t is None else str(t.dtype) for t in (x1, residual, gate, alpha, beta, state_bias)
  )
  has_residual, has_gate = residual is not None, gate is not None
  return _recurrence(
      step_size, has_residual, has_gate, bool(interpret), tuple(x1.shape), dtypes, tiling or TILING
  )


def triton_module_text(x1_shape, step_size, has_residual, has_gate, dtype="float32"):
  """The StableHLO text of the forward and backward kernels lowered for a CUDA GPU, which
  needs no GPU: lowering fails here if Triton cannot take a kernel at these shapes."""
  import jax
  from jax import numpy as jnp

  depth = x1_shape[-1]
  sequence = jax.ShapeDtypeStruct(x1_shape, jnp.dtype(dtype))
  vector = jax.ShapeDtypeStruct((depth,), jnp.float32)
  run = _configured(
      sequence,
      sequence if has_residual else None,
      vector,
      vector,
      step_size,
      sequence if has_gate else None,
      vector if has_gate else None,
      False,
      None,
  )

  def loss(x1, residual, gate, state_bias, alpha, beta):
    return run(x1, residual, gate, state_bias, alpha, beta).astype(jnp.float32).sum()

  args = (sequence, sequence if has_residual else None)
  args += (sequence, vector) if has_gate else (None, None)
  args += (vector, vector)
  grad = jax.jit(jax.grad(loss, argnums=(0, 4, 5)))
  exported = jax.export.export(
      grad,
      platforms=["cuda"],
      disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")],
  )(*args)
  return exported.mlir_module()
