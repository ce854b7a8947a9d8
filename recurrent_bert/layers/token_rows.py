"""Per-token maps applied to the tokens as the rows of one matrix.

A matmul of [B, T, H] activations by an [H, N] kernel has two row axes (B and T), and
XLA's GPU layout assignment then chooses its operands' layouts itself: compiled for an
H100, bert_base's step moved activations between layouts around such matmuls (with the
positions' gradient, 135 transposes a step; `benchmarks/gpu/compiled_for_gpu.py`).
Multiplying the [B·T, H] matrix of the tokens instead leaves the layouts as they are, as
google-research/bert's modeling.py keeps its activations. The reshapes are free (the
tokens are contiguous rows) and the products are the same.
"""

from keras import ops


def over_token_rows(fn, x):
  """fn applied to the tokens of x as the rows of one matrix.

  Args:
    fn: a per-row map, [N, H] -> [N, H'] (a Dense layer, or a matmul with a 2-D kernel).
    x: [..., H], e.g. [B, T, H].
  Returns:
    [..., H']: fn's rows in x's leading shape.
  """
  rows = fn(ops.reshape(x, (-1, ops.shape(x)[-1])))
  return ops.reshape(rows, tuple(ops.shape(x)[:-1]) + (ops.shape(rows)[-1],))


def without_bias(dense):
  """`dense`'s matmul alone, a per-row map [N, H] -> [N, H'] in the layer's compute dtype
  (rows and 2-D kernel cast to it, as the layer's call casts them): for a caller that
  adds the bias itself (an encoder block's one-kernel LayerNorm, `TransformerBlock`)."""
  dtype = dense.compute_dtype
  return lambda rows: ops.matmul(ops.cast(rows, dtype), ops.cast(dense.kernel, dtype))
