#!/usr/bin/env bash
# The GPU step-time benchmark (benchmarks/step_time.py) under JAX and PyTorch, each in its
# own process, on a machine with jax, torch, numpy, absl-py and CUDA but no keras, no
# TensorFlow and no package index. Ends with one table of both backends (also written to
# $OUT/step_time.md when $OUT is set, beside each backend's JSON and log).
#
# 1. Here, where pip reaches an index (once; .whl/ is git-ignored, about 2.8 MiB):
#      benchmarks/gpu/fetch_wheels.sh          # keras 3.15.1, namex 0.1.0, optree 0.20.0
# 2. On the GPU machine, in a copy of the checkout with .whl/ beside it, about 8 minutes:
#      bash benchmarks/gpu/run.sh
#
# Stages, failing loudly and early: versions and devices (a missing GPU stops the run),
# bert_tiny under JAX then PyTorch (a failure stops the run), then the six base presets at
# batch 64 x 128 tokens in mixed_bfloat16 (bfloat16 compute, float32 weights), JAX then
# PyTorch, each process stopped at its share of the 8 minutes; a preset that fails or is
# cut off is a row saying so. Exit status 1 if anything failed.
#
# Environment: RB_GPU_SMOKE=1 rehearses the whole script on a CPU (tiny presets, few
# steps, no GPU needed: `RB_GPU_SMOKE=1 PYTHON=.venv/bin/python benchmarks/gpu/run.sh`).
# PYTHON (python3), RB_DTYPE, RB_BATCH, RB_SEQ, RB_STEPS, RB_PEAK_TFLOPS (989 on an
# H100/H200: dense bfloat16, SXM) and RB_BUDGET_S (480) override the settings.
set -euo pipefail

cd "$(dirname "$0")/../.."
# shellcheck source=benchmarks/gpu/setup_keras.sh
source benchmarks/gpu/setup_keras.sh
SMOKE=${RB_GPU_SMOKE:-0}
RESULTS=${OUT:-/tmp/rb_gpu_bench}
mkdir -p "$RESULTS"
BUDGET_S=${RB_BUDGET_S:-480}
START=$SECONDS

# Each timed call is one `fit` of K steps (--steps_per_call): train_on_batch's per-call
# work would be on a GPU step's critical path. The first call compiles (untimed).
if [[ "$SMOKE" == 1 ]]; then
  PRESETS=bert_tiny,bert_rab_tiny,swishrnn_tiny,trans_blstm_2_tiny,trans_blstm_small_2_tiny,blstm_tiny
  SETTINGS=(--batch_size="${RB_BATCH:-4}" --seq_length="${RB_SEQ:-32}" --steps="${RB_STEPS:-2}" --steps_per_call=2 --warmup=1)
else
  PRESETS=bert_base,bert_rab_base,swishrnn_base,trans_blstm_2_base,trans_blstm_small_2_base,blstm_base
  SETTINGS=(--batch_size="${RB_BATCH:-64}" --seq_length="${RB_SEQ:-128}" --steps="${RB_STEPS:-3}" --steps_per_call=10 --warmup=1)
fi
DTYPE=${RB_DTYPE:-mixed_bfloat16}

# -- versions and devices first ---------------------------------------------------------
nvidia-smi -L 2>/dev/null || echo "nvidia-smi: none"
PEAK=$(RB_GPU_SMOKE=$SMOKE "$PY" benchmarks/gpu/versions.py) || exit 1
PEAK=${RB_PEAK_TFLOPS:-$PEAK}
[[ "$PEAK" != 0 ]] || echo "run.sh: unknown card: no --peak_tflops, MFU not given (set RB_PEAK_TFLOPS)" >&2

# The benchmark in a process where `import tensorflow` fails, as on the GPU machine.
NO_TF='import runpy, sys
sys.modules["tensorflow"] = None
sys.argv = ["benchmarks/step_time.py", *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")'

# -- one tiny preset per backend: any failure stops here --------------------------------
for backend in jax torch; do
  echo "== smoke: bert_tiny under $backend ($((SECONDS - START)) s)"
  timeout -k 10 90 "$PY" -c "$NO_TF" \
    --backend=$backend --presets=bert_tiny --batch_size=4 --seq_length=32 --steps=1 \
    --steps_per_call=2 --warmup=1 --dtype="$DTYPE" || die "bert_tiny failed under $backend: nothing more is run"
done

# -- the presets, JAX then PyTorch, within the budget ------------------------------------
status=0
for backend in jax torch; do
  left=$((BUDGET_S - (SECONDS - START) - 15))
  # JAX compiles every preset (tens of seconds each); PyTorch runs eagerly.
  share=$([[ $backend == jax ]] && echo $((left * 65 / 100)) || echo "$left")
  ((share > 30)) || { echo "run.sh: no time left for $backend" >&2; status=1; continue; }
  echo "== $backend: $PRESETS, at most $share s ($((SECONDS - START)) s so far)"
  rm -f "$RESULTS/step_time_$backend.json"
  set +e
  timeout -k 10 "$share" "$PY" -c "$NO_TF" \
    --backend=$backend --presets="$PRESETS" "${SETTINGS[@]}" --dtype="$DTYPE" \
    --peak_tflops="$PEAK" --json="$RESULTS/step_time_$backend.json" \
    2>&1 | tee "$RESULTS/log_$backend.txt"
  code=$?
  set -e
  ((code == 0)) || { echo "run.sh: $backend exited $code (124: out of time)" >&2; status=1; }
done

"$PY" benchmarks/gpu/table.py --presets="$PRESETS" "$RESULTS/step_time_jax.json" \
  "$RESULTS/step_time_torch.json" | tee "$RESULTS/step_time.md"
echo "run.sh: $((SECONDS - START)) s in all, exit $status"
exit $status
