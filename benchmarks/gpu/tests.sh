#!/usr/bin/env bash
# The backend layer tests on a GPU machine (jax, torch, pytest, CUDA; no keras, no
# TensorFlow, no package index): tests/backends/test_layers.py, test_cudnn_lstm.py,
# test_swish_rnn_kernels.py, test_pallas_blstm.py, test_pallas_attention.py,
# test_pallas_layer_norm.py, test_attention.py and test_dropout.py
# under JAX then PyTorch, 4 pytest workers each, each backend stopped at 200 s. On a GPU
# "auto" is the cuDNN BLSTM and SwishRNN's kernels (Pallas under JAX, Triton under
# PyTorch, compiled, not interpreted), the BLSTM's "pallas", the attention kernels with
# dropout and the LayerNorm kernels are compiled by Triton (not interpreted), and
# attention in bfloat16 without dropout is cuDNN's flash attention, so their outputs and
# gradients meet the references there.
#
#   benchmarks/gpu/fetch_wheels.sh     # here, once: keras, namex, optree into .whl/
#   bash benchmarks/gpu/tests.sh       # there, in a copy of the checkout with .whl/ beside it
#
# JAX matmuls in full float32 (its GPU default is TF32), no preallocation (4 workers share
# the card); PyTorch's cuDNN TF32 is turned off by the tests themselves.
set -uo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=benchmarks/gpu/setup_keras.sh
source benchmarks/gpu/setup_keras.sh
export JAX_DEFAULT_MATMUL_PRECISION=highest XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi -L 2>/dev/null || echo "nvidia-smi: none"
status=0
RESULTS=${RB_RESULTS:-output/gpu_tests}
mkdir -p "$RESULTS"
for backend in jax torch; do
  echo "== $backend"
  KERAS_BACKEND=$backend timeout -k 5 200 "$PY" -m pytest -q -p no:cacheprovider -n 4 \
    tests/backends/test_cudnn_lstm.py tests/backends/test_layers.py \
    tests/backends/test_swish_rnn_kernels.py tests/backends/test_pallas_blstm.py \
    tests/backends/test_pallas_attention.py tests/backends/test_pallas_layer_norm.py \
    tests/backends/test_attention.py \
    tests/backends/test_dropout.py -k "not on_a_cpu" \
    2>&1 | tee "$RESULTS/pytest_$backend.txt" | grep -E "passed|failed|^FAILED"
  ((${PIPESTATUS[0]} == 0)) || status=1
done
exit $status
