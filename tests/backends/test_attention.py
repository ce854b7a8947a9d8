"""SelfAttention's fused form (jax.nn.dot_product_attention, PyTorch's
scaled_dot_product_attention) against its written-out form and numpy: outputs and the
gradients on the inputs, the weights and the relative bias, with padding, an example of
padding only and mixed lengths in one batch; with attention dropout on, the kept fraction
against the binomial law."""

import keras
import numpy as np
import pytest

from recurrent_bert.layers import SelfAttention
from recurrent_bert.layers import attention as attention_lib
from tests.backends.support import BACKEND
from tests.backends.support import outputs_and_gradients
from tests.backends.support import to_numpy
from tests.support import references as ref

HIDDEN, HEADS = 16, 2  # head size 8: a size cuDNN takes, where there is one
# Full, 4 real, 1 real, none: every row of the last example is padding only.
MASK = np.array([[1] * 6, [1] * 4 + [0] * 2, [1] + [0] * 5, [0] * 6], "int32")
F32 = dict(atol=1e-5, rtol=1e-5)


class _WithBias(keras.layers.Layer):
  """SelfAttention whose relative bias is a weight here, so `outputs_and_gradients`
  differentiates it with the attention's weights; its output in float32 (numpy has no
  bfloat16 for PyTorch's tensors)."""

  def __init__(self, bias_batch, rng, **kwargs):
    super().__init__(**kwargs)
    self.attention = SelfAttention(HIDDEN, HEADS, attention_dropout_rate=0.1)
    self.attention.build((None, None, HIDDEN))
    for v in self.attention.trainable_weights:
      v.assign(rng.normal(scale=0.3, size=v.shape).astype("float32"))
    self.bias = None
    if bias_batch:
      value = rng.normal(size=(bias_batch, HEADS, 6, 6)).astype("float32")
      self.bias = self.add_weight(
          shape=value.shape, initializer=keras.initializers.Constant(value), name="bias"
      )
    self.built = True

  def call(self, x, mask):
    return keras.ops.cast(self.attention(x, mask, self.bias, training=False), "float32")


def _both_forms(layer, x, upstream, monkeypatch):
  """(fused, written-out) outputs and gradients, as `outputs_and_gradients` gives them;
  the first through the backend's fused call (it ran and did not decline)."""
  calls = []
  fused_attention = attention_lib._fused_attention

  def spy(*args, **kwargs):
    context = fused_attention(*args, **kwargs)
    calls.append(context is not None)
    return context

  monkeypatch.setattr(attention_lib, "_fused_attention", spy)
  fused = outputs_and_gradients(layer, x, upstream, MASK)
  assert calls and all(calls)
  with attention_lib.written_out_attention():
    written_out = outputs_and_gradients(layer, x, upstream, MASK)
  assert len(calls) == 1
  return fused, written_out


@pytest.mark.parametrize("one_matmul", [False, True])  # q, k, v projected as on a GPU
@pytest.mark.parametrize("bias_batch", [0, 1, 4])  # none, shared [1, A, T, T], per example
def test_fused_equals_written_out_in_float32(rng, monkeypatch, bias_batch, one_matmul):
  """The loss reads every position, the all-padding example's too, so its rule (uniform
  weights, gradients to the values only) is checked in the backward pass as well. With
  `one_matmul` the fused form projects q, k and v in one matmul, as it does on a GPU; the
  written-out form keeps the three layers."""
  monkeypatch.setattr(attention_lib, "_on_a_gpu", lambda x: one_matmul)
  layer = _WithBias(bias_batch, rng)
  x = rng.normal(size=(4, 6, HIDDEN)).astype("float32")
  upstream = rng.normal(size=x.shape)
  (got, grads), (want, want_grads) = _both_forms(layer, x, upstream, monkeypatch)
  np.testing.assert_allclose(got, want, **F32)
  names = ["x"] + [v.path for v in layer.trainable_weights]
  assert len(grads) == len(names) == 9 + bool(bias_batch)
  for name, g, w in zip(names, grads, want_grads):
    np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-4, err_msg=name)


