"""The Pallas attention's kernel bodies and the block arithmetic they share; pallas_attention.py
holds the algorithm's description, builds the calls (grids, blocks, the custom VJP) and is
what the layers call.

Each kernel reads q, k and v as slots of the projections [B, T, 3, A, d] (`SLOTS`) and
adds their biases as it reads a block. Every value inside is a block: [bq, d] of queries
(or dO), [bk, d] of keys or values, [bq, bk] of logits, probabilities or their gradients,
[bq] of lse or D; `statics` carries the block size, the number of blocks, the scale, the
dropout rate, the heads, T and whether there is a bias.

JAX is imported inside the functions, so importing this module imports no framework.
"""

from typing import Any, NamedTuple

from recurrent_bert.layers.kernels import dropout_bits

# A padded key's logit: exp of it less any real logit is 0; finite, so that a block of
# padding alone gives no inf - inf.
PAD_LOGIT = -1e30
# The projections' slots, [B, T, 3, A, d]: the key's and the value's first, so that the
# kernel computing their gradients writes both as one block of two slots.
SLOTS = ("key", "value", "query")
KEY, VALUE, QUERY = (SLOTS.index(name) for name in ("key", "value", "query"))


def _kept(seed_ref, b, h, rows, cols, heads, length, rate):
  """[rows, cols] bool: the mask at query positions `rows` [bq] and keys `cols` [bk]."""
  from jax import numpy as jnp

  u = lambda x: jnp.asarray(x).astype(jnp.uint32)
  head_row = (u(b) * jnp.uint32(heads) + u(h)) * jnp.uint32(length)
  index = (head_row + u(rows)[:, None]) * jnp.uint32(length) + u(cols)[None, :]
  return dropout_bits.keep_bits(seed_ref[0], seed_ref[1], index) >= dropout_bits.threshold(rate)


def _logits(q, k, keys, bias, scale):
  """[bq, bk] float32: (q kᵀ·scale (+ the bias block)) · live + the key padding, where
  keys = (key_pad, live) [bk] each (`pallas_attention._key_masks`)."""
  from jax import numpy as jnp
  from jax.experimental.pallas import triton as plgpu

  key_pad, live = keys
  s = plgpu.dot(q, k, trans_b=True).astype(jnp.float32) * scale
  s = s if bias is None else s + bias.astype(jnp.float32)
  return s * live[None, :] + key_pad[None, :]


def _read(ref, bias_ref, rows=slice(None)):
  """A block of q, k or v [rows, d] from the projections, plus its bias [d]."""
  return ref[rows, :] + bias_ref[...][None, :]


