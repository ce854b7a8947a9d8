"""SwishRNN's GPU kernels, checked without a GPU: "pallas" (JAX) and "triton" (PyTorch).

Each session tests its backend's kernels. On a CPU the same kernel bodies run in an
interpreter (Pallas' or Triton's) against the numpy loop of SPEC §4
(tests/support/references.py): outputs, and gradients against central differences of that
loop, for k = 1, 2, 3, 4, with and without the fused gating, a separate or shared residual,
T a multiple of the unrolled width or not, D wider than one program's channels; under
bfloat16 inputs too. The layer on the kernel equals the layer on "portable" with the same
weights. And the kernels compile for CUDA without a GPU (Pallas lowers to Triton; Triton
compiles to PTX for an H100), so a kernel the compiler cannot take fails here, not on the
card. On a GPU the same tests run the compiled kernels.
"""

import math
import os

import keras
import numpy as np
import pytest

from recurrent_bert.errors import InputError
from recurrent_bert.layers import SwishRNN
from recurrent_bert.layers import kernels
from tests.backends.support import BACKEND
from tests.backends.support import outputs_and_gradients
from tests.backends.support import run_python
from tests.backends.support import to_numpy
from tests.support import references as ref

# The kernel implementation each backend offers, and the switch that interprets it.
IMPLEMENTATION = {"jax": "pallas", "torch": "triton"}[BACKEND]
INTERPRET_ENV = {
    "jax": "RECURRENT_BERT_PALLAS_INTERPRET",
    "torch": kernels.TRITON_INTERPRET_ENV,
}[BACKEND]


def _on_a_gpu() -> bool:
  if BACKEND == "jax":
    import jax

    return jax.devices()[0].platform == "gpu"
  import torch

  return torch.cuda.is_available()


INTERPRET = not _on_a_gpu()


@pytest.fixture(scope="module")
def kernel_module():
  """The backend's kernel module (off a GPU, tests/conftest.py has set Triton's switch
  before anything imported Triton)."""
  if BACKEND == "jax":
    from recurrent_bert.layers.kernels import pallas_swish_rnn

    return pallas_swish_rnn
  pytest.importorskip("triton")
  assert not INTERPRET or os.environ.get(INTERPRET_ENV) == "1"
  from recurrent_bert.layers.kernels import triton_swish_rnn

  return triton_swish_rnn


def _numpy_recurrence(k, shared, gated):
  """arrays (x1, [residual], alpha, beta, [gate, state_bias]) -> the kernel's output."""

  def run(arrays):
    arrays = list(arrays)
    x1 = arrays.pop(0)
    residual = x1 if shared else arrays.pop(0)
    alpha, beta = arrays.pop(0), arrays.pop(0)
    c = ref.swish_rnn_states(x1, residual, alpha, beta, k)
    if not gated:
      return c
    gate, state_bias = arrays
    return (c + state_bias) * gate

  return run


def _inputs(rng, shape, shared, gated):
  depth = shape[-1]
  arrays = [rng.normal(size=shape)]
  arrays += [] if shared else [rng.normal(size=shape)]
  arrays += [rng.uniform(0.5, 1.5, size=depth), rng.normal(size=depth)]
  arrays += [rng.normal(size=shape), rng.normal(size=depth)] if gated else []
  return [a.astype("float32") for a in arrays]


def _kernel(module, k, shared, gated):
  """The kernel as a function of backend tensors in `_numpy_recurrence`'s argument order."""

  def run(*arrays):
    arrays = list(arrays)
    x1 = arrays.pop(0)
    residual = None if shared else arrays.pop(0)
    alpha, beta = arrays.pop(0), arrays.pop(0)
    gate, state_bias = arrays if gated else (None, None)
    extra = dict(interpret=INTERPRET) if BACKEND == "jax" else {}
    return module.recurrence(x1, residual, alpha, beta, k, gate, state_bias, **extra)

  return run


def _tensors(arrays, dtype="float32"):
  """numpy arrays -> the backend's tensors of `dtype` (PyTorch's on the default device,
  tracking gradients)."""
  if BACKEND == "jax":
    from jax import numpy as jnp

    return [jnp.asarray(a, dtype) for a in arrays]
  import torch

  device = "cuda" if _on_a_gpu() else "cpu"
  return [
      torch.tensor(np.asarray(a, np.float32), device=device)
      .to(getattr(torch, dtype))
      .requires_grad_()
      for a in arrays
  ]


