"""What the package's Pallas kernels share: where they run and how they are lowered.

The kernels (pallas_swish_rnn, pallas_blstm, pallas_attention, pallas_layer_norm) lower
to Triton for a CUDA GPU. With `INTERPRET_ENV` set to 1 they run in Pallas' interpreter on
any device instead: the CPU tests check them against numpy references that way, and a CPU
rehearses a GPU script. `cuda_module_text` lowers a function for CUDA without a GPU, so
the CPU tests also check that Triton takes every kernel.

JAX is imported inside the functions, so importing this module imports no framework.
"""

import contextlib
import os

# Set to 1, Pallas runs these kernels in its interpreter on whatever device JAX has.
INTERPRET_ENV = "RECURRENT_BERT_PALLAS_INTERPRET"


def interpreted() -> bool:
  return os.environ.get(INTERPRET_ENV, "") == "1"


def blocks_per_iteration(num_blocks: int, unroll: int) -> int:
  """The largest power of 2 up to `unroll` that divides `num_blocks` (no extra padding)."""
  u = 1
  while u * 2 <= unroll and num_blocks % (u * 2) == 0:
    u *= 2
  return u


def compiler_params(num_warps, num_stages=1):
  """Triton's settings for a kernel. One stage suits a recurrence, whose loop's loads feed
  a serial chain (its unrolled body issues them early); a matmul's reduction loop, as in
  pallas_blstm, can pipeline its loads over several."""
  from jax.experimental.pallas import triton as pallas_triton

  return pallas_triton.CompilerParams(num_warps=num_warps, num_stages=num_stages)


# The card that lowering without a GPU targets (Hopper, compute capability 9.0).
LOWERING_DEVICE_KIND = "NVIDIA H100 80GB HBM3"


@contextlib.contextmanager
def lowering_for_a_gpu(device_kind: str = LOWERING_DEVICE_KIND):
  """Within it, Pallas lowers its Triton kernels for a GPU of `device_kind` whatever device
  this process has. Pallas asks the device for its compute capability as it lowers a
  kernel; on a machine without a GPU, JAX 0.11 and later answer from the abstract device
  of the abstract mesh in force (one of 1 device, automatic sharding), which 0.10 ignores."""
  import jax

  device = jax.sharding.AbstractDevice(device_kind=device_kind, num_cores=None, platform="gpu")
  mesh = jax.sharding.AbstractMesh(
      (1,), ("device",), (jax.sharding.AxisType.Auto,), abstract_device=device
  )
  with jax.sharding.use_abstract_mesh(mesh):
    yield


def cuda_module_text(fn, *args) -> str:
  """The StableHLO text of jitted `fn` at `args` (shapes and dtypes) exported for CUDA,
  which needs no GPU: lowering fails here if Triton cannot take one of its kernels."""
  import jax

  with lowering_for_a_gpu():
    exported = jax.export.export(
        jax.jit(fn),
        platforms=["cuda"],
        disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")],
    )(*args)
  return exported.mlir_module()
