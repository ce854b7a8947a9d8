"""The Pallas attention kernels with in-kernel dropout (JAX on a CUDA GPU), checked without one.

The kernels run in Pallas' interpreter against attention written out in float64 numpy,
its gradients by the textbook formulas (softmax, dropout, two matmuls; no blocks, no
online softmax), its dropout mask from the hash of the module docstring in numpy's own
uint32 arithmetic: outputs and the gradients of q, k, v and the bias; padded keys, T that
is not a multiple of the kernels' block and spans two blocks, a bias shared over the batch
or per example, dropout on and off; under bfloat16 too. The mask's statistics; the layer
in training takes the kernels and equals the same reference; and the kernels lower to
Triton for CUDA at bert_base's shapes (no GPU needed), so one Triton cannot take fails
here, not on the card.
"""

import numpy as np
import pytest

from tests.backends.support import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="Pallas kernels are JAX's")


def _on_a_gpu() -> bool:
  import jax

  return jax.devices()[0].platform == "gpu"


INTERPRET = BACKEND == "jax" and not _on_a_gpu()
# Triton's float32 matmuls on a GPU round their inputs to TF32 (10-bit mantissas).
FLOAT32_TOLERANCE = 1e-5 if INTERPRET else 5e-3
SEED = (2024, 7)


def _numpy_keep(seed, shape, rate):
  """[B, A, T, T] bool: the hash of the module docstring, in numpy uint32 arithmetic."""
  batch, heads, length, _ = shape
  b, h, i, j = np.meshgrid(*(np.arange(n, dtype=np.uint64) for n in shape), indexing="ij")
  wrap = lambda x: (x % 2**32).astype(np.uint64)
  index = wrap(wrap(wrap(b * heads + h) * length + i) * length + j)

  def mix(x):
    x ^= x >> 16
    x = wrap(x * 0x7FEB352D)
    x ^= x >> 15
    x = wrap(x * 0x846CA68B)
    return x ^ (x >> 16)

  bits = mix(wrap(mix(wrap(index * 0x9E3779B9 + seed[0])) + seed[1]))
  return bits >= min(round(rate * 2.0**32), 2**32 - 1)


def _numpy_attention(q, k, v, key_is_real, bias, scale, rate, seed, upstream):
  """(context, (dq, dk, dv, dbias)) in float64: q, k, v [B, T, A, d]; bias None or
  [1 or B, A, T, T]; upstream [B, T, A, d], the context's cotangent."""
  q, k, v, upstream = (np.asarray(t, np.float64) for t in (q, k, v, upstream))
  s = np.einsum("bqad,bkad->baqk", q, k) * scale
  s = s + np.where(key_is_real, 0.0, -1e30)[:, None, None, :]
  if bias is not None:
    s = s + np.asarray(bias, np.float64)
  p = np.exp(s - s.max(axis=-1, keepdims=True))
  p /= p.sum(axis=-1, keepdims=True)
  factor = np.ones_like(p) if not rate else _numpy_keep(seed, p.shape, rate) / (1.0 - rate)
  dropped = p * factor
  context = np.einsum("baqk,bkad->bqad", dropped, v)
  dv = np.einsum("baqk,bqad->bkad", dropped, upstream)
  dp = np.einsum("bqad,bkad->baqk", upstream, v) * factor
  ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
  dq = np.einsum("baqk,bkad->bqad", ds, k) * scale
  dk = np.einsum("baqk,bqad->bkad", ds, q) * scale
  dbias = None if bias is None else (ds.sum(axis=0, keepdims=True) if len(bias) == 1 else ds)
  return context, (dq, dk, dv, dbias)


