"""A block's residual add, the branch's dropout and the LayerNorm as one Pallas kernel.

Every post-LayerNorm block ends its sublayers in `LN(residual + Drop(branch))`. Compiled
for a GPU by XLA that is four passes over [B·T, H] forward (the dropout and add, the row
statistics, the normalisation, and a small one for the shift of the one-pass statistics)
and three backward, one of which recomputes the normalisation's gradient to add it to the
next gradient. At bert_base's 64 x 128 that was some 190 MB a LayerNorm a step, read
from the compiled step (benchmarks/gpu/compiled_for_gpu.py). Here each program holds its
rows whole in registers:

  forward   s = residual + Drop(branch + b);  y = (s - mean) · rstd · γ + β
            reads residual and branch, writes s (kept for the backward) and y
  backward  x̂ = (s - mean) · rstd;  g = dy · γ
            ds = rstd · (g - mean(g) - x̂ · mean(g · x̂))       (per row)
            dbranch = Drop'(ds);  db = Σ dbranch, dγ = Σ dy · x̂,  dβ = Σ dy  (over rows)
            reads dy and s, writes ds (the residual's gradient) and dbranch, and each
            program's partial sums of db, dγ and dβ, in one [programs, 3, H] array that
            one reduction adds up (three arrays would be three reductions: kernels)

With `copies=2` (or 3) the function returns y twice (or three times; one array): a block
whose normalised X̄ feeds both its next branch and the next residual uses one copy for
each, so that the gradients reach the backward kernel apart and it adds them as it reads
them, where autodiff's sum of them at the fork would be a pass of its own (read two,
write one).

b is the bias of the branch's last matmul, whose product comes in without it: XLA would
add it in a pass of its own (a GEMM's epilogue takes no bias here), and sum its gradient
in another.

The statistics are float32 (mean and rstd of each row are kept, [B·T] each); s and y are
in the inputs' dtype, as the written-out form rounds them. The dropout mask is the
package Dropout's under JAX (`dropout_bits`: the hash of the seed and each element's
row-major index in [B, T, H]), drawn from the same seed, so the kernel drops what the
written-out form drops, and the scaling is the same product rounded once.

Triton's vectors have power-of-2 lengths: a row of H = c·w features is read as c chunks
of w, the largest power of 2 dividing H up to 256 (bert_base: 3 of 256). `interpret=True`
runs the same kernels in Pallas' interpreter on any device (the CPU tests);
`triton_module_text` lowers them for CUDA without a GPU.
"""

import functools
import math
from typing import NamedTuple, Optional

from recurrent_bert.layers.kernels import dropout_bits
from recurrent_bert.layers.kernels import pallas_support


class Tiling(NamedTuple):
  """How the kernels split the rows (what they compute does not depend on it).

  rows: rows per block (each program's forward block; the backward's loop step).
  programs: at most this many backward programs (each loops over its blocks and writes
    one partial sum of db, dγ and dβ).
  num_warps: warps per program.
  """

  rows: int = 4
  programs: int = 256
  num_warps: int = 4


TILING = Tiling()
_MAX_CHUNK = 256
_MIN_CHUNK = 16


def chunk_width(hidden_size: int) -> int:
  """w: the largest power of 2 dividing H, at most 256."""
  return min(_MAX_CHUNK, hidden_size & -hidden_size)


def fits(hidden_size: int) -> bool:
  """Whether the kernels take rows of `hidden_size` features (chunks of 16 or more)."""
  return hidden_size > 0 and chunk_width(hidden_size) >= _MIN_CHUNK


class _Statics(NamedTuple):
  hidden_size: int
  chunks: int  # c
  width: int  # w
  rows: int  # R, rows per block
  blocks: int  # blocks per backward program
  rate: float
  epsilon: float


