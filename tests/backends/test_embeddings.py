"""The absolute positions' add under JAX (layers/embeddings.py `_jax_add_positions`): its
value is x + positions and its gradients are the upstream gradient and that gradient
summed over the batch, against float64 numpy; and the sum is a matmul, not a reduction
over the batch axis (which XLA's GPU layouts answer with transposes). JAX session only:
the other backends add the positions as they are."""

import numpy as np
import pytest

from tests.backends.support import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="the custom gradient is JAX's")


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-6), ("bfloat16", 2**-8)])
def test_positions_add_and_its_gradients(dtype, tolerance):
  import jax
  import jax.numpy as jnp

  from recurrent_bert.layers.embeddings import _jax_add_positions

  rng = np.random.default_rng(0)
  # 11 rows: not a multiple of the 8 groups the gradient's matmul sums the rows in.
  x = rng.normal(size=(11, 6, 5))
  positions = rng.normal(size=(6, 5))
  upstream = rng.normal(size=(11, 6, 5)) + 3.0  # sums that cancel little
  x_, positions_, upstream_ = (jnp.asarray(a, dtype) for a in (x, positions, upstream))

  y, vjp = jax.vjp(_jax_add_positions, x_, positions_)
  dx, dpositions = vjp(upstream_)

  assert y.dtype == dtype and dpositions.dtype == dtype
  rounded = lambda a: np.asarray(jnp.asarray(a, dtype).astype(jnp.float32), np.float64)
  np.testing.assert_allclose(np.asarray(y, np.float64), rounded(rounded(x) + rounded(positions)))
  np.testing.assert_array_equal(np.asarray(dx, np.float64), rounded(upstream))
  expected = rounded(upstream).sum(axis=0)  # [T, H], float64
  np.testing.assert_allclose(np.asarray(dpositions, np.float64), expected, rtol=tolerance)


def test_positions_gradient_is_a_matmul_not_a_batch_reduction():
  import jax
  import jax.numpy as jnp

  from recurrent_bert.layers.embeddings import _jax_add_positions

  def gradients(x, positions, upstream):
    return jax.vjp(_jax_add_positions, x, positions)[1](upstream)

  x, positions = jnp.ones((16, 4, 3)), jnp.ones((4, 3))
  text = str(jax.make_jaxpr(gradients)(x, positions, x))
  assert "dot_general" in text
  # The only reduction sums the 8 groups' partial sums: [8, T·H] -> [T·H].
  reductions = [line.strip() for line in text.splitlines() if "reduce_sum" in line]
  assert len(reductions) == 1 and ":f32[12] = reduce_sum[axes=(0,)" in reductions[0], reductions
