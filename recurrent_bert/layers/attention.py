"""Multi-head scaled dot-product self-attention with a padding mask (SPEC §2).

The attention itself runs in one of two forms of the same function:

  written-out  the logits einsum, the relative bias, padded keys set to float32's minimum,
               softmax in float32, dropout on the probabilities, the context einsum, in
               `keras.ops`: TensorFlow always (its numerics are the ones the references
               check), and any backend when the fused form declines or is switched off.
  fused        one call per backend (`_FUSED`, chosen once, when the module loads):
               JAX `jax.nn.dot_product_attention`, cuDNN's flash attention on a CUDA GPU
               where it takes the inputs (`_jax_implementation`), XLA elsewhere. JAX's
               public fused attention has no dropout: with attention dropout active
               (training and a rate above 0) JAX takes the package's Pallas kernels
               (`kernels/pallas_attention.py`, dropout drawn inside them from the layer's
               seed generator) where they run (16-bit inputs on a CUDA GPU, or Pallas'
               interpreter; one device; head size 16 to 128), else the written-out form.
               PyTorch `torch.nn.functional.scaled_dot_product_attention`, dropout
               included: its masks then come from torch's own generator, not the layer's
               Keras seed generator (as Keras' unseeded Dropout on torch does too).

Where the fused form is asked for on a GPU (JAX and PyTorch), the query, key and value
projections are one matmul over the three layers' kernels side by side
(`_projections_in_one_matmul`: fewer, larger kernels), and both it and the output
projection multiply the tokens as the rows of one matrix by a 2-D kernel (`token_rows`:
no layout transposes around them). Elsewhere, and in the written-out form, the layers'
own EinsumDense calls, so TensorFlow's numerics do not change.

Both forms compute the softmax in float32 under mixed precision: JAX's XLA form computes
the logits of 16-bit q and k in float32 and takes their softmax there (then rounds the
probabilities to q's dtype, as the written-out form does); cuDNN and PyTorch's kernels
accumulate and normalise in float32.

A row whose keys are all padding (an example of padding only) attends to all its keys
with equal weight: the written-out form sets all its logits to the same minimum, so its
softmax is uniform, and its gradients reach the values only. The Pallas kernels compute
that rule themselves (their logits are zeroed across such an example, dropout included).
The other fused forms agree by another way: the kernel sees such a row unmasked (so no
kernel meets a row with nothing to attend to), and its output is replaced by the mean of
the row's values, which is what uniform weights give; such a row gets no attention
dropout there.

On a GPU under JAX with attention dropout, the QKV matmul's product goes to the Pallas
kernels as it is, [B, T, 3, A, d] with the three biases beside it: they read q, k and v
from it in place and add the biases as they read (no pass that splits it).

`SelfAttention(fused=False)`, or any call (or trace) inside `written_out_attention()`,
takes the written-out form: the reference for tests and benchmarks. The switch is no part
of the layer's config, so saved configs are the same either way.
"""

import contextlib
import functools
from typing import Callable, Dict, Optional

import keras
from keras import ops
import numpy as np

from recurrent_bert.layers.dropout import Dropout
from recurrent_bert.layers.dropout import on_one_device
from recurrent_bert.layers.token_rows import over_token_rows

_FLOAT32_MIN = float(np.finfo(np.float32).min)
# PyTorch's padded keys: added to their logits, whose exp then underflows to 0 beside any
# real key's.
_TORCH_MASK_VALUE = -1e30

_written_out_scopes = 0  # how many `written_out_attention()` blocks are open


@contextlib.contextmanager
def written_out_attention():
  """Every SelfAttention called (or traced, under `jax.jit`) inside takes the written-out
  form, whatever its `fused`: the reference for whole models in tests and benchmarks."""
  global _written_out_scopes
  _written_out_scopes += 1
  try:
    yield
  finally:
    _written_out_scopes -= 1


def _cuda_flash_attention_available() -> bool:
  """Whether the layers build for a CUDA GPU of compute capability 8.0 or above: JAX's
  default device, or the platform `kernels.jax_target` names."""
  from recurrent_bert.layers import kernels  # pylint: disable=g-import-not-at-top

  if kernels.jax_target_set():
    return kernels.jax_platform() == "gpu"
  return _default_device_is_a_recent_cuda_gpu()


