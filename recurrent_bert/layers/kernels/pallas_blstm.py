"""The BLSTM's recurrence as one fused Pallas kernel per time step and pass ("pallas").

The portable scan (portable_blstm.py) computes what this computes, but compiled for a GPU
each of its steps is several kernels: XLA runs the recurrent matmul, the cell, and one
in-place write of h, c and the gates into their [T, ...] stacks each, then the loop
counter; the backward step is as many (the cell's gradient, its write, a split-K matmul
and the reduction of its parts). Read from the step compiled for an H100
(benchmarks/gpu/compiled_for_gpu.py): 6 kernels a forward step and 6 a backward step,
18,432 of the 20,088 of a trans_blstm_2_base training step at T = 128, each microseconds
of work; here 1.25 a step (5,398 in all).

Here each step is one kernel. The program for direction d, rows [b, b + block_b) and
hidden units [j, j + block_u) owns the four gate columns of those units:

  forward, step t:   z = steps[t] + b + h[t-1] R  (its 4 x block_u columns; K = u)
                     i, f, g, o = σ, σ, tanh, σ (z);  c = f c[t-1] + i g;  h = o tanh(c)
  backward, step t:  dh = dh_out[t] + dz[t+1] Rᵀ   (its block_u columns; K = 4u)
                     dc = dc_from_later + dh o (1 - tanh²c)
                     dz[t] = (dc g i', dc c[t-1] f', dc i g', dh tanh(c) o')
                     dc_from_later ← dc f

An LSTM unit's cell gradient needs only that unit's own quantities, so each program's
part of dz[t] is complete in itself; the next step's kernel reads all of dz[t] (all of
h[t-1] going forward), which is why a launch is one step: a kernel sees the other
programs' writes only after they have ended. The stacks h, c (float32), the gates
(float32) and dz are read and written in place (aliased through the time loop), so no
step copies them. Everything is direction-major, [2, B, T, ...]: the input projections
come out of one batched matmul so, and h, the steps' gradient and R's are read and
written so, with no layout transpose of a [T, ...] stack on either side (the portable
scan, whose loop runs over a leading T, needs them). The gates' bias b is added as the
steps are read (in float32), so the input projections go in as the matmul makes them, with
no pass that adds it (200 MB a layer at trans_blstm_2_base's size). As in the portable
form, R's gradient is one matmul after the loop over all B·T rows, and the cell state and
gates are float32 whatever the compute dtype.

Sizes are padded to what Triton's blocks need (rows and units to multiples of powers of 2
of at least 16): padded units have zero weights and inputs, so their c and h stay 0 and
nothing flows back into real ones; padded rows likewise. `interpret=True` runs the same
kernels in Pallas' interpreter on any device (the CPU tests, against the portable scan
and the numpy loop); `triton_module_text` lowers them for CUDA without a GPU.
"""

import functools
from typing import NamedTuple

from recurrent_bert.layers.kernels import pallas_swish_rnn
from recurrent_bert.layers.kernels import portable_blstm
from recurrent_bert.layers.kernels.bias_gradient import bias_gradient


class Tiling(NamedTuple):
  """How the kernels split the work (what they compute does not depend on it).

  block_u: hidden units per program (each owns their 4 gate columns).
  block_b: batch rows per program.
  block_k: the matmuls' reduction depth per iteration.
  num_warps: warps per program.
  num_stages: Triton's software pipelining of the matmul's loads over block_k.
  steps_per_iteration: time steps per iteration of XLA's loop (its counter is a kernel
    of its own each iteration).
  """

  block_u: int = 32
  block_b: int = 64
  block_k: int = 64
  num_warps: int = 4
  num_stages: int = 2
  steps_per_iteration: int = 4


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


def _dot(a, b):
  """a [m, k] x b [k, n] accumulated in float32; exact float32 products for float32."""
  import jax
  from jax import numpy as jnp

  precision = jax.lax.Precision.HIGHEST if a.dtype == jnp.float32 else None
  return jnp.dot(a, b, preferred_element_type=jnp.float32, precision=precision)


def _time(count_ref, offset_ref, sizes):
  """The step a launch computes: iteration `count` of XLA's loop, `offset` within it (both
  [1] int32; the offsets are constants, so no kernel computes a step's index)."""
  return count_ref[0] * sizes.steps_per_iteration + offset_ref[0]