def _keep(seed_ref, first_row, statics: _Statics, chunk: int):
  """[R, w] bool: Dropout's mask at rows [first_row, first_row + R), chunk `chunk`."""
  import jax
  from jax import numpy as jnp

  shape = (statics.rows, statics.width)
  row = jax.lax.broadcasted_iota(jnp.uint32, shape, 0) + jnp.asarray(first_row).astype(jnp.uint32)
  column = jax.lax.broadcasted_iota(jnp.uint32, shape, 1) + jnp.uint32(chunk * statics.width)
  index = row * jnp.uint32(statics.hidden_size) + column
  bits = dropout_bits.keep_bits(seed_ref[0], seed_ref[1], index)
  return bits >= dropout_bits.threshold(statics.rate)


def _dropped(value, keep, rate: float):
  """Dropout's kept value, x · float32(1 / (1 - rate)) rounded once to x's dtype, or 0."""
  from jax import numpy as jnp
  import numpy as np

  scaled = (value.astype(jnp.float32) * np.float32(1.0 / (1.0 - rate))).astype(value.dtype)
  return jnp.where(keep, scaled, jnp.zeros_like(value))


def _forward_kernel(*refs, statics: _Statics, keeps_sum: bool):
  """One block of R rows: s = residual + Drop(branch + b), y = LN(s); writes y (and s,
  mean, rstd when `keeps_sum`, for the backward)."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  seed_ref, residual_ref, branch_ref, bias_ref, gamma_ref, beta_ref, y_ref, *kept = refs
  first_row = pl.program_id(0) * statics.rows
  sums = []
  for j in range(statics.chunks):
    branch = branch_ref[:, j, :] + bias_ref[j, :][None, :]  # rounded as the Dense rounds
    if statics.rate:
      branch = _dropped(branch, _keep(seed_ref, first_row, statics, j), statics.rate)
    s = residual_ref[:, j, :] + branch  # rounded to the inputs' dtype
    if keeps_sum:
      kept[0][:, j, :] = s
    sums.append(s.astype(jnp.float32))
  mean = sum(s.sum(axis=1) for s in sums) / statics.hidden_size  # [R]
  centred = [s - mean[:, None] for s in sums]
  variance = sum((d * d).sum(axis=1) for d in centred) / statics.hidden_size
  rstd = jax.lax.rsqrt(variance + statics.epsilon)
  for j, d in enumerate(centred):
    y = d * rstd[:, None] * gamma_ref[j, :][None, :] + beta_ref[j, :][None, :]
    y_ref[:, j, :] = y.astype(y_ref.dtype)
  if keeps_sum:
    kept[1][...] = mean
    kept[2][...] = rstd


def _backward_kernel(*refs, statics: _Statics, has_dropout: bool, copies: int):
  """`blocks` blocks of R rows in a loop: ds and Drop'(ds), and this program's sums of
  db, dγ and dβ over its rows ([3, c, w], in that order)."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  seed_ref, *dy_refs = refs[: 1 + copies]
  s_ref, mean_ref, rstd_ref, gamma_ref, ds_ref, *rest = refs[1 + copies :]
  dbranch_ref = rest[0] if has_dropout else None
  sums_ref = rest[-1]  # [3, c, w]: db, dγ, dβ
  c, w, rows = statics.chunks, statics.width, statics.rows
  gamma = [gamma_ref[j, :][None, :] for j in range(c)]
  first = pl.program_id(0) * statics.blocks * rows

  def block(i, sums):
    at = pl.ds(i * rows, rows)
    mean, rstd = mean_ref[at][:, None], rstd_ref[at][:, None]
    x_hat = [(s_ref[at, j, :].astype(jnp.float32) - mean) * rstd for j in range(c)]
    dy = [sum(ref[at, j, :].astype(jnp.float32) for ref in dy_refs) for j in range(c)]
    g = [dy[j] * gamma[j] for j in range(c)]
    g_mean = sum(t.sum(axis=1) for t in g)[:, None] / statics.hidden_size
    gx_mean = sum((g[j] * x_hat[j]).sum(axis=1) for j in range(c))[:, None] / statics.hidden_size
    dbias = []
    for j in range(c):
      ds = (rstd * (g[j] - g_mean - x_hat[j] * gx_mean)).astype(ds_ref.dtype)
      ds_ref[at, j, :] = ds
      dbranch = ds
      if has_dropout:
        dbranch = _dropped(ds, _keep(seed_ref, first + i * rows, statics, j), statics.rate)
        dbranch_ref[at, j, :] = dbranch
      dbias.append(dbranch.astype(jnp.float32).sum(axis=0))
    dgamma = [(dy[j] * x_hat[j]).sum(axis=0) for j in range(c)]
    dbeta = [dy[j].sum(axis=0) for j in range(c)]
    return tuple(a + b for a, b in zip(sums, dbias + dgamma + dbeta))

  zeros = tuple(jnp.zeros((w,), jnp.float32) for _ in range(3 * c))
  sums = jax.lax.fori_loop(0, statics.blocks, block, zeros)
  for k in range(3):
    for j in range(c):
      sums_ref[k, j, :] = sums[k * c + j]


