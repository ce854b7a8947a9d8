#!/usr/bin/env bash
# Downloads into .whl/ (git-ignored) the wheels benchmarks/gpu/run.sh installs on a GPU
# machine that has jax, torch, numpy, absl-py, h5py, ml-dtypes, packaging and rich but no
# keras and no package index.
#
# keras 3.15.1's Requires-Dist is absl-py, numpy, rich, namex, h5py, optree, ml-dtypes,
# packaging: of these only namex and optree are missing there. optree is compiled, so the
# wheel is CPython 3.12's for manylinux x86_64 (the machine's Python); keras and namex are
# pure Python. crcmod (the TFRecord writer's CRC-32C) is missing there too and has no
# wheel: its source archive comes along, and setup_keras.sh puts its pure-Python package
# on the path (no compiler needed). Exactly these four files, about 3 MiB together.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .whl
mkdir -p .whl
"${PYTHON:-python3}" -m pip download --quiet --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 \
  -d .whl keras==3.15.1 namex==0.1.0 optree==0.20.0
"${PYTHON:-python3}" -m pip download --quiet --no-deps --no-binary=:all: -d .whl crcmod==1.7
ls -l .whl
du -sh .whl
