"""The SwishRNN recurrence's Triton kernels, for the PyTorch operators of triton_swish_rnn.

The same algorithm and gradient as the JAX Pallas kernels (pallas_swish_rnn.py): each
program owns one row b and BLOCK_D channels, keeps the state in float32 registers and
loops over T inside the launch, reading [B, T, D] in place. The state is a [K, BLOCK_D]
tile, one row per chain of step size k (K = k rounded up to a power of 2, the extra rows
masked), so one iteration advances a whole block of k positions:

  forward:   c[t] = Swish(c[t-k] - x1[t]) + residual[t];  out[t] = (c[t] + b_c) * gate[t]
  backward:  dc[t] = dout[t] gate[t],  g[t] = dc[t] + a[t+k] g[t+k]  (walking t down),
             a = Swish'(z) = s + alpha z s (1 - s),  z = c[t-k] - x1[t],
             dx1 = -g a,  dresidual = g,  dgate = dout (c + b_c),
             dalpha = sum g z q,  dbeta = sum g q,  db_c = sum dc,  q = z s (1 - s)

As in the Pallas kernels, c never goes to memory: the forward saves the state tile each
iteration of its loop starts from ([B, T / (UNROLL·k), K, D] float32), and the backward,
for each iteration from the last, runs its UNROLL blocks forward again from it, keeping z,
s and c per block in registers, then walks them back. The [D] sums come out per row
([B, D], one writer each) and are added up outside: no atomics.
Positions past T are masked, not padded, so no input is copied. With a FUSED_GATE code the
kernels read X1 and X2 from the layer's one [B, T, 2, D] product in place and make the
gate act(X2 + b_g) in registers (the exact GELU through the Pallas module's erfc fit).

`cuda_assembly` compiles the kernels for a CUDA GPU without one, so the CPU tests also
check that Triton takes every kernel. Importing this module imports Triton, not PyTorch.
"""

import triton
import triton.language as tl

from recurrent_bert.layers.kernels import pallas_swish_rnn
from recurrent_bert.layers.kernels.pallas_support import blocks_per_iteration
from recurrent_bert.layers.kernels.pallas_swish_rnn import GATES
from recurrent_bert.layers.kernels.pallas_swish_rnn import Tiling
from recurrent_bert.layers.kernels.pallas_swish_rnn import channels_per_program

# The Pallas kernels' split of the work until a card has timed others for these kernels.
TILING = Tiling()
# The fused gate's code in the kernels (FUSED_GATE): 0 for a gate made outside.
GATE_CODES = {name: code for code, name in enumerate(GATES, start=1)}
# The Pallas kernels' erfc fit (pallas_swish_rnn.ERFC_FIT), as the constants Triton reads.
_E0, _E1, _E2, _E3, _E4, _E5, _E6, _E7, _E8, _E9 = map(tl.constexpr, pallas_swish_rnn.ERFC_FIT)
_SQRT_HALF = tl.constexpr(pallas_swish_rnn.SQRT_HALF)
_INV_SQRT_2PI = tl.constexpr(pallas_swish_rnn.INV_SQRT_2PI)


@triton.jit
def _erfc(x):
  """erfc of float32 x from exp alone (pallas_swish_rnn.erfc's fit)."""
  z = tl.abs(x)
  t = 1.0 / (1.0 + 0.5 * z)
  fit = ((((_E9 * t + _E8) * t + _E7) * t + _E6) * t + _E5) * t + _E4
  fit = (((fit * t + _E3) * t + _E2) * t + _E1) * t + _E0
  tail = t * tl.exp(fit - z * z)
  return tl.where(x >= 0, tail, 2.0 - tail)


@triton.jit
def _activated(u, FUSED_GATE: tl.constexpr):
  """(gate(u), gate'(u)) of float32 u: GELU (exact) for code 1, sigmoid for 2."""
  if FUSED_GATE == 2:
    s = tl.sigmoid(u)
    slope = s * (1.0 - s)
  else:
    cdf = 0.5 * _erfc(-u * _SQRT_HALF)
    s = u * cdf
    slope = cdf + u * tl.exp(-0.5 * u * u) * _INV_SQRT_2PI
  return s, slope


