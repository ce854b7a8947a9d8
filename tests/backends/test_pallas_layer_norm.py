"""The Pallas kernel of `LN(residual + Drop(branch))` (JAX on a CUDA GPU), checked without one.

The kernels run in Pallas' interpreter (compiled by Triton on a CUDA GPU:
benchmarks/gpu/tests.sh) against the textbook LayerNorm in float64 numpy
(its backward by the formula, not by autodiff), the dropout mask from the hash in numpy's
own uint32 arithmetic: outputs and the gradients of both inputs, γ and β, with rows that
span several blocks and programs and a row of chunks (H = 48: 3 of 16), dropout on and
off, under float32 and bfloat16. The encoder block in training takes the kernel and
equals its layers as written, with the same dropout masks and seeds; and the kernels
lower to Triton for CUDA at bert_base's and bert_large's shapes (no GPU needed).
"""

import numpy as np
import pytest

from tests.backends.support import BACKEND
from tests.backends.support import numpy_keep_bits

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="Pallas kernels are JAX's")

SEED = (77, 2026)
EPSILON = 1e-6


def _on_a_gpu() -> bool:
  import jax

  return jax.devices()[0].platform == "gpu"


INTERPRET = BACKEND == "jax" and not _on_a_gpu()
# Triton's rsqrt on a GPU is its approximate one (about 2 ulp).
FLOAT32_TOLERANCE = 1e-5 if INTERPRET else 1e-4


def _numpy_residual_layer_norm(residual, branch, bias, gamma, beta, rate, dy, dtype):
  """(y, (d residual, d branch, d bias, dγ, dβ)) in float64, s = residual + Drop(branch
  + bias) rounded to `dtype` as the layers round it; dy: y's cotangent."""
  round_to = lambda x: np.asarray(x, np.float64).astype(dtype).astype(np.float64)
  residual, branch = round_to(residual), round_to(round_to(branch) + round_to(bias))
  factor = np.ones_like(branch)
  if rate:
    keep = numpy_keep_bits(SEED, branch.size).reshape(branch.shape) >= round(rate * 2**32)
    factor = keep * np.float64(np.float32(1 / (1 - rate)))
  dropped = round_to(branch * factor)
  s = round_to(residual + dropped)
  mean = s.mean(axis=-1, keepdims=True)
  rstd = 1 / np.sqrt(((s - mean) ** 2).mean(axis=-1, keepdims=True) + EPSILON)
  x_hat = (s - mean) * rstd
  y = x_hat * gamma + beta
  g = dy * gamma
  ds = rstd * (g - g.mean(-1, keepdims=True) - x_hat * (g * x_hat).mean(-1, keepdims=True))
  rows = tuple(range(dy.ndim - 1))
  dbranch = round_to(ds) * factor
  return y, (ds, dbranch, dbranch.sum(rows), (dy * x_hat).sum(rows), dy.sum(rows))


@pytest.mark.parametrize(
    "hidden_size,dtype,rate", [(48, "float32", 0.0), (48, "float32", 0.3), (32, "bfloat16", 0.1)]
)
def test_kernels_and_gradients_against_numpy(rng, hidden_size, dtype, rate):
  import jax
  from jax import numpy as jnp

  from recurrent_bert.layers.kernels import pallas_layer_norm

  shape = (3, 4, hidden_size)  # 12 rows: blocks of 2 (two pass through their program
  tiling = pallas_layer_norm.Tiling(rows=2, programs=3)  # 's loop), 3 programs
  residual, branch, dy = (rng.normal(size=shape) for _ in range(3))
  bias, gamma, beta = (rng.normal(size=hidden_size) for _ in range(3))
  want_y, want_grads = _numpy_residual_layer_norm(
      residual, branch, bias, gamma, beta, rate, dy, jnp.dtype(dtype)
  )

  def loss(residual, branch, bias, gamma, beta):
    seed = jnp.array(SEED, jnp.uint32)
    y = pallas_layer_norm.residual_layer_norm(
        residual, branch, bias, gamma, beta, EPSILON, rate, seed, INTERPRET, tiling
    )
    return (y.astype(jnp.float32) * dy).sum(), y

  inputs = [jnp.asarray(t, dtype) for t in (residual, branch, bias)] + [gamma, beta]
  (_, y), grads = jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4), has_aux=True)(*inputs)
  assert y.dtype == jnp.dtype(dtype)
  sixteen_bit = dtype == "bfloat16"
  rtol = atol = 2e-2 if sixteen_bit else FLOAT32_TOLERANCE
  np.testing.assert_allclose(np.asarray(y, np.float64), want_y, rtol=rtol, atol=atol)
  for name, got, want in zip(("residual", "branch", "bias", "gamma", "beta"), grads, want_grads):
    # A 16-bit ds is rounded once more than the float64 reference's (an ulp: 2**-8).
    scale = np.abs(want).max()
    np.testing.assert_allclose(
        np.asarray(got, np.float64), want, rtol=rtol, atol=atol * scale, err_msg=name
    )
  if rate:
    dropped = np.asarray(grads[1], np.float64) == 0
    assert 0 < dropped.mean() < 1 and np.all(np.asarray(grads[0])[dropped] != 0)


