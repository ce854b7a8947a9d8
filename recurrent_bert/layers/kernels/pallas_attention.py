"""Self-attention with the recipe's attention dropout, as Pallas kernels (JAX on a CUDA GPU).

JAX's fused attention (`jax.nn.dot_product_attention`, cuDNN's flash attention) has no
dropout, so the papers' recipe (attention dropout 0.1) otherwise writes attention out: the
[B, A, T, T] logits, probabilities and mask each go through memory, forward and backward.
These kernels keep them on chip, FlashAttention's way, and draw the dropout mask inside:

  inputs    k, v and q as slots 0, 1 and 2 of one [B, T, 3, A, d] array (`SLOTS`; a QKV
            matmul's product, read in place) and their bias [3, A, d], added as each
            block is read (`attention_of_projections`; `attention` stacks separate q, k,
            v).
  forward   one program per (b, head, block of queries) walks the key blocks with a
            running max m and sum l (the online softmax; `total` in the code): s = (q kᵀ·
            scale + bias)·live + key padding (-1e30; live is 0 across an example without a
            real key, whose weights are then uniform, as in the written-out form, else 1),
            p = exp(s - m), o = Σ keep·p·v / ((1 - r)·l);
            saves lse = m + log l. l sums the probabilities before dropout, so o is dropout
            applied to the normalised probabilities, as the written-out form does.
  backward  D = rowsum(dO ∘ O) outside (it equals rowsum(P ∘ dP) with dropout too);
            dV = Σ P̃ᵀ dO, dK = Σ dSᵀ q·scale and dQ = Σ dS k·scale, where P = exp(s -
            lse), P̃ = keep·P/(1 - r), dP = keep·(dO vᵀ)/(1 - r), dS = P ∘ (dP - D)·live.
            Up to T = 128 (`ONE_PASS_MAX_LENGTH`) one program per (b, head) does it all
            in one pass over 32-row blocks, each block pair's P̃ and dS computed once.
            Beyond, two kernels: one program per (b, head, key block) accumulates dV
            and dK over the query blocks, one per (b, head, query block) dQ over the key
            blocks (each computing P and dP again). With a bias, the kernel that makes
            dQ also writes dS ([B, A, T, T] in the bias' dtype), summed over the batch
            (in float32) where the bias has none. The projections' gradient [B, T, 3,
            A, d] is one array the kernels fill (the second of two takes the first's
            aliased), and each block's rows are summed, [B, blocks, 3, A, d] float32,
            which a small reduction turns into the biases' gradient: no pass stacks dQ,
            dK and dV or reads them again.

The mask is a function of position, not a stream: element (b, h, i, j) is kept when
`keep_bits(seed, ((b·A + h)·T + i)·T + j) >= round(rate · 2³²)`, the 32-bit integer hash
of `dropout_bits` that the package's Dropout draws its JAX masks with too, so
the backward recomputes the forward's mask instead of storing it, and `dropout_keep` (the
same function in plain jax.numpy) is the reference the tests hold the kernels to. The
seed is the layer's Keras seed generator's next value, as its Dropout's.

Where it runs: Pallas lowers the kernels to Triton for a CUDA GPU; `interpret=True` (or
pallas_support.INTERPRET_ENV) runs them in Pallas' interpreter on any device, which is
how the CPU tests check them against the written-out attention. `fits` says which inputs
the kernels take: a head size of 16, 32, 64 or 128 (Triton's matmul tiles), T up to 1024.

JAX is imported inside the functions, so importing this module imports no framework.
"""

import functools
from typing import Optional

from recurrent_bert.layers.kernels import dropout_bits
from recurrent_bert.layers.kernels import pallas_support
from recurrent_bert.layers.kernels.pallas_attention_kernels import KEY
from recurrent_bert.layers.kernels.pallas_attention_kernels import PAD_LOGIT
from recurrent_bert.layers.kernels.pallas_attention_kernels import QUERY
from recurrent_bert.layers.kernels.pallas_attention_kernels import SLOTS
from recurrent_bert.layers.kernels.pallas_attention_kernels import VALUE
from recurrent_bert.layers.kernels.pallas_attention_kernels import forward_kernel
from recurrent_bert.layers.kernels.pallas_attention_kernels import gradients_kernel
from recurrent_bert.layers.kernels.pallas_attention_kernels import key_gradients_kernel
from recurrent_bert.layers.kernels.pallas_attention_kernels import query_gradients_kernel