@functools.cache
def _residual_layer_norm(num_rows, hidden_size, dtype, rate, epsilon, copies, interpret, tiling):
  """The custom-VJP function (residual, branch, bias, gamma, beta, seed) -> y (or
  `copies` of it) over [N, c, w] views of [N, H] rows ([c, w] of the vectors)."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  width = chunk_width(hidden_size)
  chunks = hidden_size // width
  rows = pallas_support.blocks_per_iteration(num_rows, tiling.rows)  # divides N
  num_blocks = num_rows // rows
  blocks = 1
  while num_blocks % (blocks * 2) == 0 and num_blocks // blocks > tiling.programs:
    blocks *= 2
  programs = num_blocks // blocks
  statics = _Statics(hidden_size, chunks, width, rows, blocks, rate, epsilon)

  def call(kernel, grid, in_specs, out_specs, out_shape, *inputs, **options):
    return pl.pallas_call(
        functools.partial(kernel, statics=statics, **options),
        grid=(grid,),
        in_specs=in_specs,
        out_specs=out_specs,
        out_shape=out_shape,
        interpret=interpret,
        compiler_params=None
        if interpret
        else pallas_support.compiler_params(tiling.num_warps, num_stages=1),
        name="layer_norm_" + kernel.__name__.strip("_").replace("_kernel", ""),
    )(*inputs)

  seed_spec = pl.BlockSpec((2,), lambda i: (0,))
  vector_spec = pl.BlockSpec((chunks, width), lambda i: (0, 0))
  row_block = pl.BlockSpec((rows, chunks, width), lambda i: (i, 0, 0))
  per_row = pl.BlockSpec((rows,), lambda i: (i,))
  program_rows = pl.BlockSpec((rows * blocks, chunks, width), lambda i: (i, 0, 0))
  program_per_row = pl.BlockSpec((rows * blocks,), lambda i: (i,))
  program_sums = pl.BlockSpec((None, 3, chunks, width), lambda i: (i, 0, 0, 0))
  sequence = jax.ShapeDtypeStruct((num_rows, chunks, width), dtype)
  rows_f32 = jax.ShapeDtypeStruct((num_rows,), jnp.float32)
  sums = jax.ShapeDtypeStruct((programs, 3, chunks, width), jnp.float32)
  in_specs = [seed_spec, row_block, row_block, vector_spec, vector_spec, vector_spec]

  def forward(residual, branch, bias, gamma, beta, seed):
    inputs = (seed, residual, branch, bias, gamma, beta)
    y, s, mean, rstd = call(
        _forward_kernel,
        num_blocks,
        in_specs,
        [row_block, row_block, per_row, per_row],
        [sequence, sequence, rows_f32, rows_f32],
        *inputs,
        keeps_sum=True,
    )
    return (y,) * copies if copies > 1 else y, (s, mean, rstd, gamma, seed)

  @jax.custom_vjp
  def run(residual, branch, bias, gamma, beta, seed):
    inputs = (seed, residual, branch, bias, gamma, beta)
    y = call(_forward_kernel, num_blocks, in_specs, row_block, sequence, *inputs, keeps_sum=False)
    return (y,) * copies if copies > 1 else y

  def backward(saved, dy):
    s, mean, rstd, gamma, seed = saved
    has_dropout = rate > 0
    dys = [t.astype(dtype) for t in (dy if copies > 1 else (dy,))]
    results = call(
        _backward_kernel,
        programs,
        [seed_spec] + [program_rows] * (copies + 1) + [program_per_row] * 2 + [vector_spec],
        [program_rows] * (1 + has_dropout) + [program_sums],
        [sequence] * (1 + has_dropout) + [sums],
        seed,
        *dys,
        s,
        mean,
        rstd,
        gamma,
        has_dropout=has_dropout,
        copies=copies,
    )
    ds, dbranch = results[0], results[1 if has_dropout else 0]
    dbias, dgamma, dbeta = results[-1].sum(axis=0)  # [3, c, w] -> 3 x [c, w]
    return ds, dbranch, dbias.astype(dtype), dgamma, dbeta, None

  run.defvjp(forward, backward)
  return run


def residual_layer_norm(
    residual,
    branch,
    branch_bias,
    gamma,
    beta,
    epsilon: float,
    rate: float = 0.0,
    seed=None,
    interpret: Optional[bool] = None,
    tiling: Optional[Tiling] = None,
    copies: int = 1,
):
  """LN(residual + Drop(branch + branch_bias)) over the last axis (module doc).

  Args:
    residual: [..., H], a float dtype; `fits(H)`.
    branch: like residual, its dtype.
    branch_bias: None (no bias), or [H], cast to residual's dtype as a Dense casts it.
    gamma, beta: [H], cast to float32.
    epsilon: added to the variance.
    rate: the branch's dropout rate, 0 <= rate < 1 (0: no dropout).
    seed: [2] uint32, a Keras seed (a SeedGenerator's next value); read when rate > 0.
      The mask is the package Dropout's with that seed on branch's shape.
    interpret: Pallas' interpreter (any device); None reads `pallas_support.INTERPRET_ENV`.
    tiling: `Tiling`; None, `TILING`.
    copies: how many times y comes back (module doc).
  Returns:
    [..., H] in residual's dtype; with `copies` > 1, a tuple of that many.
  """
  from jax import numpy as jnp

  if interpret is None:
    interpret = pallas_support.interpreted()
  shape = residual.shape
  hidden_size = int(shape[-1])
  num_rows = math.prod(int(n) for n in shape[:-1])
  width = chunk_width(hidden_size)
  run = _residual_layer_norm(
      num_rows,
      hidden_size,
      jnp.dtype(residual.dtype),
      float(rate),
      float(epsilon),
      int(copies),
      bool(interpret),
      tiling or TILING,
  )
  view = (num_rows, hidden_size // width, width)
  seed = jnp.zeros((2,), jnp.uint32) if seed is None else jnp.asarray(seed)
  if branch_bias is None:
    branch_bias = jnp.zeros((hidden_size,), residual.dtype)
  y = run(
      residual.reshape(view),
      branch.astype(residual.dtype).reshape(view),
      jnp.asarray(branch_bias).astype(residual.dtype).reshape(view[1:]),
      jnp.asarray(gamma, jnp.float32).reshape(view[1:]),
      jnp.asarray(beta, jnp.float32).reshape(view[1:]),
      seed.astype(jnp.uint32).reshape((2,)),
  )
  return tuple(t.reshape(shape) for t in y) if copies > 1 else y.reshape(shape)


def triton_module_text(shape, dtype="bfloat16", rate=0.1, tiling=None):
  """The StableHLO text of the forward and backward kernels lowered for a CUDA GPU at
  [..., H] `shape`, which needs no GPU: lowering fails here if Triton cannot take them."""
  import jax
  from jax import numpy as jnp

  sequence = jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))
  vector = jax.ShapeDtypeStruct(shape[-1:], jnp.float32)
  sequence_vector = jax.ShapeDtypeStruct(shape[-1:], jnp.dtype(dtype))

  def loss(residual, branch, bias, gamma, beta):
    seed = jnp.array([1, 2], jnp.uint32)
    y = residual_layer_norm(residual, branch, bias, gamma, beta, 1e-12, rate, seed, False, tiling)
    return y.astype(jnp.float32).sum()

  grad = jax.grad(loss, argnums=(0, 1, 2, 3, 4))
  return pallas_support.cuda_module_text(grad, sequence, sequence, sequence_vector, vector, vector)
