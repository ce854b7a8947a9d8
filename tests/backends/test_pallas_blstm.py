"""The BLSTM's Pallas kernels ("pallas", JAX), checked without a GPU.

On a CPU the kernels run in Pallas' interpreter: the BLSTM and its gradients equal the
portable scan's over padded rows, at sizes that pad rows and units, with a step count
that leaves a remainder after the unrolled loop; and the kernels lower to Triton for CUDA
at the base presets' shapes. On a GPU the same tests run the
compiled kernels.
"""

import numpy as np
import pytest

from recurrent_bert.errors import InputError
from recurrent_bert.layers import BidirectionalLSTM
from recurrent_bert.layers import kernels
from tests.backends.support import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="Pallas is JAX's")


def _on_a_gpu() -> bool:
  import jax

  return jax.devices()[0].platform == "gpu"


@pytest.mark.parametrize(
    "length,batch,depth,units,tiling",
    [
        (5, 3, 6, 8, None),  # one program: rows and units padded to 16
        (7, 20, 12, 40, dict(block_u=16, block_b=16, block_k=16, steps_per_iteration=3)),
    ],
)
@pytest.mark.parametrize("stacks", ["empty", "nan"])
def test_the_blstm_and_its_gradients_equal_the_portable_scan(
    rng, monkeypatch, length, batch, depth, units, tiling, stacks
):
  """`bidirectional_lstm` on the kernels against the portable scan's (the reference they
  replace, itself held to the numpy loop in test_layers.py, where the "pallas" layer meets
  that loop too): the output and the gradients of x and of both directions' three weights,
  over rows of every length from 0 to T (the portable scan reverses each row within its
  real prefix; the kernels walk the backward direction over padding held at 0).

  The kernels' stacks start as `jax.lax.empty` (zeros off a GPU, whatever memory held
  on one), or filled with NaN: a read of any element before a launch wrote it would show
  as NaN here."""
  import jax
  import jax.numpy as jnp

  from recurrent_bert.layers.kernels import pallas_blstm
  from recurrent_bert.layers.kernels import portable_blstm

  if stacks == "nan":
    nan = lambda stack: jnp.full(stack.shape, jnp.nan, stack.dtype)
    monkeypatch.setattr(pallas_blstm, "uninitialized", nan)

  lengths = (length - np.arange(batch)) % (length + 1)
  x = rng.normal(size=(batch, length, depth)).astype(np.float32)
  shapes = [(depth, 4 * units), (units, 4 * units), (4 * units,)] * 2
  weights = [rng.normal(scale=0.3, size=shape).astype(np.float32) for shape in shapes]
  upstream = rng.normal(size=(batch, length, 2 * units)).astype(np.float32)
  tiling = pallas_blstm.Tiling(**tiling) if tiling else None

  def portable(x, *w):
    return portable_blstm.bidirectional_lstm(x, lengths, w[:3], w[3:])

  def pallas(x, *w):
    interpret = not _on_a_gpu()
    return pallas_blstm.bidirectional_lstm(
        x, lengths, w[:3], w[3:], interpret=interpret, tiling=tiling
    )

  with jax.default_matmul_precision("highest"):
    results = {}
    for name, run in (("portable", portable), ("pallas", pallas)):
      loss = lambda *a, run=run: (run(*a) * upstream).sum()
      results[name] = [run(x, *weights)]
      results[name] += jax.grad(loss, argnums=tuple(range(7)))(x, *weights)
  names = ["h", "d x"] + [f"d {d} {w}" for d in ("forward", "backward") for w in "WRb"]
  for what, want, got in zip(names, results["portable"], results["pallas"]):
    np.testing.assert_allclose(
        np.asarray(got), np.asarray(want), atol=1e-5, rtol=1e-5, err_msg=what
    )


@pytest.mark.parametrize("units", [768, 384])  # trans_blstm_2_base, the SMALL one
def test_the_kernels_lower_to_triton_for_cuda(units):
  """Batch 64 x 128 steps in bfloat16: a forward and a backward kernel, each one Triton
  call per step in the unrolled loop's body (128 steps leave no remainder)."""
  from recurrent_bert.layers.kernels import pallas_blstm

  text = pallas_blstm.triton_module_text(64, 128, units)
  assert text.count("__gpu$xla.gpu.triton") == 2 * pallas_blstm.TILING.steps_per_iteration
  assert "blstm_forward_step" in text and "blstm_backward_step" in text


def test_the_kernels_are_refused_on_a_cpu_in_one_line(monkeypatch):
  if _on_a_gpu():
    pytest.skip("this process has a GPU")
  from recurrent_bert.layers.kernels import pallas_support

  monkeypatch.delenv(pallas_support.INTERPRET_ENV, raising=False)
  assert kernels.resolve(kernels.BLSTM_FIELD, "auto") == "portable"
  with pytest.raises(InputError) as error:
    BidirectionalLSTM(4, implementation="pallas")
  message = str(error.value)
  assert "\n" not in message
  assert "blstm_implementation='pallas'" in message and "'cpu'" in message
