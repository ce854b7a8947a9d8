"""The BLSTM's recurrence as one fused Pallas kernel per time step and pass ("pallas").

The portable scan (portable_blstm.py) computes what this computes, but compiled for a GPU
each of its steps is several kernels: XLA runs the recurrent matmul, the cell, and one
in-place write of h, c and the gates into their [T, ...] stacks each, then the loop
counter; the backward step is as many (the cell's gradient, its write, a split-K matmul
and the reduction of its parts). Read from the step compiled for an H100
(benchmarks/gpu/compiled_for_gpu.py): 6 kernels a forward step and 6 a backward step,
18,432 of the 20,088 of a trans_blstm_2_base training step at T = 128, each microseconds
of work; here 17 for every 16 steps (4,261 in all).

Here each step is one kernel. The program for direction d, rows [b, b + block_b) and
hidden units [j, j + block_u) owns the four gate columns of those units. The forward
direction walks positions t = 0, 1, ..., T - 1, the backward one T - 1, ..., 0; "prev" is
the position the walk read before t (t - 1 or t + 1), "next" the one it reads after:

  forward, at t:     z = steps[t, d] + b + h[prev] R  (its 4 x block_u columns; K = u)
                     i, f, g, o = σ, σ, tanh, σ (z);  c = f c[prev] + i g;  h = o tanh(c)
                     c = h = 0 where t is padding
  backward, at t:    dh = dh_out[t, d] + dz[next] Rᵀ  (its block_u columns; K = 4u)
                     dc = dc_from_next + dh o (1 - tanh²c)
                     dz[t] = (dc g i', dc c[prev] f', dc i g', dh tanh(c) o')
                     dc_from_next ← dc f;  dz[t] = dc_from_next = 0 where t is padding

A row's padding (its positions from its length on) holds the state at 0, so the backward
direction, which meets the padding first, starts at the row's last real token as if the
row were reversed within its real prefix (the portable scan's way, which gathers the
reversed rows in and out), and the output is 0 at padding in both directions. No pass
reverses a row or concatenates the directions: the input projections of both directions
are one matmul of the tokens as rows, [B·T, D] x [D, 2·4u], whose [B, T, 2, 4u] product
the kernels read in place; they write h as [B, T, 2, u], which is the layer's [B, T, 2u]
output as it is; and they write dz as [B, T, 2, 4u], so the input's gradient is one matmul
too, with no add of the directions' parts. Against the portable scan's layout with the
reversals, about 0.2 GB less a layer a training step at trans_blstm_2_base's size.

An LSTM unit's cell gradient needs only that unit's own quantities, so each program's
part of dz[t] is complete in itself; the next step's kernel reads all of dz[t] (all of
h[t] going forward), which is why a launch is one step: a kernel sees the other
programs' writes only after they have ended. The stacks h, c (float32), the gates
(float32) and dz are read and written in place (aliased through the time loop), so no
step copies them. The gates' bias b is added as the steps are read (in float32), so the
input projections go in as the matmul makes them, with no pass that adds it (200 MB a
layer at trans_blstm_2_base's size). As in the portable form, R's gradient is one matmul
after the loop over all B·T rows; a column of ones beside the h that each step read makes
it sum b's gradient too. The cell state and gates are float32 whatever the compute dtype.

Sizes are padded to what Triton's blocks need (rows and units to multiples of powers of 2
of at least 16): padded units have zero weights and inputs, so their c and h stay 0 and
nothing flows back into real ones; padded rows likewise. `interpret=True` runs the same
kernels in Pallas' interpreter on any device (the CPU tests, against the portable scan
and the numpy loop); `triton_module_text` lowers them for CUDA without a GPU.
"""

import functools
from typing import NamedTuple

from recurrent_bert.layers.kernels import pallas_support


class Tiling(NamedTuple):
  """How the kernels split the work (what they compute does not depend on it).

  block_u: hidden units per program (each owns their 4 gate columns).
  block_b: batch rows per program.
  block_k: the matmuls' reduction depth per iteration.
  num_warps: warps per program.
  num_stages: Triton's software pipelining of the matmul's loads over block_k.
  steps_per_iteration: time steps per iteration of XLA's loop. Its counter is a kernel
    of its own each iteration: at 16, a trans_blstm_2_base training step launches 192 of
    them (768 at 4), and compiles for an H100 in 41 s on 2 CPU cores (31 s at 4; 144 s
    for the 128 steps with no loop).
  """

  block_u: int = 32
  block_b: int = 64
  block_k: int = 64
  num_warps: int = 4
  num_stages: int = 2
  steps_per_iteration: int = 16