@functools.cache
def _default_device_is_a_recent_cuda_gpu() -> bool:
  import jax  # pylint: disable=g-import-not-at-top
  import jax.extend.backend  # pylint: disable=g-import-not-at-top

  if jax.default_backend() != "gpu":
    return False
  if "cuda" not in jax.extend.backend.get_backend().platform_version.lower():
    return False
  major = int(str(getattr(jax.devices()[0], "compute_capability", "0")).split(".")[0])
  return major >= 8


def _on_a_gpu(x) -> bool:
  """Whether the layer builds for a GPU (JAX: its target platform; PyTorch: x's device),
  where the projections go as one matmul. On CPUs three measured faster: forward and
  backward at base size, 8 x 128 tokens on 2 cores, JAX 5.9 ms against 17.2 ms."""
  if keras.backend.backend() == "jax":
    from recurrent_bert.layers import kernels  # pylint: disable=g-import-not-at-top

    return kernels.jax_platform() == "gpu"
  return keras.backend.backend() == "torch" and x.is_cuda


def _jax_implementation(q) -> Optional[str]:
  """Returns "cudnn" where cuDNN's flash attention takes these inputs, else None (XLA).

  `implementation=None` is XLA's form on every device in this JAX (jax 0.10.2), so cuDNN
  is asked for by name, and only where it accepts the call: a CUDA GPU, 16-bit q/k/v
  (bfloat16 under mixed precision; it takes no float32), a head size that is a multiple
  of 8 up to 128, and an even length (the mask goes in as a bias, whose gradient cuDNN
  computes only for even lengths).

  Args:
    q: [B, T, A, d] queries.
  """
  _, length, _, head_size = q.shape
  fits = q.dtype in ("bfloat16", "float16") and head_size % 8 == 0 and head_size <= 128
  return "cudnn" if fits and length % 2 == 0 and _cuda_flash_attention_available() else None


def _jax_attention(q, k, v, key_is_real, bias, scale, dropout_rate):
  """JAX's fused attention, or None when attention dropout is active (it has none), and
  for float16 off cuDNN (XLA's form asks for float16 dots accumulated in float32, which
  XLA:CPU does not compile).

  Args:
    q, k, v: [B, T, A, d] queries, keys and values, one dtype.
    key_is_real: [B, T] bool, False for padded keys; every row has a True.
    bias: None or [1 or B, A, T, T] float, added to the logits.
    scale: the logits' factor, 1/sqrt(d).
    dropout_rate: the attention-probability dropout rate, 0 when inactive.
  Returns:
    [B, T, A, d] context in q's dtype, or None.
  """
  implementation = _jax_implementation(q)
  if dropout_rate > 0 or (q.dtype == "float16" and implementation is None):
    return None
  import jax  # pylint: disable=g-import-not-at-top

  if bias is not None:
    bias = bias.astype(q.dtype)  # as the written-out form adds it
  return jax.nn.dot_product_attention(
      q,
      k,
      v,
      bias=bias,
      mask=key_is_real[:, None, None, :],
      scale=scale,
      implementation=implementation,
  )


_QKV = ("query", "key", "value")


def _pallas_kernels():
  """The Pallas attention kernels' module (imported where JAX runs them)."""
  from recurrent_bert.layers.kernels import pallas_attention as module  # pylint: disable=g-import-not-at-top

  return module


def _pallas_dropout_attention_runs(length: int, head_size: int, dtype) -> bool:
  """Whether the Pallas attention kernels take heads of `head_size` over `length`
  positions in `dtype` here (module doc)."""
  from recurrent_bert.layers import kernels  # pylint: disable=g-import-not-at-top

  return (
      kernels.pallas_takes(dtype) and _pallas_kernels().fits(head_size, length) and on_one_device()
  )


def _torch_attention(q, k, v, key_is_real, bias, scale, dropout_rate):
  """PyTorch's fused attention, its dropout drawn from torch's generator.

  Args: as `_jax_attention`'s. Returns: [B, T, A, d] context in q's dtype.
  """
  import torch  # pylint: disable=g-import-not-at-top

  # An additive mask, so that it and the bias go in as one tensor. -1e30, or half the
  # range in float16: a negative bias added to it, or a kernel's product with log2(e),
  # stays finite.
  pad_value = max(_TORCH_MASK_VALUE, torch.finfo(q.dtype).min / 2)
  mask = torch.where(key_is_real, 0.0, pad_value).to(q.dtype)[:, None, None, :]
  if bias is not None:
    mask = bias.to(q.dtype) + mask  # [B, A, T, T]
  heads_first = lambda t: t.transpose(1, 2)  # [B, T, A, d] <-> [B, A, T, d]
  context = torch.nn.functional.scaled_dot_product_attention(
      heads_first(q),
      heads_first(k),
      heads_first(v),
      attn_mask=mask,
      dropout_p=dropout_rate,
      scale=scale,
  )
  return heads_first(context)