def test_two_copies_add_their_gradients_in_the_kernel(rng):
  """copies=2: y twice, and the gradients are numpy's for the sum of the two cotangents."""
  import jax
  from jax import numpy as jnp

  from recurrent_bert.layers.kernels import pallas_layer_norm

  residual, branch, dy_a, dy_b = (rng.normal(size=(4, 2, 48)) for _ in range(4))
  bias, gamma, beta = (rng.normal(size=48) for _ in range(3))
  _, want = _numpy_residual_layer_norm(
      residual, branch, bias, gamma, beta, 0.3, dy_a + dy_b, np.float32
  )

  def loss(*inputs):
    seed = jnp.array(SEED, jnp.uint32)
    y_a, y_b = pallas_layer_norm.residual_layer_norm(
        *inputs, EPSILON, 0.3, seed, interpret=INTERPRET, copies=2
    )
    return (y_a * dy_a).sum() + (y_b * dy_b).sum(), (y_a, y_b)

  inputs = [jnp.asarray(t, jnp.float32) for t in (residual, branch, bias, gamma, beta)]
  got, (y_a, y_b) = jax.grad(loss, argnums=(0, 1, 2, 3, 4), has_aux=True)(*inputs)
  np.testing.assert_array_equal(y_a, y_b)
  for name, g, w in zip(("residual", "branch", "bias", "gamma", "beta"), got, want):
    tolerance = FLOAT32_TOLERANCE
    np.testing.assert_allclose(np.asarray(g), w, rtol=tolerance, atol=tolerance, err_msg=name)


def test_inference_and_float32_rows_of_one_chunk(rng):
  """No dropout, seed or bias, H = 32 (one chunk), 7 rows (blocks of 1): against numpy."""
  from jax import numpy as jnp

  from recurrent_bert.layers.kernels import pallas_layer_norm

  residual, branch = rng.normal(size=(7, 32)), rng.normal(size=(7, 32))
  gamma, beta = rng.normal(size=32), rng.normal(size=32)
  y = pallas_layer_norm.residual_layer_norm(
      jnp.asarray(residual, jnp.float32),
      jnp.asarray(branch, jnp.float32),
      None,
      gamma,
      beta,
      EPSILON,
      interpret=INTERPRET,
  )
  want, _ = _numpy_residual_layer_norm(
      residual, branch, np.zeros(32), gamma, beta, 0.0, np.zeros((7, 32)), np.float32
  )
  np.testing.assert_allclose(np.asarray(y), want, rtol=FLOAT32_TOLERANCE, atol=FLOAT32_TOLERANCE)