def _kernel_attention(
    q, k, v, key_is_real, bias, scale, rate, seed, upstream, one_pass_max_length=None
):
  """The kernels' (context, (dq, dk, dv, dbias)) as float64 numpy."""
  import jax
  from jax import numpy as jnp

  from recurrent_bert.layers.kernels import pallas_attention

  seed = jnp.asarray(seed, jnp.uint32)

  def loss(q, k, v, bias):
    out = pallas_attention.attention(
        q,
        k,
        v,
        jnp.asarray(key_is_real),
        bias,
        scale,
        rate,
        seed,
        INTERPRET,
        one_pass_max_length,
    )
    return (out.astype(jnp.float32) * upstream).sum(), out

  argnums = (0, 1, 2) + ((3,) if bias is not None else ())
  grads, out = jax.grad(loss, argnums=argnums, has_aux=True)(q, k, v, bias)
  as_numpy = lambda t: np.asarray(jnp.asarray(t, jnp.float32), np.float64)
  grads = [as_numpy(g) for g in grads] + ([None] if bias is None else [])
  return as_numpy(out), tuple(grads)


def _inputs(rng, batch, length, heads, head_size, bias_batch, dtype="float32"):
  import jax.numpy as jnp

  shape = (batch, length, heads, head_size)
  q, k, v, upstream = (rng.normal(size=shape).astype("float32") for _ in range(4))
  bias = None
  if bias_batch:
    bias = jnp.asarray(rng.normal(size=(bias_batch, heads, length, length)), dtype)
  lengths = np.array([length] + [max(1, length * 2 // 3)] * (batch - 1))
  key_is_real = np.arange(length)[None, :] < lengths[:, None]
  cast = lambda t: jnp.asarray(t, dtype)
  return cast(q), cast(k), cast(v), key_is_real, bias, upstream


def _largest_relative_difference(got, want):
  return max(
      float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-30))
      for g, w in zip(got, want)
      if w is not None
  )


# `attention`'s one_pass_max_length: the default, or the two backward kernels at any T.
BACKWARDS = {"one pass": None, "two kernels": 0}


@pytest.mark.parametrize(
    "length, bias_batch, rate, backward",
    [
        (16, 0, 0.0, "one pass"),
        (40, 1, 0.1, "one pass"),
        (100, 2, 0.1, "one pass"),
        (100, 0, 0.1, "one pass"),
        (100, 1, 0.0, "one pass"),
        (100, 2, 0.1, "two kernels"),
        (100, 1, 0.0, "two kernels"),
        (150, 2, 0.1, "two kernels"),
    ],
)
def test_kernels_and_gradients_against_numpy(rng, length, bias_batch, rate, backward):
  """T = 16 (one block), 40 (one block, padded), 100 (two blocks of 64, padded) and 150
  (three: beyond the one-pass backward); a bias shared over the batch (1) or per example
  (2); dropout on and off; the one-pass backward and the two kernels."""
  q, k, v, key_is_real, bias, upstream = _inputs(rng, 2, length, 2, 16, bias_batch)
  args = (q, k, v, key_is_real, bias, 0.25, rate, SEED, upstream)
  out, grads = _kernel_attention(*args, one_pass_max_length=BACKWARDS[backward])
  want_out, want_grads = _numpy_attention(*args)
  assert _largest_relative_difference([out], [want_out]) < FLOAT32_TOLERANCE
  assert _largest_relative_difference(grads, want_grads) < FLOAT32_TOLERANCE
  assert (grads[3] is None) == (bias is None)


def test_bfloat16_inputs(rng):
  """bfloat16 q, k, v and bias (as under mixed precision) against the float64 reference
  of the same rounded values: the kernels round the probabilities to bfloat16 before the
  matmuls with v (and the gradients to the inputs' dtype), nothing more."""
  q, k, v, key_is_real, bias, upstream = _inputs(rng, 2, 100, 2, 32, 1, dtype="bfloat16")
  args = (q, k, v, key_is_real, bias, 32**-0.5, 0.1, SEED, upstream)
  out, grads = _kernel_attention(*args)
  want_out, want_grads = _numpy_attention(
      *(np.asarray(np.asarray(t, np.float32)) if t is not None else None for t in args[:3]),
      key_is_real,
      np.asarray(bias, np.float32),
      *args[5:],
  )
  assert _largest_relative_difference([out], [want_out]) < 2e-2
  assert _largest_relative_difference(grads, want_grads) < 3e-2


def test_the_mask_is_binomial_uncorrelated_and_follows_the_seed():
  """dropout_keep (the kernels' hash in jax.numpy) equals numpy's; over 4·8·128·128
  elements the kept fraction is within 5 standard deviations of 1 - rate, horizontal and
  vertical neighbours are uncorrelated (|r| < 0.02), and another seed word gives
  another mask."""
  from recurrent_bert.layers.kernels import pallas_attention

  shape, rate = (4, 8, 128, 128), 0.1
  keep = np.asarray(pallas_attention.dropout_keep(np.array(SEED, np.uint32), shape, rate))
  np.testing.assert_array_equal(keep, _numpy_keep(SEED, shape, rate))
  n = keep.size
  assert abs(keep.mean() - (1 - rate)) < 5 * np.sqrt(rate * (1 - rate) / n)
  x = keep.astype(np.float64)
  for a, b in ((x[..., 1:], x[..., :-1]), (x[:, :, 1:], x[:, :, :-1])):
    assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 0.02
  for other in ((SEED[0] + 1, SEED[1]), (SEED[0], SEED[1] + 1)):
    changed = keep != np.asarray(
        pallas_attention.dropout_keep(np.array(other, np.uint32), shape, rate)
    )
    assert abs(changed.mean() - 2 * rate * (1 - rate)) < 0.01


def test_the_layer_in_training_takes_the_kernels(rng, monkeypatch):
  """SelfAttention (H = 32, 2 heads of 16) with attention dropout 0.1, training, under
  Pallas' interpreter: its output is the numpy reference's with the seed its dropout's
  generator held before the call; the generator advances; inference is unchanged."""
  import keras

  from recurrent_bert.layers import SelfAttention
  from recurrent_bert.layers import attention as attention_module
  from recurrent_bert.layers.kernels import pallas_support

  monkeypatch.setenv(pallas_support.INTERPRET_ENV, "1")
  layer = SelfAttention(32, 2, attention_dropout_rate=0.1)
  x = rng.normal(size=(2, 24, 32)).astype("float32")
  mask = (np.arange(24)[None, :] < np.array([[24], [10]])).astype("int32")
  bias = rng.normal(size=(1, 2, 24, 24)).astype("float32")
  layer(x, mask, bias)
  seed = np.asarray(keras.ops.convert_to_numpy(layer.dropout.seed_generator.state))
  out = keras.ops.convert_to_numpy(layer(x, mask, bias, training=True))
  assert not np.array_equal(seed, keras.ops.convert_to_numpy(layer.dropout.seed_generator.state))
  q, k, v = (keras.ops.convert_to_numpy(d(x)) for d in (layer.query, layer.key, layer.value))
  context, _ = _numpy_attention(q, k, v, mask > 0, bias, 16**-0.5, 0.1, seed, np.zeros_like(q))
  want = keras.ops.convert_to_numpy(layer.output_dense(context.astype("float32")))
  np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
  with attention_module.written_out_attention():
    inference = keras.ops.convert_to_numpy(layer(x, mask, bias))
  np.testing.assert_allclose(
      keras.ops.convert_to_numpy(layer(x, mask, bias)), inference, rtol=1e-5, atol=1e-6
  )


@pytest.mark.parametrize("backward", ["one pass", "two kernels"])
@pytest.mark.parametrize("has_bias", [False, True])
def test_the_kernels_lower_to_triton_for_cuda(has_bias, backward):
  """bert_base's attention (B = 64, T = 128, 12 heads of 64, bfloat16, dropout 0.1):
  the forward and the backward kernels (one pass, or the two kernels) become Triton calls
  for CUDA."""
  import jax
  from jax import numpy as jnp

  from recurrent_bert.layers.kernels import pallas_attention
  from recurrent_bert.layers.kernels import pallas_support

  sequence = jax.ShapeDtypeStruct((64, 128, 12, 64), jnp.bfloat16)
  bias = jax.ShapeDtypeStruct((1, 12, 128, 128), jnp.bfloat16) if has_bias else None

  def loss(q, k, v, bias):
    real = jnp.ones((64, 128), bool)
    seed = jnp.array(SEED, jnp.uint32)
    out = pallas_attention.attention(
        q, k, v, real, bias, 0.125, 0.1, seed, False, BACKWARDS[backward]
    )
    return out.astype(jnp.float32).sum()

  argnums = (0, 1, 2, 3) if has_bias else (0, 1, 2)
  grad = jax.grad(loss, argnums=argnums)
  text = pallas_support.cuda_module_text(grad, sequence, sequence, sequence, bias)
  kernels = {"attention_forward", "attention_gradients"}
  if backward == "two kernels":
    kernels ^= {"attention_gradients", "attention_key_gradients", "attention_query_gradients"}
  names = ("forward", "gradients", "key_gradients", "query_gradients")
  assert {f"attention_{name}" for name in names if f"attention_{name}" in text} == kernels


# Full, 4 real, 1 real, none: every row of the last example is padding only.
_MASK = np.array([[1] * 6, [1] * 4 + [0] * 2, [1] + [0] * 5, [0] * 6], "int32")


@pytest.mark.parametrize("one_matmul", [False, True])  # q, k, v as one product, as on a GPU
def test_the_layer_with_dropout_equals_the_written_out_form(rng, monkeypatch, one_matmul):
  """SelfAttention (2 heads of 16, relative bias, attention dropout 0.1) in training under
  Pallas' interpreter against its written-out form, whose Dropout draws the same mask
  from the same seed: outputs and the gradients of x, every weight and the bias, with an
  example of padding only (uniform weights, dropped out; gradients to the values only).
  With `one_matmul` the kernels read q, k and v from the one QKV product and add their
  biases themselves (`attention_of_projections`)."""
  import jax
  import keras

  from recurrent_bert.layers import SelfAttention
  from recurrent_bert.layers import attention as attention_module
  from recurrent_bert.layers.kernels import pallas_attention
  from recurrent_bert.layers.kernels import pallas_support

  monkeypatch.setenv(pallas_support.INTERPRET_ENV, "1")
  monkeypatch.setattr(attention_module, "_on_a_gpu", lambda x: one_matmul)
  called = []
  for name in ("attention", "attention_of_projections"):
    original = getattr(pallas_attention, name)
    spy = lambda *a, _name=name, _original=original, **k: called.append(_name) or _original(*a, **k)
    monkeypatch.setattr(pallas_attention, name, spy)
  layer = SelfAttention(32, 2, attention_dropout_rate=0.1)
  layer.build((None, None, 32))
  for v in layer.trainable_weights:
    v.assign(rng.normal(scale=0.3, size=v.shape).astype("float32"))
  x = rng.normal(size=(4, 6, 32)).astype("float32")
  bias = rng.normal(size=(1, 2, 6, 6)).astype("float32")
  upstream = rng.normal(size=x.shape).astype("float32")
  seeds = [v.value for v in layer.non_trainable_variables]

  def outputs_and_gradients():
    def loss(x, weights, bias):
      y, _ = layer.stateless_call(weights, seeds, x, _MASK, bias, training=True)
      return (y * upstream).sum(), y

    grad = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)
    (_, y), (dx, dweights, dbias) = grad(x, [v.value for v in layer.trainable_weights], bias)
    return [np.asarray(t) for t in (y, dx, *dweights, dbias)]

  got = outputs_and_gradients()
  # (`attention` stacks q, k and v and calls `attention_of_projections`.)
  assert called[0] == ("attention_of_projections" if one_matmul else "attention")
  calls = len(called)
  with attention_module.written_out_attention():
    want = outputs_and_gradients()
  assert len(called) == calls
  names = ["y", "x"] + [v.path for v in layer.trainable_weights] + ["bias"]
  for name, g, w in zip(names, got, want):
    np.testing.assert_allclose(g, w, atol=2e-5, rtol=1e-4, err_msg=name)
  # The padding-only example: gradients reach the values only.
  assert np.abs(want[-1]).max() > 0 and np.all(got[1][3] != 0)
  assert not np.array_equal(got[0][3], got[0][3][:1].repeat(6, axis=0))  # dropped out
  del keras