def test_fused_equals_numpy_with_an_example_of_padding_only(rng):
  """Against the float64 numpy reference; the padding-only example against the mean of its
  values through the output layer (uniform weights: zero query and key weights)."""
  layer = _WithBias(1, rng)
  attention = layer.attention
  x = rng.normal(size=(4, 6, HIDDEN)).astype("float32")
  got = to_numpy(attention(x, MASK, layer.bias, training=False))
  weights = [
      to_numpy(w).astype(np.float64)
      for w in (attention.query.kernel, attention.query.bias, attention.key.kernel)
      + (attention.key.bias, attention.value.kernel, attention.value.bias)
      + (attention.output_dense.kernel, attention.output_dense.bias)
  ]
  x64, bias = x.astype(np.float64), to_numpy(layer.bias)
  want = ref.self_attention(x64[:3], MASK[:3], *weights, bias=bias)
  np.testing.assert_allclose(got[:3], want, **F32)
  zeros = [np.zeros_like(w) for w in weights[:4]]
  uniform = ref.self_attention(x64[3:], np.ones((1, 6)), *zeros, *weights[4:])
  np.testing.assert_allclose(got[3:], uniform, **F32)


@pytest.mark.parametrize("one_matmul", [False, True])
def test_fused_equals_written_out_in_bfloat16(rng, monkeypatch, one_matmul):
  """Mixed bfloat16: both forms take the softmax in float32; the fused one also keeps the
  logits in float32 (the written-out form rounds them to bfloat16 first), hence the bound."""
  monkeypatch.setattr(attention_lib, "_on_a_gpu", lambda x: one_matmul)
  keras.config.set_dtype_policy("mixed_bfloat16")  # conftest restores float32
  layer = _WithBias(1, rng)
  x = rng.normal(size=(4, 6, HIDDEN)).astype("float32")
  upstream = rng.normal(size=x.shape)
  (got, grads), (want, want_grads) = _both_forms(layer, x, upstream, monkeypatch)
  assert layer.attention.compute_dtype == "bfloat16"
  _assert_close_in_bfloat16(layer, got, grads, want, want_grads)


def _assert_close_in_bfloat16(layer, got, grads, want, want_grads):
  """Every array within 3% of its largest value (bfloat16 rounds to 2**-9; seen: 1.3%).
  Not the key bias's gradient: it is 0 in exact arithmetic (softmax ignores a constant
  per query), so both forms give rounding noise there."""
  np.testing.assert_allclose(got, want, atol=0.03 * np.abs(want).max(), rtol=0)
  names = ["x"] + [v.path for v in layer.trainable_weights]
  for name, g, w in zip(names, grads, want_grads):
    if not name.endswith("key/bias"):
      np.testing.assert_allclose(g, w, atol=0.03 * np.abs(w).max(), rtol=0, err_msg=name)


def _one_hot_attention(rate, length=64, heads=4):
  """A layer whose output shows each attention-dropout decision: zero query and key
  weights (probabilities 1/T), x[b, t] = e_t and identity value and output weights, so
  y[b, i, a*T + j] = keep(b, a, i, j) / (T (1 - rate))."""
  layer = SelfAttention(heads * length, heads, attention_dropout_rate=rate)
  layer.build((None, None, heads * length))
  eye = np.eye(length, dtype="float32")
  value = np.zeros((heads * length, heads, length), "float32")
  for a in range(heads):
    value[:length, a] = eye
  for v in layer.trainable_weights:
    v.assign(np.zeros(v.shape, "float32"))
  layer.value.kernel.assign(value)
  layer.output_dense.kernel.assign(
      np.eye(heads * length, dtype="float32").reshape(heads, length, -1)
  )
  x = np.zeros((1, length, heads * length), "float32")
  x[0, :, :length] = eye
  return layer, x