def _value_and_gradients(run, tensors, upstream):
  """run(*tensors) and the gradients of sum(run(*tensors) * upstream) on every tensor, as
  numpy, by the backend's own autodiff."""
  if BACKEND == "jax":
    import jax

    loss = lambda *a: (run(*a).astype("float32") * upstream).sum()
    grads = jax.grad(loss, argnums=tuple(range(len(tensors))))(*tensors)
    return to_numpy(run(*tensors).astype("float32")), [to_numpy(g.astype("float32")) for g in grads]
  import torch

  y = run(*tensors)
  (y.float() * torch.tensor(upstream, dtype=torch.float32, device=y.device)).sum().backward()
  return y.detach().float().cpu().numpy(), [t.grad.float().cpu().numpy() for t in tensors]


@pytest.mark.parametrize(
    "k,shape,shared,gated",
    [
        (1, (2, 16, 3), True, True),  # two iterations of the 8-block unrolled body
        (2, (2, 7, 3), False, False),  # T not a multiple of k
        (3, (2, 7, 3), False, True),  # k not a power of 2: three carried chains
        (4, (1, 12, 3), True, False),
        (2, (1, 5, 130), False, True),  # two programs across D, the second mostly padding
    ],
)
def test_kernel_and_its_gradient_against_the_numpy_loop(
    kernel_module, rng, k, shape, shared, gated
):
  arrays = _inputs(rng, shape, shared, gated)
  upstream = rng.normal(size=shape)
  run = _kernel(kernel_module, k, shared, gated)
  numpy_run = _numpy_recurrence(k, shared, gated)
  got, grads = _value_and_gradients(run, _tensors(arrays), upstream)
  np.testing.assert_allclose(got, numpy_run(arrays), atol=1e-5, rtol=1e-5)
  if shape[-1] > 8:
    return  # central differences of 1,300 inputs: the narrow cases cover the gradient
  want = ref.finite_difference_gradients(numpy_run, arrays, upstream)
  for i, (g, w) in enumerate(zip(grads, want)):
    np.testing.assert_allclose(g, w, atol=2e-5, rtol=1e-4, err_msg=f"input {i}")


def test_bfloat16_inputs_compute_in_float32(kernel_module, rng):
  """bfloat16 x1 and gate: the state stays float32 inside, so the result is the float64
  loop on the bfloat16-rounded inputs, rounded once to bfloat16 at the end."""
  k, shape = 2, (2, 64, 8)
  arrays = _inputs(rng, shape, shared=True, gated=True)
  run = _kernel(kernel_module, k, True, True)
  x1, alpha, beta, gate, state_bias = _tensors(arrays)
  x1_bf16, gate_bf16 = _tensors([arrays[0], arrays[3]], "bfloat16")
  got = run(x1_bf16, alpha, beta, gate_bf16, state_bias)
  assert "bfloat16" in str(got.dtype)
  rounded = [to_numpy(t).astype(np.float64) for t in (x1_bf16, alpha, beta, gate_bf16, state_bias)]
  want = _numpy_recurrence(k, True, True)(rounded)
  np.testing.assert_allclose(to_numpy(got).astype(np.float64), want, atol=2e-2, rtol=1e-2)
  upstream = np.ones(shape)
  _, (dx1, *_) = _value_and_gradients(run, [x1_bf16, alpha, beta, gate_bf16, state_bias], upstream)
  x1_rounded, gate_rounded = _tensors([rounded[0], rounded[3]])
  _, (dx1_f32, *_) = _value_and_gradients(
      run, [x1_rounded, alpha, beta, gate_rounded, state_bias], upstream
  )
  np.testing.assert_allclose(dx1, dx1_f32, atol=3e-2, rtol=2e-2)


def _numpy_from_projections(k, residual_is_x2, gate):
  """arrays (projections [B, T, 2, D], gate_bias, state_bias, alpha, beta) -> the gated
  output of `recurrence_of_projections`, from SPEC §4's loop and the gate's formula."""
  activation = {"gelu": ref.gelu, "sigmoid": ref.sigmoid}[gate]

  def run(arrays):
    projections, gate_bias, state_bias, alpha, beta = arrays
    x1, x2 = projections[:, :, 0], projections[:, :, 1]
    c = ref.swish_rnn_states(x1, x2 if residual_is_x2 else x1, alpha, beta, k)
    return (c + state_bias) * activation(x2 + gate_bias)

  return run


