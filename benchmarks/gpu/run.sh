#!/usr/bin/env bash
# The GPU step-time benchmark (benchmarks/step_time.py) under JAX and PyTorch, each pass in
# its own process, on a machine with jax, torch, numpy, absl-py and CUDA but no keras, no
# TensorFlow and no package index. Ends with the report of benchmarks/gpu/table.py (also
# written to $RESULTS/step_time.md, beside each pass's JSON and log; RESULTS is $OUT when
# set, else output/gpu_bench in the checkout).
#
# 1. Here, where pip reaches an index (once; .whl/ is git-ignored, about 2.8 MiB):
#      benchmarks/gpu/fetch_wheels.sh          # keras 3.15.1, namex 0.1.0, optree 0.20.0
# 2. On the GPU machine, in a copy of the checkout with .whl/ beside it, about 8 minutes:
#      bash benchmarks/gpu/run.sh
#
# Stages, failing loudly and early: versions and devices (a missing GPU stops the run),
# bert_tiny under JAX then PyTorch (a failure stops the run), the recurrences' kernels side
# by side (benchmarks/recurrence_kernels.py: SwishRNN's Pallas kernels at several tilings
# against the portable scan, the BLSTM's hand-written scan against autodiff and cuDNN,
# at the base presets' shapes, with each kernel's numbers checked), then the passes, each
# process stopped at its deadline within the 8 minutes (a preset that fails or is cut off
# is a row saying so): the six base presets at batch 64 x 128 tokens in mixed_bfloat16
# (bfloat16 compute, float32 weights) under JAX; bert_base at 256 x 128 under JAX; the six
# under PyTorch eagerly, then compiled (`torch.compile`, each preset's compilation timed
# apart from its steps). After each preset's timing, 3 more steps run under the backend's
# profiler: the report lists each preset's 10 longest kernels. It ends with the issue's
# goals, each met or not. Exit status 1 if anything failed.
#
# Environment: RB_GPU_SMOKE=1 rehearses the whole script on a CPU (tiny presets, few
# steps, no GPU needed: `RB_GPU_SMOKE=1 PYTHON=.venv/bin/python bash benchmarks/gpu/run.sh`,
# a few minutes; it compiles bert_tiny alone under PyTorch). PYTHON (python3), RB_DTYPE,
# RB_BATCH, RB_LARGE_BATCH, RB_SEQ, RB_STEPS, RB_PEAK_TFLOPS (989 on an H100/H200: dense
# bfloat16, SXM), RB_PROFILE_TOP (10; 0: no profiles), RB_PROFILE_STEPS (3),
# RB_TORCH_COMPILED (the presets compiled), RB_BUDGET_S (480), RB_JAX_SHARE (65, % of the
# time after the smoke stage), RB_LARGE_S (75, of JAX's share for the large batch) and
# RB_TORCH_EAGER_SHARE (45, % of PyTorch's time) and RB_KERNELS_S (70, the recurrence
# kernels' benchmark) override the settings.
set -euo pipefail

cd "$(dirname "$0")/../.."
# shellcheck source=benchmarks/gpu/setup_keras.sh
source benchmarks/gpu/setup_keras.sh
SMOKE=${RB_GPU_SMOKE:-0}
RESULTS=${OUT:-output/gpu_bench}
mkdir -p "$RESULTS"
BUDGET_S=${RB_BUDGET_S:-480}
START=$SECONDS

# Each timed call is one `fit` of K steps (--steps_per_call): train_on_batch's per-call
# work would be on a GPU step's critical path. The first call compiles (untimed).
if [[ "$SMOKE" == 1 ]]; then
  SIZE=tiny BATCH=${RB_BATCH:-4} SEQ=${RB_SEQ:-32} LARGE_BATCH=${RB_LARGE_BATCH:-16}
  SETTINGS=(--steps="${RB_STEPS:-2}" --steps_per_call=2 --warmup=1)
else
  SIZE=base BATCH=${RB_BATCH:-64} SEQ=${RB_SEQ:-128} LARGE_BATCH=${RB_LARGE_BATCH:-256}
  SETTINGS=(--steps="${RB_STEPS:-3}" --steps_per_call=10 --warmup=1)