def forward_kernel(
    seed_ref,
    q_ref,
    k_ref,
    v_ref,
    q_bias_ref,
    k_bias_ref,
    v_bias_ref,
    pad_ref,
    live_ref,
    *refs,
    statics,
):
  """Program (b, h, i): queries [i·bq, (i+1)·bq) of row b, head h, every key block."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl
  from jax.experimental.pallas import triton as plgpu

  bias_ref = refs[0] if statics["has_bias"] else None
  o_ref, lse_ref = refs[-2:]
  block, rate = statics["block"], statics["rate"]
  b, h, i = pl.program_id(0), pl.program_id(1), pl.program_id(2)
  q = _read(q_ref, q_bias_ref)  # [bq, d]
  rows = i * block + jnp.arange(block)

  def body(j, carry):
    acc, m, total = carry
    cols = pl.ds(j * block, block)
    v = _read(v_ref, v_bias_ref, cols)
    bias = None if bias_ref is None else bias_ref[:, cols]
    keys = (pad_ref[cols], live_ref[cols])
    s = _logits(q, _read(k_ref, k_bias_ref, cols), keys, bias, statics["scale"])
    m_new = jnp.maximum(m, s.max(axis=1))
    p = jnp.exp(s - m_new[:, None])
    correction = jnp.exp(m - m_new)
    total = total * correction + p.sum(axis=1)
    if rate:
      key_positions = j * block + jnp.arange(block)
      kept = _kept(seed_ref, b, h, rows, key_positions, statics["heads"], statics["length"], rate)
      p = jnp.where(kept, p * (1.0 / (1.0 - rate)), 0.0)
    acc = acc * correction[:, None] + plgpu.dot(p.astype(v.dtype), v).astype(jnp.float32)
    return acc, m_new, total

  init = (
      jnp.zeros(q.shape, jnp.float32),
      jnp.full((block,), -jnp.inf, jnp.float32),
      jnp.zeros((block,), jnp.float32),
  )
  acc, m, total = jax.lax.fori_loop(0, statics["num_blocks"], body, init)
  o_ref[...] = (acc / total[:, None]).astype(o_ref.dtype)
  lse_ref[...] = m + jnp.log(total)


def _key_block(r, j, block):
  """(cols, k, v, keys, key_positions) of key block j: its slice, k and v [bk, d] read from
  the projections (`_read`), `_logits`' (key_pad, live) [bk] and the keys' positions [bk]."""
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  cols = pl.ds(j * block, block)
  k, v = _read(r.k, r.k_bias, cols), _read(r.v, r.v_bias, cols)
  return cols, k, v, (r.pad[cols], r.live[cols]), j * block + jnp.arange(block)


def _probabilities(seed_ref, q, k, keys, bias, lse, b, h, rows, key_positions, statics):
  """(P, keep or None): [bq, bk] softmax probabilities from the saved lse, and the mask."""
  from jax import numpy as jnp

  p = jnp.exp(_logits(q, k, keys, bias, statics["scale"]) - lse[:, None])
  rate = statics["rate"]
  if not rate:
    return p, None
  heads, length = statics["heads"], statics["length"]
  return p, _kept(seed_ref, b, h, rows, key_positions, heads, length, rate)


def _dropped(x, kept, rate):
  from jax import numpy as jnp

  return x if kept is None else jnp.where(kept, x * (1.0 / (1.0 - rate)), 0.0)


def _block_gradients(r, q, do, k, v, keys, bias, lse, d, b, h, rows, key_positions, statics):
  """(P̃, dS), [bq, bk] float32 each, of one block of queries (q, do [bq, d]; lse, d [bq]
  of `r.lse`, `r.d`; positions `rows`) against one of keys (k, v [bk, d]; `keys` as
  `_logits`'): P̃ = keep·P/(1 - r), dS = P ∘ (dP - D)·live, dP = keep·(dO vᵀ)/(1 - r)."""
  from jax import numpy as jnp
  from jax.experimental.pallas import triton as plgpu

  rate = statics["rate"]
  p, kept = _probabilities(r.seed, q, k, keys, bias, lse, b, h, rows, key_positions, statics)
  dp = _dropped(plgpu.dot(do, v, trans_b=True).astype(jnp.float32), kept, rate)
  return _dropped(p, kept, rate), p * (dp - d[:, None]) * keys[1][None, :]


class _BackwardInputs(NamedTuple):
  """The backward kernels' first inputs, in order (refs; the forward's first nine too):
  the seed, the projections read as q, k and v and their biases, the key padding and
  liveness (`_key_masks`), dO, lse and D. The bias' block and the outputs follow."""

  seed: Any
  q: Any
  k: Any
  v: Any
  q_bias: Any
  k_bias: Any
  v_bias: Any
  pad: Any
  live: Any
  do: Any
  lse: Any
  d: Any


def _split_backward_inputs(refs):
  """(`_BackwardInputs`, the refs after them) of a backward kernel's refs."""
  count = len(_BackwardInputs._fields)
  return _BackwardInputs(*refs[:count]), list(refs[count:])


def key_gradients_kernel(*refs, statics):
  """Program (b, h, j): dK, dV of keys [j·bk, (j+1)·bk), over every query block."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl
  from jax.experimental.pallas import triton as plgpu

  r, refs = _split_backward_inputs(refs)
  bias_ref = refs[0] if statics["has_bias"] else None
  dkv_ref, sums_ref = refs[-2:]  # [bk, 2, d] of the projections' gradient, [2, d]
  block = statics["block"]
  b, h, j = pl.program_id(0), pl.program_id(1), pl.program_id(2)
  k, v = _read(r.k, r.k_bias), _read(r.v, r.v_bias)  # [bk, d]
  key_positions = j * block + jnp.arange(block)
  keys = (r.pad[pl.ds(j * block, block)], r.live[pl.ds(j * block, block)])

  def body(i, carry):
    dk, dv = carry
    rows_slice = pl.ds(i * block, block)
    q, do = _read(r.q, r.q_bias, rows_slice), r.do[rows_slice, :]
    bias = None if bias_ref is None else bias_ref[rows_slice, :]
    rows = i * block + jnp.arange(block)
    lse, d = r.lse[rows_slice], r.d[rows_slice]
    p, ds = _block_gradients(r, q, do, k, v, keys, bias, lse, d, b, h, rows, key_positions, statics)
    dv += plgpu.dot(p.astype(do.dtype), do, trans_a=True).astype(jnp.float32)
    dk += plgpu.dot(ds.astype(q.dtype), q, trans_a=True).astype(jnp.float32)
    return dk, dv

  zeros = jnp.zeros(k.shape, jnp.float32)
  dk, dv = jax.lax.fori_loop(0, statics["num_blocks"], body, (zeros, zeros))
  dk = dk * statics["scale"]
  for slot, gradient in ((KEY, dk), (VALUE, dv)):
    dkv_ref[:, slot, :] = gradient.astype(dkv_ref.dtype)
    sums_ref[slot, :] = gradient.sum(axis=0)  # the bias' gradient, this block's part


def query_gradients_kernel(*refs, statics):
  """Program (b, h, i): dQ of queries [i·bq, (i+1)·bq) (and their rows of dS, with a
  bias), over every key block."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl
  from jax.experimental.pallas import triton as plgpu

  r, refs = _split_backward_inputs(refs)
  has_bias = statics["has_bias"]
  bias_ref = refs.pop(0) if has_bias else None
  # refs[:2]: the first kernel's outputs, aliased to dq_ref's and sums_ref's arrays.
  dq_ref, sums_ref = refs[2:4]  # [bq, d] of the projections' gradient, [d]
  ds_ref = refs[4] if has_bias else None
  block = statics["block"]
  b, h, i = pl.program_id(0), pl.program_id(1), pl.program_id(2)
  q, do, lse, d = _read(r.q, r.q_bias), r.do[...], r.lse[...], r.d[...]
  rows = i * block + jnp.arange(block)

  def body(j, dq):
    cols, k, v, keys, key_positions = _key_block(r, j, block)
    bias = None if bias_ref is None else bias_ref[:, cols]
    _, ds = _block_gradients(r, q, do, k, v, keys, bias, lse, d, b, h, rows, key_positions, statics)
    if ds_ref is not None:
      ds_ref[:, cols] = ds.astype(ds_ref.dtype)
    return dq + plgpu.dot(ds.astype(k.dtype), k).astype(jnp.float32)

  dq = jax.lax.fori_loop(0, statics["num_blocks"], body, jnp.zeros(q.shape, jnp.float32))
  dq = dq * statics["scale"]
  dq_ref[...] = dq.astype(dq_ref.dtype)
  sums_ref[...] = dq.sum(axis=0)


def gradients_kernel(*refs, statics):
  """Program (b, h): dQ, dK and dV of row b, head h (and its dS, with a bias) in one pass,
  for T of at most `ONE_PASS_MAX_LENGTH`: a loop over the key blocks, the query blocks
  unrolled inside it, each query block's dQ carried across the key blocks. Each
  block pair's P̃ and dS are computed once, where the two kernels above compute them
  twice and read q, k, v and dO twice."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl
  from jax.experimental.pallas import triton as plgpu

  r, refs = _split_backward_inputs(refs)
  bias_ref = refs.pop(0) if statics["has_bias"] else None
  # [T, 3, d] of the projections' gradient, [T / block, 3, d] its blocks' row sums,
  # [T, T] dS with a bias.
  d_projections_ref, sums_ref = refs[:2]
  ds_ref = refs[2] if bias_ref is not None else None
  block, scale = statics["block"], statics["scale"]
  b, h = pl.program_id(0), pl.program_id(1)
  blocks = [pl.ds(n * block, block) for n in range(statics["num_blocks"])]
  positions = [n * block + jnp.arange(block) for n in range(statics["num_blocks"])]

  def key_block(j, dqs):
    cols, k, v, keys, key_positions = _key_block(r, j, block)
    dk = dv = jnp.zeros(k.shape, jnp.float32)
    dqs = list(dqs)
    for i, rows in enumerate(blocks):
      q, do = _read(r.q, r.q_bias, rows), r.do[rows, :]  # [bq, d]
      bias = None if bias_ref is None else bias_ref[rows, cols]
      p, ds = _block_gradients(
          r,
          q,
          do,
          k,
          v,
          keys,
          bias,
          r.lse[rows],
          r.d[rows],
          b,
          h,
          positions[i],
          key_positions,
          statics,
      )
      if ds_ref is not None:
        ds_ref[rows, cols] = ds.astype(ds_ref.dtype)
      dv += plgpu.dot(p.astype(do.dtype), do, trans_a=True).astype(jnp.float32)
      dk += plgpu.dot(ds.astype(k.dtype), q, trans_a=True).astype(jnp.float32)
      dqs[i] += plgpu.dot(ds.astype(k.dtype), k).astype(jnp.float32)
    for slot, gradient in ((KEY, dk * scale), (VALUE, dv)):
      d_projections_ref[cols, slot, :] = gradient.astype(d_projections_ref.dtype)
      sums_ref[j, slot, :] = gradient.sum(axis=0)  # the bias' gradient, this block's part
    return tuple(dqs)

  zeros = jnp.zeros((block, r.q.shape[-1]), jnp.float32)
  dqs = jax.lax.fori_loop(0, len(blocks), key_block, (zeros,) * len(blocks))
  for i, rows in enumerate(blocks):
    dq = dqs[i] * scale
    d_projections_ref[rows, QUERY, :] = dq.astype(d_projections_ref.dtype)
    sums_ref[i, QUERY, :] = dq.sum(axis=0)