@pytest.mark.parametrize(
    "k,shape,residual_is_x2,gate",
    [
        (1, (2, 16, 3), False, "gelu"),
        (3, (2, 7, 3), True, "gelu"),  # T not a multiple of k, three chains
        (2, (1, 6, 3), True, "sigmoid"),
        (2, (1, 5, 130), False, "gelu"),  # two programs across D, the second mostly padding
    ],
)
def test_the_projections_form_against_the_numpy_loop(
    kernel_module, rng, k, shape, residual_is_x2, gate
):
  """X1 and X2 read from one [B, T, 2, D] product, the gate computed in the kernels (the
  exact GELU through the kernels' own erfc): output and every gradient, the projections'
  as one tensor, against the loop and central differences of it."""
  batch, length, depth = shape
  arrays = [rng.normal(size=(batch, length, 2, depth)) * 1.5, rng.normal(size=depth)]
  arrays += [rng.normal(size=depth), rng.uniform(0.5, 1.5, size=depth), rng.normal(size=depth)]
  arrays = [a.astype("float32") for a in arrays]
  upstream = rng.normal(size=shape)

  extra = dict(interpret=INTERPRET) if BACKEND == "jax" else {}

  def run(projections, gate_bias, state_bias, alpha, beta):
    return kernel_module.recurrence_of_projections(
        projections, gate_bias, state_bias, alpha, beta, k, gate, residual_is_x2, **extra
    )

  numpy_run = _numpy_from_projections(k, residual_is_x2, gate)
  got, grads = _value_and_gradients(run, _tensors(arrays), upstream)
  np.testing.assert_allclose(got, numpy_run(arrays), atol=1e-5, rtol=1e-5)
  if depth > 8:
    return
  want = ref.finite_difference_gradients(numpy_run, arrays, upstream)
  for i, (g, w) in enumerate(zip(grads, want)):
    np.testing.assert_allclose(g, w, atol=2e-5, rtol=1e-4, err_msg=f"input {i}")


@pytest.mark.skipif(BACKEND != "jax", reason="the Pallas kernels' erfc")
def test_the_kernels_erfc_against_the_math_library(kernel_module):
  """float32 erfc from exp alone, against the float64 value: relative error under 6e-7
  for |x| <= 2 and 3e-6 to 4.5 (XLA's own float32 erfc: 6e-7 and 1.1e-6; the rounding of
  x² in float32 sets the floor), and the GELU and slope made of it within float32
  rounding of the float64 formulas everywhere."""
  from jax import numpy as jnp

  x = np.linspace(-4.5, 4.5, 9001).astype(np.float32)
  got = to_numpy(kernel_module.erfc(jnp.asarray(x))).astype(np.float64)
  want = np.vectorize(math.erfc)(x.astype(np.float64))
  error = np.abs(got - want) / want
  assert error[np.abs(x) <= 2].max() < 6e-7 and error.max() < 3e-6
  u = np.linspace(-12, 12, 24001).astype(np.float32)
  value, slope = kernel_module.activated("gelu", jnp.asarray(u))
  np.testing.assert_allclose(to_numpy(value), ref.gelu(u.astype(np.float64)), atol=2e-7, rtol=2e-6)
  u64 = u.astype(np.float64)
  want_slope = 0.5 * np.vectorize(math.erfc)(-u64 / math.sqrt(2)) + u64 * np.exp(
      -0.5 * u64**2
  ) / math.sqrt(2 * math.pi)
  np.testing.assert_allclose(to_numpy(slope), want_slope, atol=2e-7, rtol=2e-6)


class _InFloat32(keras.layers.Layer):
  """A layer's output in float32 (numpy has no bfloat16 for PyTorch's tensors)."""

  def __init__(self, layer, **kwargs):
    super().__init__(**kwargs)
    self.layer = layer
    self.built = layer.built

  def call(self, x, mask):
    return keras.ops.cast(self.layer(x, mask), "float32")


