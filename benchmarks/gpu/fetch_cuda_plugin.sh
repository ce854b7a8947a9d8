#!/usr/bin/env bash
# Installs into .cuda_plugin/ (git-ignored) JAX's CUDA plugin of the installed jaxlib's
# version, without its CUDA libraries: what benchmarks/gpu/compiled_for_gpu.py needs to
# compile a training step for an H100 on a machine without a GPU. About 180 MB from the
# package index (480 MB installed); the package itself never imports it.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
VERSION=$("$PY" -c 'import jaxlib; print(jaxlib.__version__)')
rm -rf .cuda_plugin
"$PY" -m pip install --quiet --no-deps --target .cuda_plugin \
  "jax-cuda12-plugin==$VERSION" "jax-cuda12-pjrt==$VERSION"
du -sh .cuda_plugin
