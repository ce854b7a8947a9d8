"""The SwishRNN recurrence as one Triton kernel per direction of the pass, for PyTorch ("triton").

PyTorch's portable form (portable_swish_rnn.py) is a Python loop over T / k blocks: a few
kernel launches per block, each for a microsecond of work, and `torch.compile` unrolls
it. Here, as in the JAX Pallas kernels (pallas_swish_rnn.py, the same algorithm and
gradient), one Triton kernel walks the whole sequence: each program owns one row b and
BLOCK_D channels, keeps the state in float32 registers and loops over T inside the launch,
reading [B, T, D] in place. The state is a [K, BLOCK_D] tile, one row per chain of step
size k (K = k rounded up to a power of 2, the extra rows masked), so one iteration
advances a whole block of k positions:

  forward:   c[t] = Swish(c[t-k] - x1[t]) + residual[t];  out[t] = (c[t] + b_c) * gate[t]
  backward:  dc[t] = dout[t] gate[t],  g[t] = dc[t] + a[t+k] g[t+k]  (walking t down),
             a = Swish'(z) = s + alpha z s (1 - s),  z = c[t-k] - x1[t],
             dx1 = -g a,  dresidual = g,  dgate = dout (c + b_c),
             dalpha = sum g z q,  dbeta = sum g q,  db_c = sum dc,  q = z s (1 - s)

The forward saves c (float32) for the backward, which recomputes z, s and a from it. The
[D] sums come out per row ([B, D], one writer each) and are added up outside: no atomics.
Positions past T are masked, not padded, so no input is copied. `recurrence_of_projections`
is the layer's form on a GPU, as in the Pallas kernels: X1 and X2 read from the one
matmul's [B, T, 2, D] product in place, the gate act(X2 + b_g) made in registers (the
exact GELU through the Pallas module's erfc fit), one [B, T, 2, D] gradient.

The two passes are PyTorch custom operators (`recurrent_bert::swish_rnn_forward` and
`..._backward`) with their autograd formula and shape functions registered, so
`torch.compile` keeps the kernels whole, without a graph break.

Where it runs: on a CUDA GPU (Triton compiles the kernels for it), or anywhere in
Triton's interpreter when the process starts with `TRITON_INTERPRET=1` (slow: for tests
and for rehearsing a GPU script on a CPU). `cuda_assembly` compiles the kernels for a
CUDA GPU without one, so the CPU tests also check that Triton takes every kernel.

Importing this module imports PyTorch and Triton.
"""

from typing import List, Optional, Tuple

import torch
import triton
import triton.language as tl

from recurrent_bert.layers.kernels import pallas_swish_rnn
from recurrent_bert.layers.kernels.pallas_swish_rnn import GATES
from recurrent_bert.layers.kernels.pallas_swish_rnn import Tiling
from recurrent_bert.layers.kernels.pallas_swish_rnn import blocks_per_iteration
from recurrent_bert.layers.kernels.pallas_swish_rnn import channels_per_program

# The Pallas kernels' split of the work until a card has timed others for these kernels.
TILING = Tiling()
# The fused gate's code in the kernels (FUSED_GATE): 0 for a gate made outside.
_GATE_CODES = {name: code for code, name in enumerate(GATES, start=1)}
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
def _forward_kernel(
    x1_ptr,
    residual_ptr,
    gate_ptr,
    state_bias_ptr,
    alpha_ptr,
    beta_ptr,
    c_ptr,
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
  """One program: row b, channels [j·BLOCK_D, (j+1)·BLOCK_D), all T positions. With a
  FUSED_GATE, x1_ptr is the [B, T, 2, D] projections (X2 the residual with HAS_RESIDUAL)
  and gate_ptr the gate's bias [D]."""
  b = tl.program_id(0).to(tl.int64)
  chain = tl.arange(0, K_TILE)[:, None]  # [K_TILE, 1]
  cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)[None, :]  # [1, BLOCK_D]
  alpha, beta, state_bias, gate_bias = _channel_vectors(
      alpha_ptr, beta_ptr, state_bias_ptr, gate_ptr, cols, D, HAS_GATE, FUSED_GATE
  )
  c_previous = tl.zeros((K_TILE, BLOCK_D), tl.float32)  # c at the block before
  num_blocks: tl.constexpr = (T + K - 1) // K
  for outer in range(num_blocks // UNROLL):
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
      z = c_previous - x1
      c = z * tl.sigmoid(alpha * z + beta) + residual
      tl.store(c_ptr + offsets, c, mask=mask)
      out = c
      if HAS_GATE:
        out = (c + state_bias) * gate
      tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)
      c_previous = c