def _forward_kernel(
    count_ref,
    offset_ref,
    steps_ref,
    kernel_ref,
    bias_ref,
    h_in,
    c_in,
    gates_in,
    h_ref,
    c_ref,
    gates_ref,
    *,
    sizes,
):
  """Step t = `_time` of one program (module docstring). h_ref, c_ref and gates_ref alias
  h_in, c_in and gates_in: the stacks [2, B, T, u | 4u], read at t - 1 and written at t."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  del h_in, c_in, gates_in  # the same buffers as the outputs
  d, rows = pl.program_id(0), pl.ds(pl.program_id(1) * sizes.block_b, sizes.block_b)
  own = pl.program_id(2) * sizes.block_u
  units = pl.ds(own, sizes.block_u)
  gate = lambda k: pl.ds(k * sizes.units + own, sizes.block_u)  # gate k of these units
  t = _time(count_ref, offset_ref, sizes)
  earlier, started = jnp.maximum(t - 1, 0), t > 0

  def accumulate(kb, z):
    depth = pl.ds(pl.multiple_of(kb * sizes.block_k, sizes.block_k), sizes.block_k)
    h = h_ref[d, rows, earlier, depth]  # [block_b, block_k]: h[t-1], every program's units
    h = jnp.where(started, h, jnp.zeros_like(h))
    return tuple(zk + _dot(h, kernel_ref[d, depth, gate(k)]) for k, zk in enumerate(z))

  z = tuple(
      steps_ref[d, rows, t, gate(k)].astype(jnp.float32)
      + bias_ref[d, gate(k)].astype(jnp.float32)[None, :]
      for k in range(GATES)
  )
  z = jax.lax.fori_loop(0, sizes.units // sizes.block_k, accumulate, z)
  i, f, o = jax.nn.sigmoid(z[0]), jax.nn.sigmoid(z[1]), jax.nn.sigmoid(z[3])
  g = jnp.tanh(z[2])
  c = f * jnp.where(started, c_ref[d, rows, earlier, units], 0.0) + i * g
  c_ref[d, rows, t, units] = c
  h_ref[d, rows, t, units] = (o * jnp.tanh(c)).astype(h_ref.dtype)
  for k, activated in enumerate((i, f, g, o)):
    gates_ref[d, rows, t, gate(k)] = activated


def _backward_kernel(
    count_ref,
    offset_ref,
    dh_ref,
    gates_ref,
    c_ref,
    kernel_t_ref,
    dz_in,
    dc_in,
    dz_ref,
    dc_ref,
    *,
    sizes,
):
  """Reverse step t = T - 1 - `_time` of one program (module docstring). dz_ref [2, B, T, 4u]
  (compute dtype) and dc_ref [2, B, u] (float32, the cell gradient passed back from
  t + 1) alias dz_in and dc_in."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  del dz_in, dc_in
  d, rows = pl.program_id(0), pl.ds(pl.program_id(1) * sizes.block_b, sizes.block_b)
  own = pl.program_id(2) * sizes.block_u
  units = pl.ds(own, sizes.block_u)
  gate = lambda k: pl.ds(k * sizes.units + own, sizes.block_u)
  t = sizes.length - 1 - _time(count_ref, offset_ref, sizes)
  later, has_later = jnp.minimum(t + 1, sizes.length - 1), t + 1 < sizes.length

  def accumulate(kb, dh):
    depth = pl.ds(pl.multiple_of(kb * sizes.block_k, sizes.block_k), sizes.block_k)
    dz = dz_ref[d, rows, later, depth]  # [block_b, block_k]: dz[t+1], every program's gates
    dz = jnp.where(has_later, dz, jnp.zeros_like(dz))
    return dh + _dot(dz, kernel_t_ref[d, depth, units])

  dh = dh_ref[d, rows, t, units].astype(jnp.float32)
  dh = jax.lax.fori_loop(0, GATES * sizes.units // sizes.block_k, accumulate, dh)
  i, f, g, o = (gates_ref[d, rows, t, gate(k)] for k in range(GATES))
  c = c_ref[d, rows, t, units]
  c_earlier = jnp.where(t > 0, c_ref[d, rows, jnp.maximum(t - 1, 0), units], 0.0)
  tanh_c = jnp.tanh(c)
  dc = jnp.where(has_later, dc_ref[d, rows, units], 0.0) + dh * o * (1.0 - tanh_c * tanh_c)
  parts = (
      dc * g * i * (1.0 - i),
      dc * c_earlier * f * (1.0 - f),
      dc * i * (1.0 - g * g),
      dh * tanh_c * o * (1.0 - o),
  )
  for k, part in enumerate(parts):
    dz_ref[d, rows, t, gate(k)] = part.astype(dz_ref.dtype)
  dc_ref[d, rows, units] = dc * f


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
  """The custom-gradient function of (steps [2, B, T, 4u], recurrent_kernels [2, u, 4u])
  -> h [2, B, T, u] for one static configuration."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  sizes = _sizes(length, batch, units, tiling)
  grid = (2, sizes.batch // sizes.block_b, sizes.units // sizes.block_u)
  stack = lambda width, dt: jax.ShapeDtypeStruct((2, sizes.batch, length, width), dt)
  h_stack, c_stack = stack(sizes.units, dtype), stack(sizes.units, jnp.float32)
  gates_stack, dz_stack = stack(GATES * sizes.units, jnp.float32), stack(GATES * sizes.units, dtype)
  dc_state = jax.ShapeDtypeStruct((2, sizes.batch, sizes.units), jnp.float32)
  compiler_params = (
      None if interpret else pallas_swish_rnn.compiler_params(tiling.num_warps, tiling.num_stages)
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

  def padded_steps(t):  # [2, B, T, 4u] -> [2, B', T, 4u']
    return padded(padded_gates(t), 1, batch, sizes.batch)

  def unpadded_gates(t):  # [2, B', T, 4u'] -> [2, B, T, 4u]
    t = t[:, :batch].reshape(2, batch, length, GATES, sizes.units)
    return t[..., :units].reshape(2, batch, length, GATES * units)

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

  def forward(steps, recurrent_kernels, biases):
    kernel_p = padded_kernel(recurrent_kernels)
    stacks = [uninitialized(s) for s in (h_stack, c_stack, gates_stack)]
    h, c, gates = every_step(
        _forward_kernel,
        [h_stack, c_stack, gates_stack],
        "blstm_forward_step",
        (padded_steps(steps), kernel_p, padded_gates(biases)),
        stacks,
    )
    return h[:, :batch, :, :units], (h, c, gates, kernel_p)

  @jax.custom_vjp
  def run(steps, recurrent_kernels, biases):
    return forward(steps, recurrent_kernels, biases)[0]

  def backward(saved, dh_out):
    h, c, gates, kernel_p = saved
    dh_p = padded(padded(dh_out, 1, batch, sizes.batch), 3, units, sizes.units)
    kernel_t = jnp.transpose(kernel_p, (0, 2, 1))  # [2, 4u', u']
    dz, _ = every_step(
        _backward_kernel,
        [dz_stack, dc_state],
        "blstm_backward_step",
        (dh_p, gates, c, kernel_t),
        [uninitialized(dz_stack), jnp.zeros(dc_state.shape, jnp.float32)],
    )
    # R's gradient, one matmul over all B·T rows: [2, u', B'·T] x [2, B'·T, 4u'].
    d_kernel = jnp.einsum("dbtu,dbtg->dug", portable_blstm.earlier(h, axis=2), dz)
    d_kernel = d_kernel.reshape(2, sizes.units, GATES, sizes.units)[:, :units, :, :units]
    d_steps = unpadded_gates(dz)
    return d_steps, d_kernel.reshape(2, units, GATES * units), bias_gradient(d_steps, (1, 2))

  run.defvjp(forward, backward)
  return run


def recurrence(
    steps,
    recurrent_kernels,
    batch,
    units,
    length,
    unroll=None,
    interpret=None,
    tiling=None,
    biases=None,
):
  """Both directions' LSTM recurrence, one kernel a step and pass (module docstring).

  Args: as `portable_blstm.recurrence`'s but direction-major (steps [2, B, T, 4u],
    recurrent_kernels [2, u, 4u] in steps' dtype; T static), and
    unroll: unused (the tiling's steps_per_iteration unrolls XLA's loop).
    biases: [2, 4u] in steps' dtype, added to the steps as the kernels read them; None:
      the steps have theirs.
    interpret: run Pallas' interpreter (any device); None reads the Pallas switch
      (pallas_swish_rnn.INTERPRET_ENV).
    tiling: a `Tiling`; None is `TILING`.
  Returns:
    h: [2, B, T, u] in steps' dtype.
  """
  del unroll
  if interpret is None:
    interpret = pallas_swish_rnn.interpreted()
  from jax import numpy as jnp

  run = _recurrence(length, batch, units, str(steps.dtype), bool(interpret), tiling or TILING)
  if biases is None:
    biases = jnp.zeros((2, GATES * units), steps.dtype)
  return run(steps, recurrent_kernels, biases)


def bidirectional_lstm(x, lengths, forward, backward):
  """`portable_blstm.bidirectional_lstm` (same arguments and result) on these kernels."""
  return portable_blstm.bidirectional_lstm(
      x, lengths, forward, backward, recurrence_fn=recurrence, time_major=False
  )  # direction-major: the kernels add the biases


def triton_module_text(batch, length, units, dtype="bfloat16"):
  """The StableHLO text of the training step's recurrence (forward and backward) lowered
  for a CUDA GPU, which needs no GPU: lowering fails here if Triton cannot take a kernel."""
  import jax
  from jax import numpy as jnp

  steps = jax.ShapeDtypeStruct((2, batch, length, GATES * units), jnp.dtype(dtype))
  kernels = jax.ShapeDtypeStruct((2, units, GATES * units), jnp.dtype(dtype))
  biases = jax.ShapeDtypeStruct((2, GATES * units), jnp.dtype(dtype))
  run = _recurrence(length, batch, units, str(jnp.dtype(dtype)), False, TILING)
  loss = lambda s, r, b: run(s, r, b).astype(jnp.float32).sum()
  exported = jax.export.export(
      jax.jit(jax.grad(loss, argnums=(0, 1, 2))),
      platforms=["cuda"],
      disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")],
  )(steps, kernels, biases)
  return exported.mlir_module()
