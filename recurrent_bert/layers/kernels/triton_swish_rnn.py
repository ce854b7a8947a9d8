"""The SwishRNN recurrence as one Triton kernel per direction of the pass, for PyTorch ("triton").

PyTorch's portable form (portable_swish_rnn.py) is a Python loop over T / k blocks: a few
kernel launches per block, each for a microsecond of work, and `torch.compile` unrolls
it. Here, as in the JAX Pallas kernels (pallas_swish_rnn.py), one Triton kernel
(triton_swish_rnn_kernels.py: the algorithm, its gradient and the kernels' layout) walks
the whole sequence. `recurrence_of_projections` is the layer's form on a GPU, as in the
Pallas kernels: X1 and X2 read from the one matmul's [B, T, 2, D] product in place, the
gate made in registers, one [B, T, 2, D] gradient.

The two passes are PyTorch custom operators (`recurrent_bert::swish_rnn_forward` and
`..._backward`) with their autograd formula and shape functions registered, so
`torch.compile` keeps the kernels whole, without a graph break.

Where it runs: on a CUDA GPU (Triton compiles the kernels for it), or anywhere in
Triton's interpreter when the process starts with `TRITON_INTERPRET=1` (slow: for tests
and for rehearsing a GPU script on a CPU).

Importing this module imports PyTorch and Triton.
"""

from typing import List, Optional, Tuple

import torch

from recurrent_bert.layers.kernels.pallas_swish_rnn import GATES
from recurrent_bert.layers.kernels.pallas_swish_rnn import Tiling
from recurrent_bert.layers.kernels.triton_swish_rnn_kernels import GATE_CODES
from recurrent_bert.layers.kernels.triton_swish_rnn_kernels import TILING
from recurrent_bert.layers.kernels.triton_swish_rnn_kernels import backward_kernel
from recurrent_bert.layers.kernels.triton_swish_rnn_kernels import forward_kernel
from recurrent_bert.layers.kernels.triton_swish_rnn_kernels import starts_shape
from recurrent_bert.layers.kernels.triton_swish_rnn_kernels import statics_and_grid


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
  """(starts, out): out is (c + state_bias) * gate in gate's dtype, or c in x1's; starts
  the float32 states each iteration of the kernels' loops starts from (`starts_shape`);
  `tiling` is a `Tiling`'s three numbers (an operator's arguments are plain types). With
  a `fused_gate` code, x1 is the [B, T, 2, D] projections, gate the gate's bias, residual
  x1 itself when X2 is the residual, and out is in x1's dtype."""
  tiling = Tiling(*tiling)
  x1 = x1.contiguous()
  shape = _state_shape(x1, fused_gate)
  starts = torch.empty(
      starts_shape(shape, step_size, tiling), dtype=torch.float32, device=x1.device
  )
  out = torch.empty(shape, dtype=_output_dtype(x1, gate, fused_gate), device=x1.device)
  statics, grid = statics_and_grid(shape, step_size, tiling)
  forward_kernel[grid](
      x1,
      x1 if residual is None or fused_gate else residual.contiguous(),
      x1 if gate is None else gate.contiguous(),
      alpha if state_bias is None else state_bias.contiguous(),
      alpha.contiguous(),
      beta.contiguous(),
      starts,
      out,
      HAS_RESIDUAL=residual is not None,
      HAS_GATE=gate is not None,
      FUSED_GATE=fused_gate,
      num_warps=tiling.num_warps,
      num_stages=1,
      **statics,
  )
  return starts, out


@_forward.register_fake
def _forward_shapes(x1, residual, gate, state_bias, alpha, beta, step_size, tiling, fused_gate):
  shape = _state_shape(x1, fused_gate)
  return (
      x1.new_empty(starts_shape(shape, step_size, Tiling(*tiling)), dtype=torch.float32),
      x1.new_empty(shape, dtype=_output_dtype(x1, gate, fused_gate)),
  )


@torch.library.custom_op("recurrent_bert::swish_rnn_backward", mutates_args=())
def _backward(
    dout: torch.Tensor,
    starts: torch.Tensor,
    x1: torch.Tensor,
    residual: Optional[torch.Tensor],
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
  the gate bias' per-row sums. `residual` as the forward had it (x1 itself there)."""
  tiling = Tiling(*tiling)
  batch, _, depth = shape = _state_shape(x1, fused_gate)
  x1 = x1.contiguous()
  has_residual, has_gate = residual is not None, gate is not None
  separate_residual = has_residual and not fused_gate
  residual = residual.contiguous() if separate_residual else x1
  dx1 = torch.empty_like(x1)
  dresidual = torch.empty_like(residual) if separate_residual else None
  per_row = lambda: torch.empty((batch, depth), dtype=torch.float32, device=x1.device)
  dgate = (per_row() if fused_gate else torch.empty_like(gate)) if has_gate else None
  sums = [per_row() for _ in range(2 + has_gate)]
  statics, grid = statics_and_grid(shape, step_size, tiling)
  backward_kernel[grid](
      dout.contiguous(),
      starts,
      x1,
      residual,
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
    dout, starts, x1, residual, gate, state_bias, alpha, beta, step_size, tiling, fused_gate
):
  batch, _, depth = shape = _state_shape(x1, fused_gate)
  per_row = lambda present: x1.new_empty((batch, depth) if present else (0,), dtype=torch.float32)
  dresidual = _placeholder(x1)
  if residual is not None and not fused_gate:
    dresidual = x1.new_empty(shape, dtype=residual.dtype)
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
  starts, _ = output
  ctx.save_for_backward(starts, x1, residual, gate, state_bias, alpha, beta)
  ctx.step_size, ctx.tiling, ctx.fused_gate = step_size, tiling, fused_gate
  ctx.mark_non_differentiable(starts)


def _gradients(ctx, _dstarts, dout):
  starts, x1, residual, gate, state_bias, alpha, beta = ctx.saved_tensors
  fused_gate = ctx.fused_gate
  dx1, dresidual, dgate, dalpha, dbeta, dstate_bias = _backward(
      dout,
      starts,
      x1,
      residual,
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
      None if residual is None or fused_gate else dresidual,
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
      GATE_CODES[gate],
  )[1]