@pytest.mark.parametrize(
    "mixer,use_attention,dtype,copies",
    [
        ("ffn", True, "float32", 1),
        ("parallel_blstm", True, "float32", 1),
        ("swishrnn", True, "float32", 1),
        ("blstm", False, "float32", 1),
        ("ffn", True, "mixed_bfloat16", 1),
        ("parallel_blstm", True, "float32", 3),
        ("blstm", False, "float32", 2),
    ],
)
def test_the_block_in_training_equals_its_layers_as_written(
    rng, monkeypatch, mixer, use_attention, dtype, copies
):
  """TransformerBlock (H = 48, 2 heads, dropout 0.1 everywhere) in training under Pallas'
  interpreter, against the same block with the kernel switched off: outputs, the
  gradients of x and of every weight, and the seed generators' states after the step.
  Every kind of branch leaves its output bias to the kernel. parallel_blstm has two
  branches: the kernel takes the last, its residual the rest; the BLSTM-only block has
  no attention sublayer (one kernel). Under mixed bfloat16 (a GPU's policy) the two
  round differently in places: to bfloat16's precision. `copies` > 1: as an encoder's
  inner block, with a residual input of its own (and with 3, TRANS-BLSTM-2's, a third
  input for the BLSTM) and that many output copies, each with its own upstream gradient
  (the kernel adds them): the gradients of those inputs too."""
  import jax
  import keras

  from recurrent_bert.layers import transformer_block
  from recurrent_bert.layers.kernels import pallas_layer_norm
  from recurrent_bert.layers.kernels import pallas_support

  keras.config.set_dtype_policy(dtype)  # conftest restores float32
  monkeypatch.setenv(pallas_support.INTERPRET_ENV, "1")
  calls = []
  original = pallas_layer_norm.residual_layer_norm
  spy = lambda *a, **k: calls.append(1) or original(*a, **k)
  monkeypatch.setattr(pallas_layer_norm, "residual_layer_norm", spy)
  block = transformer_block.TransformerBlock(
      48,
      2,
      64,
      mixer=mixer,
      use_attention=use_attention,
      blstm_units=8,
      blstm_implementation="portable",
      swish_rnn_size=16,
      swish_rnn_implementation="portable",
  )
  block.build((None, None, 48))
  for v in block.trainable_weights:
    v.assign(rng.normal(scale=0.3, size=v.shape).astype("float32"))
  x, residual, block_input = (
      rng.normal(size=(2, 5, 48)).astype(block.compute_dtype) for _ in range(3)
  )
  mask = np.array([[1] * 5, [1] * 3 + [0] * 2], "int32")
  upstream = [rng.normal(size=x.shape).astype("float32") for _ in range(copies)]
  seeds = [v.value for v in block.non_trainable_variables]
  assert block.input_copies == (3 if mixer == "parallel_blstm" else 2)

  def outputs_and_gradients():
    def loss(x, residual, block_input, weights):
      inputs = dict(residual=residual, output_copies=copies) if copies > 1 else {}
      if copies > 2:
        inputs["block_input"] = block_input
      y, states = block.stateless_call(weights, seeds, x, mask, training=True, **inputs)
      ys = y if copies > 1 else (y,)
      assert len(ys) == copies
      total = sum((c.astype("float32") * u).sum() for c, u in zip(ys, upstream))
      return total, (ys[0], states)

    grad = jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True)
    weights = [v.value for v in block.trainable_weights]
    (_, (y, states)), (*dinputs, dweights) = grad(x, residual, block_input, weights)
    return [np.asarray(t, np.float64) for t in (y, *dinputs, *dweights, *states)]

  got = outputs_and_gradients()
  assert len(calls) == 1 + use_attention
  with monkeypatch.context() as switched_off:
    switched_off.setattr(transformer_block.TransformerBlock, "_one_kernel_takes", lambda *a: False)
    want = outputs_and_gradients()
  assert len(calls) == 1 + use_attention
  names = ["y", "x", "residual", "block_input"] + [v.path for v in block.trainable_weights]
  names += [v.path for v in block.non_trainable_variables]
  assert len(got) == len(want) == len(names)
  sixteen_bit = dtype != "float32"
  for name, g, w in zip(names, got, want):
    if sixteen_bit and name.endswith("key/bias"):
      continue  # 0 in exact arithmetic (softmax ignores a constant per query): noise here
    atol = 3e-2 * np.abs(w).max() if sixteen_bit else 2e-5
    np.testing.assert_allclose(g, w, atol=atol, rtol=3e-2 if sixteen_bit else 1e-4, err_msg=name)
  # The residual sums start from the residual input where there is one, and only then;
  # the BLSTM reads the third input where there is one.
  dx, dresidual, dblock_input = want[1:4]
  assert (np.abs(dresidual).max() > 0.1 * np.abs(dx).max()) == (copies > 1)
  assert (np.abs(dblock_input).max() > 0.1 * np.abs(dx).max()) == (copies > 2)


@pytest.mark.parametrize("shape", [(64, 128, 768), (8, 128, 1024)])
def test_the_kernels_lower_to_triton_for_cuda(shape):
  """bert_base's (3 chunks of 256 a row) and bert_large's (4) LayerNorms, bfloat16,
  dropout 0.1: both kernels become Triton calls for CUDA."""
  from recurrent_bert.layers.kernels import pallas_layer_norm

  text = pallas_layer_norm.triton_module_text(shape)
  assert "layer_norm_forward" in text and "layer_norm_backward" in text


def test_a_branch_of_another_dtype_runs_as_written_with_its_bias(rng, monkeypatch):
  """A float32 branch beside a bfloat16 residual (which the written-out sum promotes) is
  not rounded into the kernel: the block adds back the bias the branch left out and runs
  its layers as written."""
  from jax import numpy as jnp
  import keras

  from recurrent_bert.layers import transformer_block
  from recurrent_bert.layers.kernels import pallas_layer_norm
  from recurrent_bert.layers.kernels import pallas_support

  monkeypatch.setenv(pallas_support.INTERPRET_ENV, "1")
  monkeypatch.setattr(pallas_layer_norm, "residual_layer_norm", None)  # must not be called
  block = transformer_block.TransformerBlock(32, 2, 64, dtype="mixed_bfloat16")
  block.build((None, None, 32))
  block.attention.output_dense.bias.assign(rng.normal(size=32).astype("float32"))
  residual = jnp.asarray(rng.normal(size=(2, 3, 32)), jnp.bfloat16)
  branch = jnp.asarray(rng.normal(size=(2, 3, 32)), jnp.float32)
  layer_norm = block.attention_layer_norm
  got = block._residual_norm(residual, branch, block.attention, layer_norm, True, False)
  bias = keras.ops.convert_to_numpy(block.attention.output_dense.bias)
  want = layer_norm(residual + (branch + bias))
  np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))
