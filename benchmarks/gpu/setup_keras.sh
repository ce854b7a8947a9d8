# Sourced by the GPU scripts (run.sh, tests.sh, claims.sh): the machine has jax, torch,
# numpy, absl-py, h5py, ml-dtypes, protobuf, matplotlib, ... and CUDA, but no keras and no
# package index. Installs keras 3.15.1 (and namex, optree) from the carried .whl/ when it
# is missing, puts the repo on PYTHONPATH and sets PY (the interpreter) and die().
# Everything it unpacks goes under output/ in the checkout (git-ignored).
#
#   benchmarks/gpu/fetch_wheels.sh     # where pip works, once: .whl/ (git-ignored)
PY=${PYTHON:-python3}
die() { echo "$(basename "$0"): $*" >&2; exit 1; }
if ! "$PY" -c "import importlib.metadata as m; assert m.version('keras') == '3.15.1'" 2>/dev/null; then
  compgen -G ".whl/*.whl" >/dev/null || die "no keras 3.15.1 here and no .whl/: run benchmarks/gpu/fetch_wheels.sh where pip works, and carry .whl"
  SITE="$(pwd)/output/gpu_site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
fi
# crcmod (TFRecord CRC-32C, which the data tools write) is not there either: its pure-Python
# package from the carried source archive, about 6 MB/s a process. A rehearsal (RB_GPU_SMOKE=1)
# uses it too, so that it runs what the GPU machine runs.
if [[ ${RB_GPU_SMOKE:-0} == 1 ]] || ! "$PY" -c "import crcmod" 2>/dev/null; then
  compgen -G ".whl/crcmod-1.7.tar.gz" >/dev/null || die "no crcmod here and no .whl/crcmod-1.7.tar.gz: run benchmarks/gpu/fetch_wheels.sh where pip works"
  CRCMOD="$(pwd)/output/gpu_pure_crcmod"
  rm -rf "$CRCMOD" && mkdir -p "$CRCMOD"
  tar -xzf .whl/crcmod-1.7.tar.gz -C "$CRCMOD" --strip-components=2 crcmod-1.7/python3/crcmod
  export PYTHONPATH=$CRCMOD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONUNBUFFERED=1