@pytest.mark.parametrize(
    "k,residual,direction,policy,gate",
    [
        (1, "x1", "forward", "float32", "gelu"),
        (4, "x2", "bidirectional", "float32", "gelu"),
        (1, "x1", "forward", "mixed_bfloat16", "gelu"),
        (2, "x2", "bidirectional", "mixed_bfloat16", "gelu"),
        (2, "x2", "forward", "mixed_bfloat16", "sigmoid"),
    ],
)
def test_the_layer_on_the_kernel_equals_the_layer_on_portable(
    kernel_module, rng, monkeypatch, k, residual, direction, policy, gate
):
  """Under mixed bfloat16 the kernel reads the bfloat16 projections and gate as they are
  and "portable" their float32 conversions: the same values, so the same results to
  float32 rounding, before the outputs' and gradients' one rounding to bfloat16. The
  forward direction takes the kernels' projections form (one [B, T, 2, d'] product, the
  gate made in the kernels)."""
  if INTERPRET:
    monkeypatch.setenv(INTERPRET_ENV, "1")
  keras.config.set_dtype_policy(policy)  # conftest restores float32
  read = []  # (the kernels' entry point, the dtype of the sequence it read)

  def spy(entry):
    run = getattr(kernel_module, entry)
    return lambda x1, *a, **kw: read.append((entry, str(x1.dtype))) or run(x1, *a, **kw)

  for entry in ("recurrence", "recurrence_of_projections"):
    if hasattr(kernel_module, entry):
      monkeypatch.setattr(kernel_module, entry, spy(entry))
  layers = {
      name: SwishRNN(
          8, 6, step_size=k, residual=residual, gate=gate, direction=direction, implementation=name
      )
      for name in ("portable", IMPLEMENTATION)
  }
  x = rng.normal(size=(2, 9, 8)).astype("float32")
  mask = np.array([[1] * 9, [1] * 5 + [0] * 4], "int32")
  for layer in layers.values():
    layer.build(x.shape)
  for v in layers["portable"].weights:
    v.assign(rng.normal(scale=0.5, size=v.shape).astype("float32"))
  for mine, theirs in zip(layers[IMPLEMENTATION].weights, layers["portable"].weights):
    mine.assign(theirs)
  upstream = rng.normal(size=x.shape)
  (want, want_grads), (got, got_grads) = (
      outputs_and_gradients(_InFloat32(layers[name]), x, upstream, mask)
      for name in ("portable", IMPLEMENTATION)
  )
  # float32: 1e-5. bfloat16: float32 roundings apart can round a value to its bfloat16
  # neighbour, and a weight's gradient sums such values in bfloat16: 3% of the largest
  # value, as the attention's bfloat16 comparisons (seen: 1.2%, PyTorch).
  close = (
      (lambda w: dict(atol=1e-5, rtol=1e-5))
      if policy == "float32"
      else (lambda w: dict(atol=0.03 * np.abs(w).max(), rtol=0))
  )
  np.testing.assert_allclose(got, want, **close(want))
  for w, g in zip(want_grads, got_grads):
    np.testing.assert_allclose(g, w, **close(w))
  assert read and all(("float32" if policy == "float32" else "bfloat16") in r for _, r in read)
  fused = direction == "forward"
  assert {entry for entry, _ in read} == {"recurrence_of_projections" if fused else "recurrence"}


@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile is PyTorch's")
@pytest.mark.parametrize("projections", [False, True])
def test_torch_compile_keeps_the_triton_kernels_whole(kernel_module, rng, projections):
  """The custom operators and their shape functions, in both forms: compiled with
  fullgraph=True (a graph break would raise), the result and gradient equal the eager
  ones."""
  import torch

  arrays = _inputs(rng, (2, 6, 4), shared=True, gated=True)
  run = _kernel(kernel_module, 2, True, True)
  if projections:  # [B, T, 2, D], gate bias, state bias, alpha, beta
    _, alpha, beta, _, state_bias = arrays
    sequence, gate_bias = (rng.normal(size=n).astype("float32") for n in ((2, 6, 2, 4), 4))
    arrays = [sequence, gate_bias, state_bias, alpha, beta]
    run = lambda *a: kernel_module.recurrence_of_projections(*a, 2, "gelu", True)
  upstream = rng.normal(size=(2, 6, 4))
  want, want_grads = _value_and_gradients(run, _tensors(arrays), upstream)
  torch._dynamo.reset()
  compiled = torch.compile(run, fullgraph=True, backend="aot_eager")
  got, got_grads = _value_and_gradients(compiled, _tensors(arrays), upstream)
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
  for w, g in zip(want_grads, got_grads):
    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.skipif(BACKEND != "jax", reason="Pallas' lowering")
