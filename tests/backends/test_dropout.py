"""The package's Dropout under JAX (a hash of seed and position against an integer
threshold) against a numpy transcription of the hash and the binomial law, eagerly and
jitted through Keras' stateless calls; under PyTorch, Keras' own Dropout unchanged."""

import types

import keras
import numpy as np
import pytest

from recurrent_bert.layers.dropout import Dropout
from tests.backends.support import BACKEND
from tests.backends.support import numpy_keep_bits
from tests.backends.support import to_numpy

N = 2**20  # elements per mask: the 5-sigma band of the kept fraction is about 1.5e-3 wide

on_jax = pytest.mark.skipif(BACKEND != "jax", reason="the JAX draw (other backends: Keras')")


def _x(rng):
  return rng.uniform(1.0, 2.0, size=(1024, N // 1024)).astype("float32")  # never 0


@on_jax
@pytest.mark.parametrize("rate,dtype", [(0.1, "float32"), (0.5, "float32"), (0.1, "bfloat16")])
def test_kept_fraction_is_binomial_and_kept_values_are_scaled_exactly(rng, rate, dtype):
  """Kept: x times float32(1 / (1 - rate)), rounded once to x's dtype (in float32 within
  an ulp of x / (1 - rate), as Keras' JAX Dropout; in bfloat16 unbiased, where Keras'
  multiplies by bfloat16's 1.109 for 1/0.9)."""
  import jax.numpy as jnp

  x = _x(rng)
  y = to_numpy(Dropout(rate, dtype=dtype)(jnp.asarray(x, dtype), training=True))
  assert y.dtype == dtype
  kept = y != 0
  sigma = np.sqrt(rate * (1 - rate) / N)
  assert abs(kept.mean() - (1 - rate)) < 5 * sigma, kept.mean()
  x = x.astype(jnp.dtype(dtype)).astype(np.float32)  # the layer's input
  want = (x[kept] * np.float32(1 / (1 - rate))).astype(jnp.dtype(dtype))
  np.testing.assert_array_equal(y[kept], want)
  if dtype == "float32":
    np.testing.assert_allclose(y[kept], x[kept] / (1 - rate), rtol=2**-23, atol=0)


@on_jax
@pytest.mark.parametrize("rate", [0.1, 0.7])
def test_the_mask_is_the_hash_of_seed_and_position(rate):
  """Two calls: each keeps exactly the elements whose bits (numpy, from the seed the
  generator held before the call) are at or above round(rate * 2**32)."""
  layer = Dropout(rate, seed=11)
  x = np.ones((8, 16, 32), "float32")
  for _ in range(2):
    seed = to_numpy(layer.seed_generator.state.value)
    kept = to_numpy(layer(x, training=True)) != 0
    want = numpy_keep_bits(seed, x.size) >= np.uint32(round(rate * 2**32))
    np.testing.assert_array_equal(kept, want.reshape(x.shape))


@on_jax
def test_neighbours_and_successive_masks_are_uncorrelated(rng):
  """Pearson correlations of the keep indicator with its right and lower neighbour, and
  with the next call's mask, within 5 standard errors (1/sqrt(n)) of 0."""
  layer = Dropout(0.3)
  x = _x(rng)
  first = (to_numpy(layer(x, training=True)) != 0).astype(np.float64)
  second = (to_numpy(layer(x, training=True)) != 0).astype(np.float64)
  pairs = {
      "right": (first[:, :-1], first[:, 1:]),
      "below": (first[:-1], first[1:]),
      "next call": (first, second),
  }
  for name, (a, b) in pairs.items():
    r = np.corrcoef(a.ravel(), b.ravel())[0, 1]
    assert abs(r) < 5 / np.sqrt(a.size), (name, r)
  assert np.mean(first != second) > 0.3  # 2 * 0.3 * 0.7 = 0.42 expected


@on_jax
def test_a_seed_gives_its_mask_and_rate_0_or_inference_is_identity(rng):
  x = _x(rng)[:64]
  a, b = Dropout(0.2, seed=7), Dropout(0.2, seed=7)
  np.testing.assert_array_equal(to_numpy(a(x, training=True)), to_numpy(b(x, training=True)))
  assert not np.array_equal(
      to_numpy(a(x, training=True)), to_numpy(Dropout(0.2, seed=8)(x, training=True))
  )
  for layer, training in ((Dropout(0.0), True), (Dropout(0.2), False), (Dropout(0.2), None)):
    np.testing.assert_array_equal(to_numpy(layer(x, training=training)), x)
  np.testing.assert_array_equal(to_numpy(Dropout(1.0)(x, training=True)), 0)
  y = to_numpy(Dropout(0.5, noise_shape=(None, 1))(x, training=True))
  assert np.all((y != 0) == (y[:, :1] != 0))  # one decision per row


@on_jax
def test_jitted_stateless_calls_advance_the_seed_state():
  """As Keras' JAX trainer and the package's loop call it: `stateless_call` under
  `jax.jit`, the seed-generator state passed in and out. The same state gives the same
  mask (the eager call's too); the returned state gives another."""
  import jax

  layer = Dropout(0.5, seed=3)
  x = np.ones((64, 64), "float32")
  state = [v.value for v in layer.non_trainable_variables]
  step = jax.jit(lambda state, x: layer.stateless_call([], state, x, training=True))
  y1, state1 = step(state, x)
  y1_again, _ = step(state, x)
  y2, _ = step(state1, x)
  np.testing.assert_array_equal(y1, y1_again)
  assert not np.array_equal(y1, y2)
  assert not np.array_equal(to_numpy(state1[0]), to_numpy(state[0]))
  np.testing.assert_array_equal(to_numpy(layer(x, training=True)), y1)  # eager, same state


@on_jax
def test_a_distribution_over_several_devices_takes_keras_draw(monkeypatch):
  """The multi-device programs keep Keras' draw (module doc)."""
  x = np.ones((64, 64), "float32")
  ours, theirs = Dropout(0.3, seed=5), keras.layers.Dropout(0.3, seed=5)
  assert not np.array_equal(to_numpy(ours(x, training=True)), to_numpy(theirs(x, training=True)))
  mesh = types.SimpleNamespace(devices=np.zeros((2,)))
  distribution = types.SimpleNamespace(device_mesh=mesh)
  monkeypatch.setattr(keras.distribution, "distribution", lambda: distribution)
  _assert_keras_masks()


@pytest.mark.skipif(BACKEND == "jax", reason="Keras' own Dropout runs off JAX")
def test_other_backends_run_keras_dropout():
  _assert_keras_masks()


def _assert_keras_masks():
  """Seeded alike, the same masks as keras.layers.Dropout."""
  x = np.ones((64, 64), "float32")
  ours, theirs = Dropout(0.3, seed=5), keras.layers.Dropout(0.3, seed=5)
  for _ in range(2):
    np.testing.assert_array_equal(
        to_numpy(ours(x, training=True)), to_numpy(theirs(x, training=True))
    )