fi
PRESETS=$(printf "%s_$SIZE," bert bert_rab swishrnn trans_blstm_2 trans_blstm_small_2 blstm)
PRESETS=${PRESETS%,}
# A CPU compiles for about a minute a preset: the rehearsal compiles one.
COMPILED=${RB_TORCH_COMPILED:-$([[ "$SMOKE" == 1 ]] && echo bert_tiny || echo "$PRESETS")}
DTYPE=${RB_DTYPE:-mixed_bfloat16}
# After each preset's timing, a few more steps under the backend's profiler: its longest
# kernels and the device's busy time (benchmarks/kernel_profile.py).
PROFILE=(--profile_top="${RB_PROFILE_TOP:-10}" --profile_steps="${RB_PROFILE_STEPS:-3}")

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

# -- the recurrences' kernels side by side (benchmarks/recurrence_kernels.py) -----------
# SwishRNN's Pallas kernels (default tiling and others) against the portable scan, and the
# BLSTM's portable scan against autodiff and cuDNN, each compared with the first's numbers.
echo "== recurrence kernels ($((SECONDS - START)) s)"
KERNEL_ARGS=$([[ "$SMOKE" == 1 ]] && echo --smoke || echo --reps=10)
set +e
timeout -k 10 "${RB_KERNELS_S:-70}" "$PY" -c "${NO_TF/step_time.py/recurrence_kernels.py}" \
  $KERNEL_ARGS --json="$RESULTS/recurrence_kernels.json" 2>&1 | tee "$RESULTS/log_kernels.txt"
((PIPESTATUS[0] == 0)) || { echo "run.sh: the recurrence kernels' benchmark failed" >&2; KERNELS_FAILED=1; }
set -e

# bench NAME SECONDS ARGS...: one step_time.py process (ARGS: backend, presets, batch) that
# is stopped after SECONDS; $RESULTS/step_time_NAME.json keeps the presets it finished.
status=${KERNELS_FAILED:-0}
bench() {
  local name=$1 seconds=$2 code
  shift 2
  ((seconds > 30)) || { echo "run.sh: no time left for $name" >&2; status=1; return 0; }
  echo "== $name: $*, at most $seconds s ($((SECONDS - START)) s so far)"
  rm -f "$RESULTS/step_time_$name.json"
  set +e
  timeout -k 10 "$seconds" "$PY" -c "$NO_TF" "$@" --seq_length="$SEQ" "${SETTINGS[@]}" \
    --dtype="$DTYPE" --peak_tflops="$PEAK" "${PROFILE[@]}" \
    --json="$RESULTS/step_time_$name.json" 2>&1 | tee "$RESULTS/log_$name.txt"
  code=${PIPESTATUS[0]}
  set -e
  ((code == 0)) || { echo "run.sh: $name exited $code (124: out of time)" >&2; status=1; }
}
left() { echo $((BUDGET_S - (SECONDS - START) - 15)); }  # 15 s for the report

# -- JAX: 65% of what is left; bert at the large batch gets what the presets leave -------
# JAX compiles every preset (tens of seconds each). Deadlines, not fixed shares: time one
# pass leaves over goes to the next.
JAX_END=$((SECONDS + $(left) * ${RB_JAX_SHARE:-65} / 100))
LARGE_S=${RB_LARGE_S:-75}
bench jax $((JAX_END - SECONDS - LARGE_S)) --backend=jax --presets="$PRESETS" --batch_size="$BATCH"
bench jax_large $((JAX_END - SECONDS)) --backend=jax --presets="bert_$SIZE" --batch_size="$LARGE_BATCH"

# -- PyTorch: eager first (no compilation: every preset's baseline), then torch.compile ---
# with the rest; a preset whose compilation does not finish in time reads "not run".
bench torch_eager $(($(left) * ${RB_TORCH_EAGER_SHARE:-45} / 100)) --backend=torch \
  --presets="$PRESETS" --batch_size="$BATCH"
bench torch $(left) --backend=torch --jit_compile=true --presets="$COMPILED" --batch_size="$BATCH"

"$PY" benchmarks/gpu/table.py --presets="$PRESETS" --size="$SIZE" --batch="${BATCH}x$SEQ" \
  --large_batch="${LARGE_BATCH}x$SEQ" "$RESULTS"/step_time_{jax,jax_large,torch,torch_eager}.json \
  | tee "$RESULTS/step_time.md"
echo "run.sh: $((SECONDS - START)) s in all, exit $status"
exit $status