# The fused form of each backend that has one; a call returns None where it declines.
_FUSED: Dict[str, Callable] = {"jax": _jax_attention, "torch": _torch_attention}
_fused_attention: Optional[Callable] = _FUSED.get(keras.backend.backend())


@keras.saving.register_keras_serializable(package="recurrent_bert")
class SelfAttention(keras.layers.Layer):
  """Multi-head self-attention; the residual add and LayerNorm live in the block.

  Args:
    fused: whether to take the backend's fused attention where it has one (module doc);
      False always takes the written-out form. Not saved in the config.

  Inputs:
    x: [B, T, H].
    attention_mask: [B, T], 1 for real tokens and 0 for padding (keys masked out).
    attention_bias: optional [1 or B, A, T, T] added to the logits (relative bias).
  Output: [B, T, H].
  """

  def __init__(
      self,
      hidden_size,
      num_heads,
      attention_dropout_rate=0.1,
      initializer_range=0.02,
      fused=True,
      **kwargs,
  ):
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self.num_heads = num_heads
    self.head_size = hidden_size // num_heads
    self.attention_dropout_rate = attention_dropout_rate
    self.initializer_range = initializer_range
    self.fused = fused
    init = keras.initializers.TruncatedNormal(stddev=initializer_range)
    dense = lambda name: keras.layers.EinsumDense(
        "btd,dnh->btnh",
        output_shape=(None, num_heads, self.head_size),
        bias_axes="nh",
        kernel_initializer=init,
        name=name,
    )
    self.query = dense("query")
    self.key = dense("key")
    self.value = dense("value")
    self.output_dense = keras.layers.EinsumDense(
        "btnh,nhd->btd",
        output_shape=(None, hidden_size),
        bias_axes="d",
        kernel_initializer=init,
        name="output",
    )
    self.dropout = Dropout(attention_dropout_rate)

  def build(self, input_shape):
    for layer in (self.query, self.key, self.value):
      layer.build((None, None, self.hidden_size))
    self.output_dense.build((None, None, self.num_heads, self.head_size))
    self.built = True

  def call(self, x, attention_mask, attention_bias=None, training=None, output_bias=True):
    """x [B, T, H]; attention_mask [B, T] (1 real, 0 padding); attention_bias None or
    [1 or B, A, T, T]. Returns [B, T, H]; with `output_bias=False`, without the output
    projection's bias (`output_dense.bias`, for a caller that adds it itself)."""
    fused = self.fused and _fused_attention is not None and not _written_out_scopes
    as_matrices = fused and _on_a_gpu(x)
    rate = self.attention_dropout_rate if training else 0.0
    if as_matrices:
      products, bias = self._projections_in_one_matmul(x)
      if self._pallas_takes(products.shape[1], products.shape[-1], products.dtype, rate):
        context = _pallas_kernels().attention_of_projections(
            products,
            bias,
            self._key_is_real(attention_mask),
            attention_bias,
            self._scale,
            rate,
            self.dropout.seed_generator.next(),
        )
        return self._output_projection(context, output_bias)
      slots = _pallas_kernels().SLOTS
      q, k, v = (products[:, :, slots.index(n)] + bias[slots.index(n)] for n in _QKV)
    else:
      q, k, v = self.query(x), self.key(x), self.value(x)  # [B, T, A, d] each
    context = self._fused(q, k, v, attention_mask, attention_bias, rate) if fused else None
    if context is None:
      context = self._written_out(q, k, v, attention_mask, attention_bias, training)
    if as_matrices or not output_bias:
      return self._output_projection(context, output_bias)
    return self.output_dense(context)

  @property
  def _scale(self) -> float:
    return 1.0 / self.head_size**0.5

  @staticmethod
  def _key_is_real(attention_mask):
    """[B, T] bool from the [B, T] 1/0 mask."""
    return ops.cast(attention_mask, "float32") >= 0.5

  def _pallas_takes(self, length, head_size, dtype, rate) -> bool:
    """Whether the Pallas kernels compute this call's attention (module doc)."""
    return (
        0 < rate < 1
        and keras.backend.backend() == "jax"
        and _pallas_dropout_attention_runs(length, head_size, dtype)
    )

  def _projections_in_one_matmul(self, x):
    """The products of x [B, T, H] with the query, key and value kernels, as one matmul of
    its tokens [B·T, H] with the three kernels side by side, [H, 3·A·d]: the same
    variables, one GEMM for the three (and one for their input gradient). The product
    comes out [B, T, 3, A, d], the GEMM's own layout, so slicing it costs no transpose.
    Returns: ([B, T, 3, A, d] products, [3, A, d] biases) in the Pallas kernels' order
    of slots (`pallas_attention.SLOTS`: the key's, the value's, the query's), so that
    they take the product as it is; k = products[:, :, 0] + biases[0], and so on."""
    projections = [getattr(self, name) for name in _pallas_kernels().SLOTS]
    dtype = self.compute_dtype
    kernel = ops.stack([ops.cast(p.kernel, dtype) for p in projections], axis=1)
    kernel = ops.reshape(kernel, (self.hidden_size, -1))  # [H, 3·A·d]
    bias = ops.stack([ops.cast(p.bias, dtype) for p in projections], axis=0)  # [3, A, d]
    qkv = over_token_rows(lambda rows: ops.matmul(rows, kernel), x)  # [B, T, 3·A·d]
    batch, length, _ = ops.shape(x)
    return ops.reshape(qkv, (batch, length, 3, self.num_heads, self.head_size)), bias

  def _output_projection(self, context, with_bias=True):
    """`output_dense(context)` as one matmul of the tokens [B·T, A·d] with its kernel
    [A·d, H] (module doc), its bias added `with_bias`. context: [B, T, A, d]. Returns:
    [B, T, H]."""
    dense = self.output_dense
    batch, length, heads, head_size = ops.shape(context)
    kernel = ops.reshape(ops.cast(dense.kernel, context.dtype), (heads * head_size, -1))
    bias = ops.cast(dense.bias, context.dtype)
    context = ops.reshape(context, (batch, length, heads * head_size))

    def project(rows):
      product = ops.matmul(rows, kernel)
      return product + bias if with_bias else product

    return over_token_rows(project, context)

  def _fused(self, q, k, v, attention_mask, attention_bias, rate):
    """The backend's fused attention (module doc), or None where it declines. q, k, v:
    [B, T, A, d]; the mask and bias as `call` takes them; rate: the attention dropout
    rate, 0 outside training. Returns: [B, T, A, d] context."""
    key_is_real = self._key_is_real(attention_mask)  # [B, T]
    _, length, _, head_size = q.shape
    if self._pallas_takes(length, head_size, q.dtype, rate):
      seed = self.dropout.seed_generator.next()
      return _pallas_kernels().attention(
          q, k, v, key_is_real, attention_bias, self._scale, rate, seed
      )
    has_real_key = ops.any(key_is_real, axis=1, keepdims=True)  # [B, 1]
    attended = ops.logical_or(key_is_real, ops.logical_not(has_real_key))
    context = _fused_attention(q, k, v, attended, attention_bias, self._scale, dropout_rate=rate)
    if context is None:
      return None
    # The written-out form's uniform weights where a row has no real key (module doc).
    uniform = ops.cast(ops.mean(v, axis=1, keepdims=True), context.dtype)  # [B, 1, A, d]
    return ops.where(has_real_key[:, :, None, None], context, uniform)

  def _written_out(self, q, k, v, attention_mask, attention_bias, training):
    """The attention in `keras.ops` (module doc). q, k, v: [B, T, A, d]; the mask and
    bias as `call` takes them. Returns: [B, T, A, d] context."""
    q = q * ops.cast(1.0 / self.head_size**0.5, q.dtype)
    logits = ops.einsum("bqnh,bknh->bnqk", q, k)  # [B, A, T, T]
    if attention_bias is not None:
      logits = logits + ops.cast(attention_bias, logits.dtype)
    # Softmax in float32: float16 logits overflow, and the dtype's own minimum (not a
    # literal like -1e9) stands for -inf on padded keys.
    logits = ops.cast(logits, "float32")
    key_is_pad = ops.cast(attention_mask, "float32")[:, None, None, :] < 0.5
    logits = ops.where(key_is_pad, _FLOAT32_MIN, logits)
    probs = ops.cast(ops.softmax(logits, axis=-1), q.dtype)
    probs = self.dropout(probs, training=training)
    return ops.einsum("bnqk,bknh->bqnh", probs, v)  # [B, T, A, d]

  def get_config(self):
    return {
        **super().get_config(),
        "hidden_size": self.hidden_size,
        "num_heads": self.num_heads,
        "attention_dropout_rate": self.attention_dropout_rate,
        "initializer_range": self.initializer_range,
    }