def test_the_pallas_kernels_lower_to_triton_for_cuda(kernel_module, k):
  """The base size's shapes (d' = 2048) in bfloat16, gated, both residual forms, and the
  projections form with the exact GELU (the presets') and, at k = 2, with X2 as the
  residual and the sigmoid gate: the forward and the backward kernel each become one
  Triton call."""
  forms = [(False, None), (True, None), (False, "gelu")] + [(True, "sigmoid")] * (k == 2)
  for has_residual, fused_gate in forms:
    text = kernel_module.triton_module_text(
        (4, 128, 2048), k, has_residual, True, "bfloat16", fused_gate
    )
    assert text.count("__gpu$xla.gpu.triton") == 2
    assert f"swish_rnn_forward_k{k}" in text and f"swish_rnn_backward_k{k}" in text


@pytest.mark.skipif(BACKEND != "jax", reason="Pallas' lowering")
def test_lowering_without_a_gpu_targets_an_h100():
  """Pallas lowers a kernel for the compute capability of the device it asks about; with
  no GPU, JAX 0.11 and later answer from the abstract mesh in force, which the lowering
  helper sets to one H100 for as long as it lasts (JAX 0.10 does not ask)."""
  import jax

  from recurrent_bert.layers.kernels import pallas_support

  with pallas_support.lowering_for_a_gpu():
    device = jax.sharding.get_abstract_mesh().abstract_device
    assert (device.device_kind, device.platform) == ("NVIDIA H100 80GB HBM3", "gpu")
    try:
      from jax._src.pallas.triton import gpu_info  # pylint: disable=g-import-not-at-top
    except ImportError:
      pass  # JAX 0.10: Pallas does not ask
    else:
      assert gpu_info.get_gpu_info().compute_capability == 90
  assert jax.sharding.get_abstract_mesh().abstract_device is None


@pytest.mark.skipif(BACKEND != "torch", reason="Triton's compiler")
def test_the_triton_kernels_compile_for_an_h100(kernel_module):
  """The same shapes and forms, k = 1, 2, 4 (and one ungated, and the projections form
  with either gate): Triton compiles both kernels to PTX for compute capability 9.0. In a
  process of its own, without the interpreter's switch (kernels defined for the
  interpreter cannot be compiled)."""
  code = """
      from recurrent_bert.layers.kernels import triton_swish_rnn_kernels
      forms = [(k, residual, True, None) for k in (1, 2, 4) for residual in (False, True)]
      forms += [(2, False, False, None), (1, False, True, "gelu"), (2, True, True, "sigmoid")]
      for k, residual, gated, fused in forms:
        assembly = triton_swish_rnn_kernels.cuda_assembly(
            (4, 128, 2048), k, residual, gated, "bfloat16", fused_gate=fused
        )
        for name, text in assembly.items():
          assert ".target sm_90" in text and f" {name}_kernel(" in text, (k, name)
      print("compiled")
  """
  result = run_python(code, "torch", unset=[INTERPRET_ENV])
  assert result.returncode == 0 and "compiled" in result.stdout, result.stderr[-3000:]


def test_the_kernel_is_refused_on_a_cpu_in_one_line(monkeypatch):
  if not INTERPRET:
    pytest.skip("this process has a GPU")
  monkeypatch.delenv(INTERPRET_ENV, raising=False)
  assert kernels.resolve(kernels.SWISH_RNN_FIELD, "auto") == "portable"
  with pytest.raises(InputError) as error:
    SwishRNN(8, 6, implementation=IMPLEMENTATION)
  message = str(error.value)
  assert "\n" not in message
  assert f"'{IMPLEMENTATION}'" in message and "cpu" in message.lower()
  assert keras.backend.backend() == BACKEND


@pytest.mark.skipif(BACKEND != "torch", reason="Triton's launcher is PyTorch's path")
def test_without_a_c_compiler_auto_keeps_the_scan_and_triton_is_refused(monkeypatch):
  """On a CUDA GPU Triton builds each kernel's launcher with a C compiler: where there is
  none, "auto" stays on "portable" and "triton" is refused naming what is missing."""
  monkeypatch.setattr(kernels, "_torch_has_cuda", lambda: True)
  monkeypatch.delenv(INTERPRET_ENV, raising=False)
  monkeypatch.delenv("CC", raising=False)
  monkeypatch.setattr(kernels.shutil, "which", lambda name: None)
  assert kernels.resolve(kernels.SWISH_RNN_FIELD, "auto") == "portable"
  with pytest.raises(InputError, match=r"'triton' needs a C compiler .* runs on a CUDA GPU"):
    kernels.check(kernels.SWISH_RNN_FIELD, "triton")
  monkeypatch.setattr(kernels.shutil, "which", lambda name: f"/usr/bin/{name}")
  assert kernels.resolve(kernels.SWISH_RNN_FIELD, "auto") == "triton"