_HEAD_SIZES = (16, 32, 64, 128)
_MAX_LENGTH = 1024
# T (padded to whole blocks) of at most this many positions takes the one-pass backward
# (`gradients_kernel`); longer T the two kernels (`key_gradients_kernel`,
# `query_gradients_kernel`). `attention(one_pass_max_length=0)` takes the two at any T.
ONE_PASS_MAX_LENGTH = 128
# The one-pass backward holds every query block's dQ: compiled for an H100 at T = 128, d =
# 64 with a bias and dropout, 32-row blocks and 8 warps use 255 registers a thread and
# spill 20 bytes (64-row blocks: 1 KB with 8 warps, 1.7 KB with 4; 32 rows, 4 warps: 380).
_ONE_PASS_BLOCK = 32
_ONE_PASS_WARPS = 8


def fits(head_size: int, length: int) -> bool:
  """Whether the kernels take heads of `head_size` over `length` positions."""
  return head_size in _HEAD_SIZES and 0 < length <= _MAX_LENGTH


def _block(length: int) -> int:
  """Queries (and keys) per block: 64, or the power of 2 (at least 16) covering T."""
  return min(64, max(16, 1 << max(length - 1, 0).bit_length()))


def _padded(length: int) -> int:
  """T rounded up to whole blocks: the length the kernels see."""
  return -(-length // _block(length)) * _block(length)


def dropout_keep(seed, shape, rate: float):
  """The kernels' mask in jax.numpy: [B, A, T, T] bool, True where kept (the bits of
  each element's row-major index, `dropout_bits`).

  Args:
    seed: [2] uint32.
    shape: (B, A, T, T).
    rate: the fraction dropped.
  """
  return dropout_bits.keep_bits_of_shape(seed, shape) >= dropout_bits.threshold(rate)


def _key_masks(key_is_real, padded: int):
  """(key_pad, live), [B, padded] float32 each, from key_is_real [B, T] bool: a padded
  key's logit gets -1e30 (`PAD_LOGIT`) and a real one's 0; live is 1, and 0 across an
  example without a real key, whose logits are then all 0 (uniform weights, the
  written-out form's rule) and pass no gradient to q, k or the bias."""
  from jax import numpy as jnp

  has_real = jnp.any(key_is_real, axis=1, keepdims=True)  # [B, 1]
  key_pad = jnp.where(key_is_real | ~has_real, 0.0, PAD_LOGIT).astype(jnp.float32)
  live = jnp.broadcast_to(has_real, key_is_real.shape).astype(jnp.float32)
  extra = ((0, 0), (0, padded - key_is_real.shape[1]))
  return jnp.pad(key_pad, extra, constant_values=PAD_LOGIT), jnp.pad(live, extra)


@functools.cache
def _attention(shape, bias_batch, dtype, bias_dtype, scale, rate, interpret, one_pass_backward):
  """The custom-VJP function (projections, projection_bias, bias, key_pad, live, seed)
  -> context for one configuration; shape: (B, T, 3, A, d) of the projections;
  bias_batch: None (no bias), 1 or B."""
  import jax
  from jax import numpy as jnp
  from jax.experimental import pallas as pl

  batch, length, _, heads, head_size = shape
  block, padded = _block(length), _padded(length)
  num_blocks = padded // block
  has_bias = bias_batch is not None
  statics = dict(
      block=block,
      num_blocks=num_blocks,
      scale=scale,
      rate=rate,
      heads=heads,
      length=length,
      has_bias=has_bias,
  )
  grid = (batch, heads, num_blocks)
  # q, k and v are slots of the projections [B, T, 3, A, d] (`SLOTS`): read in place.
  whole = lambda slot: pl.BlockSpec(
      (None, padded, None, None, head_size), lambda b, h, i: (b, 0, slot, h, 0)
  )
  tile = lambda slot: pl.BlockSpec(
      (None, block, None, None, head_size), lambda b, h, i: (b, i, slot, h, 0)
  )
  projection_bias_specs = [  # q's, k's, v's
      pl.BlockSpec((None, None, head_size), lambda b, h, i, slot=slot: (slot, h, 0))
      for slot in (QUERY, KEY, VALUE)
  ]
  context_tile = pl.BlockSpec((None, block, None, head_size), lambda b, h, i: (b, i, h, 0))
  context_whole = pl.BlockSpec((None, padded, None, head_size), lambda b, h, i: (b, 0, h, 0))
  seed_spec = pl.BlockSpec((2,), lambda b, h, i: (0,))
  pad_spec = pl.BlockSpec((None, padded), lambda b, h, i: (b, 0))
  per_query = pl.BlockSpec((None, None, block), lambda b, h, i: (b, h, i))
  per_row = pl.BlockSpec((None, None, padded), lambda b, h, i: (b, h, 0))
  pick = (lambda b: b) if bias_batch == batch else (lambda b: 0)
  bias_rows = pl.BlockSpec((None, None, block, padded), lambda b, h, i: (pick(b), h, i, 0))
  bias_cols = pl.BlockSpec((None, None, padded, block), lambda b, h, j: (pick(b), h, 0, j))
  bias_whole = pl.BlockSpec((None, None, padded, padded), lambda b, h, i: (pick(b), h, 0, 0))
  # dS, per example: program (b, h, i) writes rows [i·bq, (i+1)·bq) of [B, A, T, T]
  # (the one-pass backward, program (b, h, 0), all of them).
  ds_rows = pl.BlockSpec((None, None, block, padded), lambda b, h, i: (b, h, i, 0))
  ds_whole = pl.BlockSpec((None, None, padded, padded), lambda b, h, i: (b, h, 0, 0))
  sequence = jax.ShapeDtypeStruct((batch, padded, heads, head_size), dtype)
  rows_f32 = jax.ShapeDtypeStruct((batch, heads, padded), jnp.float32)

  # The projections' gradient and its rows' sums per block (the biases' gradient in
  # parts): the first backward kernel writes dK and dV as one block of their two slots,
  # the second, taking both arrays aliased, dQ into the query's (no pass stacks them).
  d_projections = jax.ShapeDtypeStruct((batch, padded, 3, heads, head_size), dtype)
  sums = jax.ShapeDtypeStruct((batch, num_blocks, 3, heads, head_size), jnp.float32)
  assert (KEY, VALUE) == (0, 1)  # one block of 2 slots: block index 0
  pair_tile = pl.BlockSpec((None, block, 2, None, head_size), lambda b, h, j: (b, j, 0, h, 0))
  pair_sums = pl.BlockSpec((None, None, 2, None, head_size), lambda b, h, j: (b, j, 0, h, 0))
  query_sums = pl.BlockSpec(
      (None, None, None, None, head_size), lambda b, h, i: (b, i, QUERY, h, 0)
  )

  # The one-pass backward's blocks: `_ONE_PASS_BLOCK` rows, or T padded when shorter.
  one_pass_block = min(_ONE_PASS_BLOCK, padded)
  one_pass_statics = dict(statics, block=one_pass_block, num_blocks=padded // one_pass_block)
  one_pass_blocks = one_pass_statics["num_blocks"]
  one_pass_sums = sums.update(shape=(batch, one_pass_blocks, 3, heads, head_size))

  def call(kernel, in_specs, out_specs, out_shape, *inputs, aliases=None, one_pass=False):
    return pl.pallas_call(
        functools.partial(kernel, statics=one_pass_statics if one_pass else statics),
        grid=(batch, heads, 1) if one_pass else grid,
        in_specs=in_specs,
        out_specs=out_specs,
        out_shape=out_shape,
        input_output_aliases=aliases or {},
        interpret=interpret,
        compiler_params=None if interpret else _compiler_params(one_pass),
        name=f"attention_{kernel.__name__.replace('_kernel', '')}",
    )(*inputs)

  def pad_sequence(t):
    return jnp.pad(t, ((0, 0), (0, padded - length)) + ((0, 0),) * (t.ndim - 2))

  def forward(projections, projection_bias, bias, key_pad, live, seed):
    projections = pad_sequence(projections)
    if has_bias:
      bias = jnp.pad(bias, ((0, 0), (0, 0), (0, padded - length), (0, padded - length)))
    inputs = [seed] + [projections] * 3 + [projection_bias] * 3 + [key_pad, live]
    inputs += [bias] if has_bias else []
    specs = [seed_spec, tile(QUERY), whole(KEY), whole(VALUE), *projection_bias_specs]
    specs += [pad_spec, pad_spec]
    specs += [bias_rows] if has_bias else []
    o, lse = call(forward_kernel, specs, [context_tile, per_query], [sequence, rows_f32], *inputs)
    return o[:, :length], (inputs, o, lse)

  @jax.custom_vjp
  def run(projections, projection_bias, bias, key_pad, live, seed):
    return forward(projections, projection_bias, bias, key_pad, live, seed)[0]

  def backward(saved, d_context):
    inputs, o, lse = saved
    do = pad_sequence(d_context.astype(dtype))
    d = jnp.einsum("btad,btad->bat", do.astype(jnp.float32), o.astype(jnp.float32))
    common = inputs[:9] + [do, lse, d]
    bias = inputs[9:]
    # dS in the bias' dtype: the bias' gradient is that dtype anyway, and a 16-bit dS
    # halves the [B, A, T, T] written and read again for the batch's sum (50 MB each way
    # a layer at bert_rab_base's 64 x 128).
    ds_shape = jax.ShapeDtypeStruct((batch, heads, padded, padded), bias_dtype or jnp.float32)
    if one_pass_backward:
      specs = [seed_spec, whole(QUERY), whole(KEY), whole(VALUE), *projection_bias_specs]
      specs += [pad_spec, pad_spec, context_whole, per_row, per_row] + [bias_whole] * has_bias
      whole_head = lambda shape: pl.BlockSpec(shape, lambda b, h, i: (b, 0, 0, h, 0))
      out_specs = [
          whole_head((None, padded, 3, None, head_size)),
          whole_head((None, one_pass_blocks, 3, None, head_size)),
      ] + [ds_whole] * has_bias
      results = call(
          gradients_kernel,
          specs,
          out_specs,
          [d_projections, one_pass_sums] + [ds_shape] * has_bias,
          *common,
          *bias,
          one_pass=True,
      )
      return gradients_of(results)
    key_specs = [seed_spec, whole(QUERY), tile(KEY), tile(VALUE), *projection_bias_specs]
    key_specs += [pad_spec, pad_spec, context_whole, per_row, per_row] + [bias_cols] * has_bias
    gradients = call(
        key_gradients_kernel,
        key_specs,
        [pair_tile, pair_sums],
        [d_projections, sums],
        *common,
        *bias,
    )
    query_specs = [seed_spec, tile(QUERY), whole(KEY), whole(VALUE), *projection_bias_specs]
    query_specs += [pad_spec, pad_spec, context_tile, per_query, per_query]
    query_specs += [bias_rows] * has_bias + [tile(QUERY), query_sums]
    inputs = [*common, *bias, *gradients]
    results = call(
        query_gradients_kernel,
        query_specs,
        [tile(QUERY), query_sums] + [ds_rows] * has_bias,
        [d_projections, sums] + [ds_shape] * has_bias,
        *inputs,
        aliases={len(inputs) - 2: 0, len(inputs) - 1: 1},
    )
    return gradients_of(results)

  def gradients_of(results):
    """The custom VJP's gradients from the backward kernels' [d_projections, sums(, dS)]."""
    dbias = None
    if has_bias:
      ds = results[2][:, :, :length, :length]
      if bias_batch == 1:  # summed in float32
        ds = ds.astype(jnp.float32).sum(axis=0, keepdims=True)
      dbias = ds.astype(bias_dtype)
    d_projection_bias = results[1].sum(axis=(0, 1)).astype(dtype)  # padded rows add 0
    return results[0][:, :length], d_projection_bias, dbias, None, None, None

  run.defvjp(forward, backward)
  return run


def _compiler_params(one_pass: bool):
  from jax.experimental.pallas import triton as pallas_triton

  return pallas_triton.CompilerParams(num_warps=_ONE_PASS_WARPS if one_pass else 4, num_stages=2)


def attention(
    q,
    k,
    v,
    key_is_real,
    bias,
    scale: float,
    rate: float,
    seed,
    interpret: Optional[bool] = None,
    one_pass_max_length: Optional[int] = None,
):
  """softmax(q kᵀ·scale + bias, padded keys masked), dropped out at `rate`, times v.

  Args:
    q, k, v: [B, T, A, d], one 16-bit or float32 dtype; `fits(d, T)`.
    key_is_real: [B, T] bool, False for padded keys. An example without a real key
      attends to all its keys with equal weight (the written-out form's rule).
    bias: None or [1 or B, A, T, T] float, added to the logits.
    scale: the logits' factor, 1/sqrt(d).
    rate: the attention-probability dropout rate, 0 <= rate < 1.
    seed: [2] uint32 (a Keras seed generator's next value); read only when rate > 0.
    interpret: Pallas' interpreter (any device); None reads the SwishRNN kernels' switch
      (`pallas_support.INTERPRET_ENV`).
    one_pass_max_length: the longest T (padded to whole blocks) whose backward is one
      kernel; None: `ONE_PASS_MAX_LENGTH`; 0: the two kernels at any T.
  Returns:
    [B, T, A, d] context in q's dtype.
  """
  from jax import numpy as jnp

  by_name = dict(query=q, key=k, value=v)
  projections = jnp.stack([by_name[name] for name in SLOTS], axis=2)  # [B, T, 3, A, d]
  zero = jnp.zeros(projections.shape[2:], q.dtype)
  return attention_of_projections(
      projections, zero, key_is_real, bias, scale, rate, seed, interpret, one_pass_max_length
  )


def attention_of_projections(
    projections,
    projection_bias,
    key_is_real,
    bias,
    scale: float,
    rate: float,
    seed,
    interpret: Optional[bool] = None,
    one_pass_max_length: Optional[int] = None,
):
  """`attention` of k, v, q = projections[:, :, slot] + projection_bias[slot], slots 0, 1
  and 2 (`SLOTS`): the kernels read them in place and add the bias as they read, so a QKV
  matmul's product goes in as it is, with no pass that splits it or adds its bias; its
  gradient comes back as one array of its shape.

  Args:
    projections: [B, T, 3, A, d], one 16-bit or float32 dtype; `fits(d, T)`.
    projection_bias: [3, A, d] in the projections' dtype, slots as the projections'.
    key_is_real, bias, scale, rate, seed, interpret, one_pass_max_length: as
      `attention`'s.
  Returns:
    [B, T, A, d] context in the projections' dtype.
  """
  from jax import numpy as jnp

  if interpret is None:
    interpret = pallas_support.interpreted()
  if one_pass_max_length is None:
    one_pass_max_length = ONE_PASS_MAX_LENGTH
  padded = _padded(projections.shape[1])
  run = _attention(
      tuple(projections.shape),
      None if bias is None else int(bias.shape[0]),
      str(projections.dtype),
      None if bias is None else str(bias.dtype),
      float(scale),
      float(rate),
      bool(interpret),
      padded <= one_pass_max_length,
  )
  key_pad, live = _key_masks(jnp.asarray(key_is_real), padded)
  seed = jnp.asarray(seed).astype(jnp.uint32).reshape((2,))
  return run(projections, projection_bias.astype(projections.dtype), bias, key_pad, live, seed)