TILING = Tiling()
GATES = 4


def _power_of_2_at_least(n: int, floor: int = 16) -> int:
  return max(floor, 1 << max(n - 1, 0).bit_length())


def _round_up(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


class _Sizes(NamedTuple):
  length: int  # T
  batch: int  # B, padded to a multiple of block_b
  units: int  # u, padded to a multiple of block_u
  block_b: int
  block_u: int
  block_k: int
  steps_per_iteration: int


def _sizes(length: int, batch: int, units: int, tiling: Tiling) -> _Sizes:
  block_u = min(tiling.block_u, _power_of_2_at_least(units))
  block_b = min(tiling.block_b, _power_of_2_at_least(batch))
  padded_units = _round_up(units, block_u)
  block_k = tiling.block_k
  while padded_units % block_k:  # block_u (>= 16, a power of 2) divides it
    block_k //= 2
  return _Sizes(
      length,
      _round_up(batch, block_b),
      padded_units,
      block_b,
      block_u,
      block_k,
      max(1, min(tiling.steps_per_iteration, length)),
  )


def _dot(a, b, b_transposed=False):
  """a [m, k] x b [k, n] (b [n, k] when `b_transposed`) accumulated in float32; exact
  float32 products for float32."""
  import jax
  from jax import numpy as jnp

  precision = jax.lax.Precision.HIGHEST if a.dtype == jnp.float32 else None
  contracted = (((1,), (1 if b_transposed else 0,)), ((), ()))
  return jax.lax.dot_general(
      a, b, contracted, precision=precision, preferred_element_type=jnp.float32
  )


def _time(count_ref, offset_ref, sizes):
  """The step a launch computes: iteration `count` of XLA's loop, `offset` within it (both
  [1] int32; the offsets are constants, so no kernel computes a step's index)."""
  return count_ref[0] * sizes.steps_per_iteration + offset_ref[0]


def _positions(d, walked, sizes):
  """Where direction d's walk is after `walked` steps: (t, earlier, later), the position
  it is at, the one it read before t and the one it reads after. The forward direction
  walks t = 0, 1, ... (earlier t - 1, later t + 1), the backward one t = T - 1, T - 2, ...
  (earlier t + 1, later t - 1). Positions past the ends are clipped to them: the kernels
  read them under a `where` that discards what they hold."""
  from jax import numpy as jnp

  step = 1 - 2 * d  # +1 forward, -1 backward
  t = jnp.where(d == 0, walked, sizes.length - 1 - walked)
  inside = lambda position: jnp.clip(position, 0, sizes.length - 1)
  return t, inside(t - step), inside(t + step)


def _forward_kernel(
    count_ref,
    offset_ref,
    steps_ref,
    kernel_ref,
    bias_ref,
    lengths_ref,
    h_in,
    c_in,
    gates_in,
    h_ref,
    c_ref,
    gates_ref,
    *,
    sizes,
):
  """Step `_time` of direction d's walk, one program (module docstring). h_ref [B, T, 2, u]
  (token-major: the layer's output), c_ref [2, B, T, u] and gates_ref [2, B, T, 4u] alias
  h_in, c_in and gates_in, read at the previous step's position and written at this one."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  del h_in, c_in, gates_in  # the same buffers as the outputs
  d, rows = pl.program_id(0), pl.ds(pl.program_id(1) * sizes.block_b, sizes.block_b)
  own = pl.program_id(2) * sizes.block_u
  units = pl.ds(own, sizes.block_u)
  gate = lambda k: pl.ds(k * sizes.units + own, sizes.block_u)  # gate k of these units
  walked = _time(count_ref, offset_ref, sizes)
  t, earlier, _ = _positions(d, walked, sizes)
  started = walked > 0
  real = (t < lengths_ref[rows])[:, None]  # [block_b, 1]

  def accumulate(kb, z):
    depth = pl.ds(pl.multiple_of(kb * sizes.block_k, sizes.block_k), sizes.block_k)
    h = h_ref[rows, earlier, d, depth]  # [block_b, block_k]: every program's units
    h = jnp.where(started, h, jnp.zeros_like(h))
    return tuple(zk + _dot(h, kernel_ref[d, depth, gate(k)]) for k, zk in enumerate(z))

  z = tuple(
      steps_ref[rows, t, d, gate(k)].astype(jnp.float32)
      + bias_ref[d, gate(k)].astype(jnp.float32)[None, :]
      for k in range(GATES)
  )
  z = jax.lax.fori_loop(0, sizes.units // sizes.block_k, accumulate, z)
  i, f, o = jax.nn.sigmoid(z[0]), jax.nn.sigmoid(z[1]), jax.nn.sigmoid(z[3])
  g = jnp.tanh(z[2])
  # A padded position keeps the state at its start, 0: the backward direction then
  # starts at each row's last real token, and the output there is 0.
  c = jnp.where(real, f * jnp.where(started, c_ref[d, rows, earlier, units], 0.0) + i * g, 0.0)
  c_ref[d, rows, t, units] = c
  h_ref[rows, t, d, units] = jnp.where(real, o * jnp.tanh(c), 0.0).astype(h_ref.dtype)
  for k, activated in enumerate((i, f, g, o)):
    gates_ref[d, rows, t, gate(k)] = activated


def _backward_kernel(
    count_ref,
    offset_ref,
    dh_ref,
    gates_ref,
    c_ref,
    kernel_ref,
    lengths_ref,
    dz_in,
    dc_in,
    dz_ref,
    dc_ref,
    *,
    sizes,
):
  """Step `_time` of direction d's walk in reverse, one program (module docstring): dh_ref
  and dz_ref are token-major ([B, T, 2, u | 4u], compute dtype). dz_ref and dc_ref
  ([2, B, u], float32: the cell gradient passed back from the step after) alias dz_in and
  dc_in."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  del dz_in, dc_in
  d, rows = pl.program_id(0), pl.ds(pl.program_id(1) * sizes.block_b, sizes.block_b)
  own = pl.program_id(2) * sizes.block_u
  units = pl.ds(own, sizes.block_u)
  gate = lambda k: pl.ds(k * sizes.units + own, sizes.block_u)
  walked = sizes.length - 1 - _time(count_ref, offset_ref, sizes)
  t, earlier, later = _positions(d, walked, sizes)
  has_later, started = walked + 1 < sizes.length, walked > 0
  real = (t < lengths_ref[rows])[:, None]

  def accumulate(kb, dh):
    depth = pl.ds(pl.multiple_of(kb * sizes.block_k, sizes.block_k), sizes.block_k)
    dz = dz_ref[rows, later, d, depth]  # [block_b, block_k]: every program's gates
    dz = jnp.where(has_later, dz, jnp.zeros_like(dz))
    # R's rows of these units, [block_u, block_k], contracted along the gates: Rᵀ is
    # read as R is stored, so no pass transposes it.
    return dh + _dot(dz, kernel_ref[d, units, depth], b_transposed=True)

  dh = dh_ref[rows, t, d, units].astype(jnp.float32)
  dh = jax.lax.fori_loop(0, GATES * sizes.units // sizes.block_k, accumulate, dh)
  i, f, g, o = (gates_ref[d, rows, t, gate(k)] for k in range(GATES))
  c = c_ref[d, rows, t, units]
  c_earlier = jnp.where(started, c_ref[d, rows, earlier, units], 0.0)
  tanh_c = jnp.tanh(c)
  dc = jnp.where(has_later, dc_ref[d, rows, units], 0.0) + dh * o * (1.0 - tanh_c * tanh_c)
  parts = (
      dc * g * i * (1.0 - i),
      dc * c_earlier * f * (1.0 - f),
      dc * i * (1.0 - g * g),
      dh * tanh_c * o * (1.0 - o),
  )
  # A padded position's state is 0 whatever came before: nothing flows back through it.
  for k, part in enumerate(parts):
    dz_ref[rows, t, d, gate(k)] = jnp.where(real, part, 0.0).astype(dz_ref.dtype)
  dc_ref[d, rows, units] = jnp.where(real, dc * f, 0.0)


def uninitialized(stack):
  """An array of `stack`'s shape and dtype for the kernels to fill, left uninitialized on
  a GPU (`jax.lax.empty`; zeros elsewhere). Every launch writes its step of every stack
  for all rows and units, padded ones included, before any launch reads it (an earlier
  or later step, read under a `where` at the ends), so nothing reads what the array held:
  zeros there cost a pass over each stack, 3.6 GB a trans_blstm_2_base step."""
  import jax

  return jax.lax.empty(stack.shape, stack.dtype)


@functools.cache
def _recurrence(length, batch, units, dtype, interpret, tiling):
  """The custom-gradient function of (steps [B, T, 2, 4u], recurrent_kernels [2, u, 4u],
  biases [2, 4u], lengths [B]) -> h [B, T, 2, u] for one static configuration."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  sizes = _sizes(length, batch, units, tiling)
  grid = (2, sizes.batch // sizes.block_b, sizes.units // sizes.block_u)
  # h and dz token-major, [B', T, 2, ...] (the layer's output, the input projections'
  # gradient); c and the gates, which only the kernels read, direction-major (float32).
  tokens = lambda width: jax.ShapeDtypeStruct((sizes.batch, length, 2, width), dtype)
  directions = lambda width: jax.ShapeDtypeStruct((2, sizes.batch, length, width), jnp.float32)
  h_stack, dz_stack = tokens(sizes.units), tokens(GATES * sizes.units)
  c_stack, gates_stack = directions(sizes.units), directions(GATES * sizes.units)
  dc_state = jax.ShapeDtypeStruct((2, sizes.batch, sizes.units), jnp.float32)
  compiler_params = (
      None if interpret else pallas_support.compiler_params(tiling.num_warps, tiling.num_stages)
  )

  def call(kernel, outputs, aliases, name, *inputs):
    return pl.pallas_call(
        functools.partial(kernel, sizes=sizes),
        out_shape=outputs,
        grid=grid,
        input_output_aliases=aliases,
        interpret=interpret,
        compiler_params=compiler_params,
        name=name,
    )(*inputs)

  def padded(t, axis, size, to):  # zeros after `size` along `axis`, to `to`
    return jnp.pad(t, [(0, to - size if a == axis else 0) for a in range(t.ndim)])

  def padded_gates(t):  # [..., 4u] -> [..., 4u']: each gate's u columns padded
    t = padded(t.reshape(t.shape[:-1] + (GATES, units)), t.ndim, units, sizes.units)
    return t.reshape(t.shape[:-2] + (GATES * sizes.units,))

  def padded_kernel(recurrent_kernels):  # [2, u, 4u] -> [2, u', 4u']
    return padded(padded_gates(recurrent_kernels), 1, units, sizes.units)

  def padded_rows(t):  # [B, ...] -> [B', ...]; padded rows have length 0
    return padded(t, 0, batch, sizes.batch)

  def unpadded_gates(t):  # [B', T, 2, 4u'] -> [B, T, 2, 4u]
    t = t[:batch].reshape(batch, length, 2, GATES, sizes.units)
    return t[..., :units].reshape(batch, length, 2, GATES * units)

  def every_step(kernel, outputs, name, constants, state):
    """Launches `kernel` for every step in order, the state (aliased: the last inputs)
    threaded through: `steps_per_iteration` launches per iteration of XLA's loop, and
    the remainder after it."""
    spi = sizes.steps_per_iteration
    first = 2 + len(constants)  # after the count and the offset
    aliases = {first + k: k for k in range(len(state))}

    def launch(count, offset, state):
      count = jnp.reshape(count, (1,)).astype(jnp.int32)
      offset = jnp.full((1,), offset, jnp.int32)
      return tuple(call(kernel, outputs, aliases, name, count, offset, *constants, *state))

    def iteration(count, state):
      for offset in range(spi):
        state = launch(count, offset, state)
      return state

    state = jax.lax.fori_loop(0, length // spi, iteration, tuple(state))
    for offset in range(length % spi):
      state = launch(length // spi, offset, state)
    return state

  def forward(steps, recurrent_kernels, biases, lengths):
    kernel_p, lengths_p = padded_kernel(recurrent_kernels), padded_rows(lengths.astype(jnp.int32))
    stacks = [uninitialized(s) for s in (h_stack, c_stack, gates_stack)]
    h, c, gates = every_step(
        _forward_kernel,
        [h_stack, c_stack, gates_stack],
        "blstm_forward_step",
        (padded_rows(padded_gates(steps)), kernel_p, padded_gates(biases), lengths_p),
        stacks,
    )
    return h[:batch, :, :, :units], (h, c, gates, kernel_p, lengths_p)

  @jax.custom_vjp
  def run(steps, recurrent_kernels, biases, lengths):
    return forward(steps, recurrent_kernels, biases, lengths)[0]

  def backward(saved, dh_out):
    h, c, gates, kernel_p, lengths_p = saved
    dh_p = padded(padded_rows(dh_out), 3, units, sizes.units)
    dz, _ = every_step(
        _backward_kernel,
        [dz_stack, dc_state],
        "blstm_backward_step",
        (dh_p, gates, c, kernel_p, lengths_p),
        [uninitialized(dz_stack), jnp.zeros(dc_state.shape, jnp.float32)],
    )
    # R's gradient, one matmul over all B·T rows of each direction, with the h that each
    # step read, [2, u', B'·T] x [2, B'·T, 4u'] (XLA reads the token-major stacks as they
    # are); a column of ones beside h makes the same matmul sum the biases' gradient,
    # where a pass of its own would read dz again.
    zero, one = jnp.zeros_like(h[:, :1, 0]), jnp.ones_like(h[:, :, 0, :1])
    h_read = jnp.stack(
        [
            jnp.concatenate([jnp.concatenate([zero, h[:, :-1, 0]], axis=1), one], axis=2),
            jnp.concatenate([jnp.concatenate([h[:, 1:, 1], zero], axis=1), one], axis=2),
        ],
        axis=2,
    )  # [B', T, 2, u' + 1]
    d_read = jnp.einsum("btdu,btdg->dug", h_read, dz)  # [2, u' + 1, 4u']
    d_kernel = d_read[:, :-1].reshape(2, sizes.units, GATES, sizes.units)[:, :units, :, :units]
    d_biases = d_read[:, -1].reshape(2, GATES, sizes.units)[..., :units]
    return (
        unpadded_gates(dz),
        d_kernel.reshape(2, units, GATES * units),
        d_biases.reshape(2, GATES * units),
        None,
    )

  run.defvjp(forward, backward)
  return run


def bidirectional_lstm(x, lengths, forward, backward, interpret=None, tiling=None):
  """`portable_blstm.bidirectional_lstm`'s arguments and result, on these kernels.

  The projections of both directions are one matmul of the tokens as rows, [B·T, D] x
  [D, 2·4u], whose [B, T, 2, 4u] product the kernels read in place; their h, [B, T, 2, u],
  is the layer's [B, T, 2u] output as it is. Neither direction's input or output is
  reversed: the backward direction walks positions T - 1 down to 0, its state held at 0
  over padding, which is the same as starting at each row's last real token. So no pass
  gathers reversed rows or concatenates the directions, and the input's gradient is one
  matmul with no add of the directions' parts (at trans_blstm_2_base's size, about 0.2 GB
  a layer a training step).

  Args:
    x: [B, T, D], T static.
    lengths: [B] int, real positions per row.
    forward, backward: (kernel [D, 4u], recurrent_kernel [u, 4u], bias [4u]) of each
      direction, in x's dtype.
    interpret: run Pallas' interpreter (any device); None reads the Pallas switch
      (pallas_support.INTERPRET_ENV).
    tiling: a `Tiling`; None is `TILING`.
  Returns:
    [B, T, 2u]: (forward, backward) h, 0 at padded positions.
  """
  import jax
  from jax import numpy as jnp

  if interpret is None:
    interpret = pallas_support.interpreted()
  batch, length, _ = x.shape
  units = forward[1].shape[0]
  kernels = jnp.stack([forward[0], backward[0]], axis=1)  # [D, 2, 4u]
  # The barrier keeps XLA from merging this matmul with another of x (TRANS-BLSTM-2's
  # attention projections read the same x): the kernels would then read a copy of this
  # part of the merged product, 0.2 GB a layer at base size.
  steps = jnp.einsum("btk,kdg->btdg", jax.lax.optimization_barrier(x), kernels)  # [B, T, 2, 4u]
  run = _recurrence(length, batch, units, str(x.dtype), bool(interpret), tiling or TILING)
  h = run(
      steps,
      jnp.stack([forward[1], backward[1]]),
      jnp.stack([forward[2], backward[2]]),
      jnp.asarray(lengths),
  )
  return h.reshape(batch, length, 2 * units)


def triton_module_text(batch, length, units, dtype="bfloat16", tiling=None):
  """The StableHLO text of the training step's recurrence (forward and backward) lowered
  for a CUDA GPU, which needs no GPU: lowering fails here if Triton cannot take a kernel.
  `tiling`: a `Tiling`; None is `TILING`."""
  import jax
  from jax import numpy as jnp

  steps = jax.ShapeDtypeStruct((batch, length, 2, GATES * units), jnp.dtype(dtype))
  kernels = jax.ShapeDtypeStruct((2, units, GATES * units), jnp.dtype(dtype))
  biases = jax.ShapeDtypeStruct((2, GATES * units), jnp.dtype(dtype))
  lengths = jax.ShapeDtypeStruct((batch,), jnp.int32)
  run = _recurrence(length, batch, units, str(jnp.dtype(dtype)), False, tiling or TILING)
  loss = lambda s, r, b, n: run(s, r, b, n).astype(jnp.float32).sum()
  grad = jax.grad(loss, argnums=(0, 1, 2))
  return pallas_support.cuda_module_text(grad, steps, kernels, biases, lengths)