@triton.jit
def _backward_kernel(
    dout_ptr,
    c_ptr,
    x1_ptr,
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
  a FUSED_GATE (`_forward_kernel`'s inputs), dx1_ptr is the [B, T, 2, D] gradient of the
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
  for outer in range(num_blocks // UNROLL):
    for inner in tl.static_range(UNROLL):
      t = (num_blocks - 1 - outer * UNROLL - inner) * K + chain  # walks T-1 .. 0
      mask = (chain < K) & (t < T) & (cols < D)
      offsets = (b * T + t) * D + cols
      # Masked positions load 0 as dout, so g stays exactly 0 past T.
      dout = tl.load(dout_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
      # A separate residual is not read: its gradient is g itself.
      x1, _, gate, slope = _reads(
          x1_ptr,
          x1_ptr,
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
      dc = dout
      dx2 = dout  # X2's gradient through the fused gate
      if HAS_GATE:
        c = tl.load(c_ptr + offsets, mask=mask, other=0.0)
        dgate = dout * (c + state_bias)
        if FUSED_GATE:
          dx2 = dgate * slope
          dgate_bias += dx2
        else:
          tl.store(dgate_ptr + offsets, dgate.to(dgate_ptr.dtype.element_ty), mask=mask)
        dc = dout * gate
        dstate_bias += dc
      g = dc + a_next * g_next
      # c[t - k], 0 before the sequence.
      previous = tl.load(c_ptr + offsets - K * D, mask=mask & (t >= K), other=0.0)
      z = previous - x1
      s = tl.sigmoid(alpha * z + beta)
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


def _statics(shape, k, tiling):
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


def _placeholder(like: torch.Tensor) -> torch.Tensor:
  """Stands for an absent tensor: an operator's outputs are all tensors."""
  return like.new_empty(0)


def _state_shape(x1: torch.Tensor, fused_gate: int) -> Tuple[int, int, int]:
  """[B, T, D] of the state: x1's, or the [B, T, 2, D] projections' without the slot."""
  return (x1.shape[0], x1.shape[1], x1.shape[-1]) if fused_gate else tuple(x1.shape)


def _output_dtype(x1, gate, fused_gate):
  return x1.dtype if gate is None or fused_gate else gate.dtype


@torch.library.custom_op("recurrent_bert::swish_rnn_forward", mutates_args=())
def _forward(
    x1: torch.Tensor,
    residual: Optional[torch.Tensor],
    gate: Optional[torch.Tensor],
    state_bias: Optional[torch.Tensor],
    alpha: torch.Tensor,
    beta: torch.Tensor,
    step_size: int,
    tiling: List[int],
    fused_gate: int,
) -> Tuple[torch.Tensor, torch.Tensor]:
  """(c float32, out): out is (c + state_bias) * gate in gate's dtype, or c in x1's;
  `tiling` is a `Tiling`'s three numbers (an operator's arguments are plain types). With
  a `fused_gate` code, x1 is the [B, T, 2, D] projections, gate the gate's bias, residual
  x1 itself when X2 is the residual, and out is in x1's dtype."""
  tiling = Tiling(*tiling)
  x1 = x1.contiguous()
  shape = _state_shape(x1, fused_gate)
  c = torch.empty(shape, dtype=torch.float32, device=x1.device)
  out = torch.empty(shape, dtype=_output_dtype(x1, gate, fused_gate), device=x1.device)
  statics, grid = _statics(shape, step_size, tiling)
  _forward_kernel[grid](
      x1,
      x1 if residual is None or fused_gate else residual.contiguous(),
      x1 if gate is None else gate.contiguous(),
      alpha if state_bias is None else state_bias.contiguous(),
      alpha.contiguous(),
      beta.contiguous(),
      c,
      out,
      HAS_RESIDUAL=residual is not None,
      HAS_GATE=gate is not None,
      FUSED_GATE=fused_gate,
      num_warps=tiling.num_warps,
      num_stages=1,
      **statics,
  )
  return c, out


@_forward.register_fake
def _forward_shapes(x1, residual, gate, state_bias, alpha, beta, step_size, tiling, fused_gate):
  shape = _state_shape(x1, fused_gate)
  return (
      x1.new_empty(shape, dtype=torch.float32),
      x1.new_empty(shape, dtype=_output_dtype(x1, gate, fused_gate)),
  )


@torch.library.custom_op("recurrent_bert::swish_rnn_backward", mutates_args=())
def _backward(
    dout: torch.Tensor,
    c: torch.Tensor,
    x1: torch.Tensor,
    residual_dtype: Optional[torch.dtype],
    gate: Optional[torch.Tensor],
    state_bias: Optional[torch.Tensor],
    alpha: torch.Tensor,
    beta: torch.Tensor,
    step_size: int,
    tiling: List[int],
    fused_gate: int,
) -> List[torch.Tensor]:
  """[dx1, dresidual, dgate, dalpha, dbeta, dstate_bias]: the [B, T, D] ones in their
  inputs' dtypes, the [D] ones float32 and per row, [B, D]; empty where there is no input.
  With a `fused_gate`: dx1 is the projections' [B, T, 2, D], dresidual empty and dgate
  the gate bias' per-row sums."""
  tiling = Tiling(*tiling)
  batch, _, depth = shape = _state_shape(x1, fused_gate)
  x1 = x1.contiguous()
  has_residual, has_gate = residual_dtype is not None, gate is not None
  separate_residual = has_residual and not fused_gate
  dx1 = torch.empty_like(x1)
  dresidual = (
      torch.empty(shape, dtype=residual_dtype, device=x1.device) if separate_residual else None
  )
  per_row = lambda: torch.empty((batch, depth), dtype=torch.float32, device=x1.device)
  dgate = (per_row() if fused_gate else torch.empty_like(gate)) if has_gate else None
  sums = [per_row() for _ in range(2 + has_gate)]
  statics, grid = _statics(shape, step_size, tiling)
  _backward_kernel[grid](
      dout.contiguous(),
      c,
      x1,
      dout if gate is None else gate.contiguous(),
      alpha if state_bias is None else state_bias.contiguous(),
      alpha.contiguous(),
      beta.contiguous(),
      dx1,
      dx1 if dresidual is None else dresidual,
      dx1 if dgate is None else dgate,
      sums[0],
      sums[1],
      sums[-1],  # dstate_bias, unwritten without a gate
      HAS_RESIDUAL=has_residual,
      HAS_GATE=has_gate,
      FUSED_GATE=fused_gate,
      num_warps=tiling.num_warps,
      num_stages=1,
      **statics,
  )
  absent = lambda t: _placeholder(x1) if t is None else t
  dstate_bias = sums[2] if has_gate else _placeholder(sums[0])
  return [dx1, absent(dresidual), absent(dgate), sums[0], sums[1], dstate_bias]


@_backward.register_fake
def _backward_shapes(
    dout, c, x1, residual_dtype, gate, state_bias, alpha, beta, step_size, tiling, fused_gate
):
  batch, _, depth = shape = _state_shape(x1, fused_gate)
  per_row = lambda present: x1.new_empty((batch, depth) if present else (0,), dtype=torch.float32)
  dresidual = _placeholder(x1)
  if residual_dtype is not None and not fused_gate:
    dresidual = x1.new_empty(shape, dtype=residual_dtype)
  dgate = _placeholder(x1)
  if gate is not None:
    dgate = per_row(True) if fused_gate else x1.new_empty(shape, dtype=gate.dtype)
  return [
      x1.new_empty(x1.shape, dtype=x1.dtype),
      dresidual,
      dgate,
      per_row(True),
      per_row(True),
      per_row(gate is not None),
  ]


def _save_for_backward(ctx, inputs, output):
  x1, residual, gate, state_bias, alpha, beta, step_size, tiling, fused_gate = inputs
  c, _ = output
  ctx.save_for_backward(c, x1, gate, state_bias, alpha, beta)
  ctx.step_size, ctx.tiling, ctx.fused_gate = step_size, tiling, fused_gate
  ctx.residual_dtype = None if residual is None else residual.dtype
  ctx.mark_non_differentiable(c)


def _gradients(ctx, _dc, dout):
  c, x1, gate, state_bias, alpha, beta = ctx.saved_tensors
  fused_gate = ctx.fused_gate
  dx1, dresidual, dgate, dalpha, dbeta, dstate_bias = _backward(
      dout,
      c,
      x1,
      ctx.residual_dtype,
      gate,
      state_bias,
      alpha,
      beta,
      ctx.step_size,
      ctx.tiling,
      fused_gate,
  )
  total = lambda rows, like: None if like is None else rows.sum(dim=0).to(like.dtype)
  return (
      dx1,
      None if ctx.residual_dtype is None or fused_gate else dresidual,
      total(dgate, gate) if fused_gate else (None if gate is None else dgate),
      total(dstate_bias, state_bias),
      total(dalpha, alpha),
      total(dbeta, beta),
      None,
      None,
      None,
  )


_forward.register_autograd(_gradients, setup_context=_save_for_backward)


def recurrence(x1, residual, alpha, beta, step_size, gate=None, state_bias=None, tiling=None):
  """c[i] = Swish(c[i - k] - x1[i]) + residual[i], c[< 0] = 0, gated when `gate` is given.

  Args:
    x1: [B, T, D] float tensor (any float dtype; the kernels compute in float32).
    residual: [B, T, D], or None for x1 itself (one input and one gradient for both uses).
    alpha, beta: [D].
    step_size: k >= 1.
    gate: None, or [B, T, D], the activated gate; then `state_bias` [D] too.
    tiling: a `Tiling`; None is `TILING`.
  Returns:
    (c + state_bias) * gate in gate's dtype, or c in x1's dtype: [B, T, D].
  """
  tiling = list(tiling or TILING)
  return _forward(x1, residual, gate, state_bias, alpha, beta, step_size, tiling, 0)[1]


def recurrence_of_projections(
    projections,
    gate_bias,
    state_bias,
    alpha,
    beta,
    step_size,
    gate,
    residual_is_x2=False,
    tiling=None,
):
  """pallas_swish_rnn.recurrence_of_projections in Triton: the gated recurrence from the
  [B, T, 2, D] product of X W1 and X W2 (X1 in slot 0, X2 in slot 1) as it is, the gate
  act(X2 + gate_bias) made in the kernels. Returns [B, T, D] in the projections' dtype;
  the projections' gradient comes back as one [B, T, 2, D] tensor."""
  if gate not in GATES:
    raise ValueError(f"gate must be one of {GATES}, got {gate!r}")
  residual = projections if residual_is_x2 else None  # only says there is one
  tiling = list(tiling or TILING)
  return _forward(
      projections,
      residual,
      gate_bias,
      state_bias,
      alpha,
      beta,
      step_size,
      tiling,
      _GATE_CODES[gate],
  )[1]


def cuda_assembly(
    x1_shape, step_size, has_residual, has_gate, dtype="float32", arch=90, fused_gate=None
):
  """The PTX of the forward and backward kernels compiled for a CUDA GPU of compute
  capability `arch` (90: an H100), which needs no GPU: Triton raises here if it cannot
  take a kernel at these shapes (x1's [B, T, D]; with a `fused_gate`, the form of
  `recurrence_of_projections`). Returns {"forward": text, "backward": text}."""
  from triton.backends.compiler import GPUTarget
  from triton.compiler import ASTSource

  statics, _ = _statics(x1_shape, step_size, TILING)
  code = _GATE_CODES[fused_gate] if fused_gate else 0
  flags = dict(HAS_RESIDUAL=has_residual, HAS_GATE=has_gate or bool(code), FUSED_GATE=code)
  element = {"float32": "*fp32", "bfloat16": "*bf16", "float16": "*fp16"}[dtype]
  gates = () if code else ("gate",)  # a fused gate's bias and sums are float32 vectors
  sequences = dict(
      forward=("x1", "residual", "c", "out") + gates,
      backward=("dout", "x1", "dx1", "dresidual") + gates + tuple("d" + g for g in gates),
  )
  assembly = {}
  for name, kernel in (("forward", _forward_kernel), ("backward", _backward_kernel)):
    signature = {}
    for arg in kernel.arg_names:
      if arg in statics or arg in flags:
        signature[arg] = "constexpr"
      elif arg == "c_ptr" or arg[:-4] not in sequences[name]:
        signature[arg] = "*fp32"  # the saved state and the [D] vectors
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
