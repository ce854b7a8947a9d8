"""Versions and devices, printed first by the GPU scripts (to stderr); stdout: the card's
dense bfloat16 peak TFLOPS (0 when unknown). Exits 1 when no GPU is visible to JAX or
PyTorch, unless RB_GPU_SMOKE=1 (a rehearsal on a CPU)."""

import importlib.metadata as md
import os
import platform
import shutil
import sys

PACKAGES = (
    "numpy",
    "jax",
    "jaxlib",
    "torch",
    "triton",  # PyTorch's CUDA builds bring it: SwishRNN's kernels under PyTorch
    "keras",
    "namex",
    "optree",
    "h5py",
    "ml-dtypes",
    "rich",
    "absl-py",
    "protobuf",
    "matplotlib",
)


def main() -> None:
  print("python", platform.python_version(), sys.executable, file=sys.stderr)
  for name in PACKAGES:
    try:
      print(f"  {name} {md.version(name)}", file=sys.stderr)
    except md.PackageNotFoundError:
      print(f"  {name} MISSING", file=sys.stderr)
  import jax
  import torch

  print("jax devices:", jax.devices(), file=sys.stderr)
  gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
  print("torch cuda:", torch.version.cuda, gpu, file=sys.stderr)
  # Triton builds each kernel's launcher with a C compiler; without one, "auto" keeps
  # SwishRNN's portable scan under PyTorch.
  compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
  print("C compiler for Triton's launchers:", compiler or "none", file=sys.stderr)
  if os.environ.get("RB_GPU_SMOKE") != "1":
    if jax.devices()[0].platform != "gpu" or gpu is None:
      sys.exit("no GPU visible to jax or torch (RB_GPU_SMOKE=1 rehearses on a CPU)")
  # Dense bfloat16 peak of the SXM cards (the figure MFU is usually quoted against).
  print(989 if gpu and ("H100" in gpu or "H200" in gpu) else 0)


if __name__ == "__main__":
  main()