def test_attention_dropout_keeps_the_binomial_fraction():
  """JAX: the written-out form with the package's Dropout; PyTorch: the fused kernel's own
  dropout. 2**18 decisions: the kept fraction within 5 binomial standard deviations of
  1 - rate, each kept probability scaled to exactly 1/(T (1 - rate)); training=False (and
  training left out) keeps every probability."""
  rate, length, batch = 0.1, 64, 16
  layer, x = _one_hot_attention(rate, length)
  x = np.repeat(x, batch, axis=0)
  mask = np.ones((batch, length), "int32")
  y = to_numpy(layer(x, mask, training=True))
  kept = y != 0
  n = kept.size
  assert n == 2**18
  sigma = np.sqrt(rate * (1 - rate) / n)
  assert abs(kept.mean() - (1 - rate)) < 5 * sigma, kept.mean()
  np.testing.assert_allclose(y[kept], 1 / (length * (1 - rate)), rtol=1e-6)
  y2 = to_numpy(layer(x, mask, training=True))
  assert 0.1 < np.mean(kept != (y2 != 0))  # a fresh mask per call
  for training in (False, None):
    y = to_numpy(layer(x[:2], mask[:2], training=training))
    np.testing.assert_allclose(y, 1 / length, rtol=1e-6)


@pytest.mark.skipif(BACKEND != "jax", reason="JAX's implementation choice")
def test_cudnn_is_asked_for_only_on_a_cuda_gpu_and_in_16_bits(monkeypatch):
  import jax
  import jax.numpy as jnp

  attention_lib._default_device_is_a_recent_cuda_gpu.cache_clear()
  on_gpu = attention_lib._cuda_flash_attention_available()
  assert not (on_gpu and jax.default_backend() == "cpu")
  choose = attention_lib._jax_implementation
  assert choose(jnp.zeros((2, 6, 2, 8), "bfloat16")) == ("cudnn" if on_gpu else None)
  if not on_gpu:  # float16 through XLA does not compile on a CPU: the written-out form
    q = jnp.zeros((2, 6, 2, 8), "float16")
    real = jnp.ones((2, 6), bool)
    assert attention_lib._jax_attention(q, q, q, real, None, 0.5, 0.0) is None
  monkeypatch.setattr(attention_lib, "_cuda_flash_attention_available", lambda: True)
  assert choose(jnp.zeros((2, 6, 2, 8), "bfloat16")) == "cudnn"
  assert choose(jnp.zeros((2, 6, 2, 128), "float16")) == "cudnn"
  assert choose(jnp.zeros((2, 6, 2, 8), "float32")) is None
  assert choose(jnp.zeros((2, 7, 2, 8), "bfloat16")) is None  # odd length
  assert choose(jnp.zeros((2, 6, 2, 4), "bfloat16")) is None  # head size
  assert choose(jnp.zeros((2, 6, 2, 136), "bfloat16")) is None


@pytest.mark.skipif(
    BACKEND != "jax" or not attention_lib._cuda_flash_attention_available(),
    reason="cuDNN's flash attention: JAX on a CUDA GPU",
)
def test_cudnn_attention_equals_written_out_on_a_gpu(rng, monkeypatch):
  """Where there is a CUDA GPU: mixed bfloat16 takes cuDNN (its custom call is in the
  compiled program) and agrees with the written-out form, gradients included."""
  import jax

  keras.config.set_dtype_policy("mixed_bfloat16")
  layer = _WithBias(1, rng)
  x = rng.normal(size=(4, 6, HIDDEN)).astype("float32")
  values = [
      [v.value for v in vs] for vs in (layer.trainable_weights, layer.non_trainable_variables)
  ]
  program = jax.jit(lambda w, n, x: layer.stateless_call(w, n, x, MASK)[0]).lower(*values, x)
  assert "cudnn" in program.as_text()
  upstream = rng.normal(size=x.shape)
  (got, grads), (want, want_grads) = _both_forms(layer, x, upstream, monkeypatch)
  _assert_close_in_bfloat16(layer, got, grads, want, want_grads)