@triton.jit
def _channel_vectors(
    alpha_ptr,
    beta_ptr,
    state_bias_ptr,
    gate_ptr,
    cols,
    D: tl.constexpr,
    HAS_GATE: tl.constexpr,
    FUSED_GATE: tl.constexpr,
):
  """A program's alpha, beta, state bias and gate bias as float32 [1, BLOCK_D] (the
  biases: alpha's values, unused, without a gate or without a fused gate; a fused gate's
  bias is at gate_ptr)."""
  alpha = tl.load(alpha_ptr + cols, mask=cols < D, other=0.0).to(tl.float32)
  beta = tl.load(beta_ptr + cols, mask=cols < D, other=0.0).to(tl.float32)
  state_bias = alpha
  if HAS_GATE:
    state_bias = tl.load(state_bias_ptr + cols, mask=cols < D, other=0.0).to(tl.float32)
  gate_bias = alpha
  if FUSED_GATE:
    gate_bias = tl.load(gate_ptr + cols, mask=cols < D, other=0.0).to(tl.float32)
  return alpha, beta, state_bias, gate_bias


@triton.jit
def _reads(
    x1_ptr,
    residual_ptr,
    gate_ptr,
    gate_bias,
    offsets,
    rows,
    cols,
    D: tl.constexpr,
    mask,
    HAS_RESIDUAL: tl.constexpr,
    HAS_GATE: tl.constexpr,
    FUSED_GATE: tl.constexpr,
):
  """(x1, residual, gate, gate's slope) at `offsets` of [B, T, D] (`rows` = b·T + t), as
  float32 tiles: from the separate inputs (the gate as given, slope unused), or with a
  FUSED_GATE from the [B, T, 2, D] projections, the gate made of X2 and its bias."""
  if FUSED_GATE:
    x_offsets = rows * (2 * D) + cols
    x1 = tl.load(x1_ptr + x_offsets, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x1_ptr + x_offsets + D, mask=mask, other=0.0).to(tl.float32)
    residual = x1
    if HAS_RESIDUAL:
      residual = x2
    gate, slope = _activated(x2 + gate_bias, FUSED_GATE)
  else:
    x1 = tl.load(x1_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    residual = x1
    if HAS_RESIDUAL:
      residual = tl.load(residual_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    gate = x1
    if HAS_GATE:
      gate = tl.load(gate_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    slope = gate
  return x1, residual, gate, slope


@triton.jit
def _swish_step(previous, x1, residual, alpha, beta):
  """(z, s, c) of a block from c at the block before: z = c[t - k] - x1[t],
  s = sigmoid(alpha z + beta), c[t] = z s + residual[t] (float32 tiles)."""
  z = previous - x1
  s = tl.sigmoid(alpha * z + beta)
  return z, s, z * s + residual


@triton.jit
def _starts_at(starts_ptr, b, outer, iterations, chain, cols, K: tl.constexpr, D: tl.constexpr):
  """(pointers, mask) of the K states iteration `outer` of a program's loop starts from, in
  the saved [B, iterations, K, D] float32 array: the one layout both kernels use."""
  return starts_ptr + ((b * iterations + outer) * K + chain) * D + cols, (chain < K) & (cols < D)


@triton.jit
def forward_kernel(
    x1_ptr,
    residual_ptr,
    gate_ptr,
    state_bias_ptr,
    alpha_ptr,
    beta_ptr,
    starts_ptr,
    out_ptr,
    T: tl.constexpr,
    D: tl.constexpr,
    K: tl.constexpr,
    K_TILE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UNROLL: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    HAS_GATE: tl.constexpr,
    FUSED_GATE: tl.constexpr,
):
  """One program: row b, channels [j·BLOCK_D, (j+1)·BLOCK_D), all T positions. Writes
  the gated output (or c, ungated) and, to starts_ptr [B, iterations, K, D], the state
  each iteration of its loop starts from. With a FUSED_GATE, x1_ptr is the [B, T, 2, D]
  projections (X2 the residual with HAS_RESIDUAL) and gate_ptr the gate's bias [D]."""
  b = tl.program_id(0).to(tl.int64)
  chain = tl.arange(0, K_TILE)[:, None]  # [K_TILE, 1]
  cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)[None, :]  # [1, BLOCK_D]
  alpha, beta, state_bias, gate_bias = _channel_vectors(
      alpha_ptr, beta_ptr, state_bias_ptr, gate_ptr, cols, D, HAS_GATE, FUSED_GATE
  )
  c_previous = tl.zeros((K_TILE, BLOCK_D), tl.float32)  # c at the block before
  num_blocks: tl.constexpr = (T + K - 1) // K
  iterations: tl.constexpr = num_blocks // UNROLL
  for outer in range(iterations):
    starts, in_range = _starts_at(starts_ptr, b, outer, iterations, chain, cols, K, D)
    tl.store(starts, c_previous, mask=in_range)
    # The unrolled blocks' loads do not depend on the state: they issue together.
    for inner in tl.static_range(UNROLL):
      t = (outer * UNROLL + inner) * K + chain  # [K_TILE, 1]
      mask = (chain < K) & (t < T) & (cols < D)
      offsets = (b * T + t) * D + cols
      x1, residual, gate, _ = _reads(
          x1_ptr,
          residual_ptr,
          gate_ptr,
          gate_bias,
          offsets,
          b * T + t,
          cols,
          D,
          mask,
          HAS_RESIDUAL,
          HAS_GATE,
          FUSED_GATE,
      )
      c = _swish_step(c_previous, x1, residual, alpha, beta)[2]
      out = c
      if HAS_GATE:
        out = (c + state_bias) * gate
      tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)
      c_previous = c


@triton.jit
def backward_kernel(
    dout_ptr,
    starts_ptr,
    x1_ptr,
    residual_ptr,
    gate_ptr,
    state_bias_ptr,
    alpha_ptr,
    beta_ptr,
    dx1_ptr,
    dresidual_ptr,
    dgate_ptr,
    dalpha_ptr,
    dbeta_ptr,
    dstate_bias_ptr,
    T: tl.constexpr,
    D: tl.constexpr,
    K: tl.constexpr,
    K_TILE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UNROLL: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    HAS_GATE: tl.constexpr,
    FUSED_GATE: tl.constexpr,
):
  """The reverse walk of one program (module docstring); partial [D] sums per row. With
  a FUSED_GATE (`forward_kernel`'s inputs), dx1_ptr is the [B, T, 2, D] gradient of the
  projections and dgate_ptr the gate bias' partial sums [B, D]."""
  b = tl.program_id(0).to(tl.int64)
  chain = tl.arange(0, K_TILE)[:, None]  # [K_TILE, 1]
  cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)[None, :]  # [1, BLOCK_D]
  alpha, beta, state_bias, gate_bias = _channel_vectors(
      alpha_ptr, beta_ptr, state_bias_ptr, gate_ptr, cols, D, HAS_GATE, FUSED_GATE
  )
  g_next = tl.zeros((K_TILE, BLOCK_D), tl.float32)  # g and a at the block after
  a_next = tl.zeros((K_TILE, BLOCK_D), tl.float32)
  dalpha = tl.zeros((K_TILE, BLOCK_D), tl.float32)
  dbeta = tl.zeros((K_TILE, BLOCK_D), tl.float32)
  dstate_bias = tl.zeros((K_TILE, BLOCK_D), tl.float32)
  dgate_bias = tl.zeros((K_TILE, BLOCK_D), tl.float32)
  num_blocks: tl.constexpr = (T + K - 1) // K
  iterations: tl.constexpr = num_blocks // UNROLL
  for backwards in range(iterations):
    outer = iterations - 1 - backwards
    # The forward's blocks of this iteration again, from the state it started with.
    starts, in_range = _starts_at(starts_ptr, b, outer, iterations, chain, cols, K, D)
    c_previous = tl.load(starts, mask=in_range, other=0.0)
    steps = ()  # (z, s, c) per block
    for inner in tl.static_range(UNROLL):
      t = (outer * UNROLL + inner) * K + chain
      mask = (chain < K) & (t < T) & (cols < D)
      x1, residual, _, _ = _reads(
          x1_ptr,
          residual_ptr,
          gate_ptr,
          gate_bias,
          (b * T + t) * D + cols,
          b * T + t,
          cols,
          D,
          mask,
          HAS_RESIDUAL,
          False,
          FUSED_GATE,
      )
      steps = steps + (_swish_step(c_previous, x1, residual, alpha, beta),)
      c_previous = steps[inner][2]
    for inner in tl.static_range(UNROLL - 1, -1, -1):  # walks T-1 .. 0
      t = (outer * UNROLL + inner) * K + chain
      mask = (chain < K) & (t < T) & (cols < D)
      offsets = (b * T + t) * D + cols
      # Masked positions load 0 as dout, so g stays exactly 0 past T.
      dout = tl.load(dout_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
      x1, _, gate, slope = _reads(
          x1_ptr,
          residual_ptr,
          gate_ptr,
          gate_bias,
          offsets,
          b * T + t,
          cols,
          D,
          mask,
          False,
          HAS_GATE,
          FUSED_GATE,
      )
      z, s, c = steps[inner]
      dc = dout
      dx2 = dout  # X2's gradient through the fused gate
      if HAS_GATE:
        dgate = dout * (c + state_bias)
        if FUSED_GATE:
          dx2 = dgate * slope
          dgate_bias += dx2
        else:
          tl.store(dgate_ptr + offsets, dgate.to(dgate_ptr.dtype.element_ty), mask=mask)
        dc = dout * gate
        dstate_bias += dc
      g = dc + a_next * g_next
      q = z * s * (1.0 - s)
      a = s + alpha * q
      dx1 = g - g * a  # x1 as the residual too: both uses in one gradient
      if HAS_RESIDUAL:
        dx1 = -g * a
      if FUSED_GATE:
        x_offsets = (b * T + t) * (2 * D) + cols
        if HAS_RESIDUAL:
          dx2 += g
        tl.store(dx1_ptr + x_offsets, dx1.to(dx1_ptr.dtype.element_ty), mask=mask)
        tl.store(dx1_ptr + x_offsets + D, dx2.to(dx1_ptr.dtype.element_ty), mask=mask)
      else:
        tl.store(dx1_ptr + offsets, dx1.to(dx1_ptr.dtype.element_ty), mask=mask)
        if HAS_RESIDUAL:
          tl.store(dresidual_ptr + offsets, g.to(dresidual_ptr.dtype.element_ty), mask=mask)
      dalpha += g * z * q
      dbeta += g * q
      g_next = g
      a_next = a
  row = b * D + tl.arange(0, BLOCK_D) + tl.program_id(1) * BLOCK_D
  in_range = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D) < D
  tl.store(dalpha_ptr + row, tl.sum(dalpha, axis=0), mask=in_range)
  tl.store(dbeta_ptr + row, tl.sum(dbeta, axis=0), mask=in_range)
  if HAS_GATE:
    tl.store(dstate_bias_ptr + row, tl.sum(dstate_bias, axis=0), mask=in_range)
  if FUSED_GATE:
    tl.store(dgate_ptr + row, tl.sum(dgate_bias, axis=0), mask=in_range)


def starts_shape(shape, k, tiling):
  """[B, iterations, k, D]: the states the forward saves for x1's `shape` [B, T, D]."""
  statics, _ = statics_and_grid(shape, k, tiling)
  iterations = -(-statics["T"] // k) // statics["UNROLL"]
  return (shape[0], iterations, k, shape[-1])


def statics_and_grid(shape, k, tiling):
  """The kernels' compile-time arguments and grid for x1's `shape` [B, T, D]."""
  batch, length, depth = shape
  block_d = channels_per_program(depth, tiling.block_d)
  num_blocks = -(-length // k)
  statics = dict(
      T=length,
      D=depth,
      K=k,
      K_TILE=1 << (k - 1).bit_length(),
      BLOCK_D=block_d,
      UNROLL=blocks_per_iteration(num_blocks, tiling.unroll),
  )
  return statics, (batch, -(-depth // block_d))


def cuda_assembly(
    x1_shape, step_size, has_residual, has_gate, dtype="float32", arch=90, fused_gate=None
):
  """The PTX of the forward and backward kernels compiled for a CUDA GPU of compute
  capability `arch` (90: an H100), which needs no GPU: Triton raises here if it cannot
  take a kernel at these shapes (x1's [B, T, D]; with a `fused_gate`, the form of
  `recurrence_of_projections`). Returns {"forward": text, "backward": text}."""
  from triton.backends.compiler import GPUTarget
  from triton.compiler import ASTSource

  statics, _ = statics_and_grid(x1_shape, step_size, TILING)
  code = GATE_CODES[fused_gate] if fused_gate else 0
  flags = dict(HAS_RESIDUAL=has_residual, HAS_GATE=has_gate or bool(code), FUSED_GATE=code)
  element = {"float32": "*fp32", "bfloat16": "*bf16", "float16": "*fp16"}[dtype]
  gates = () if code else ("gate",)  # a fused gate's bias and sums are float32 vectors
  sequences = dict(
      forward=("x1", "residual", "out") + gates,
      backward=("dout", "x1", "residual", "dx1", "dresidual")
      + gates
      + tuple("d" + g for g in gates),
  )
  assembly = {}
  for name, kernel in (("forward", forward_kernel), ("backward", backward_kernel)):
    signature = {}
    for arg in kernel.arg_names:
      if arg in statics or arg in flags:
        signature[arg] = "constexpr"
      elif arg == "starts_ptr" or arg[:-4] not in sequences[name]:
        signature[arg] = "*fp32"  # the saved states and the [D] vectors
      else:
        signature[arg] = element
    source = ASTSource(fn=kernel, signature=signature, constexprs={**statics, **flags})
    compiled = triton.compile(
        source,
        target=GPUTarget("cuda", arch, 32),
        options=dict(num_warps=TILING.num_warps, num_stages=1),
    )
    assembly[name] = compiled.asm["ptx"]
  return assembly
