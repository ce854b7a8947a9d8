#!/usr/bin/env bash
# The GPU step-time benchmark (benchmarks/step_time.py) under JAX and PyTorch, each pass in
# its own process, on a machine with jax, torch, numpy, absl-py and CUDA but no keras, no
# TensorFlow and no package index. Ends with the report of benchmarks/gpu/table.py (also
# written to $RESULTS/step_time.md, beside each pass's JSON and log; RESULTS is $RB_RESULTS when
# set, else output/gpu_bench in the checkout).
#
# 1. Here, where pip reaches an index (once; .whl/ is git-ignored, about 2.8 MiB):
#      benchmarks/gpu/fetch_wheels.sh          # keras 3.15.1, namex 0.1.0, optree 0.20.0
# 2. On the GPU machine, in a copy of the checkout with .whl/ beside it, about 8 minutes:
#      bash benchmarks/gpu/run.sh
#
# Stages: versions and devices (a missing GPU stops the run); everything compiled at once,
# in parallel processes that share the backends' caches (JAX's persistent compilation
# cache, PyTorch Inductor's), so that compilation, tens of seconds a preset on a card,
# overlaps instead of adding up (a backend whose BERT fails to compile stops the run);
# then, one process at a time on an otherwise idle card, each reading its programs back:
# the recurrences' kernels side by side (benchmarks/kernels_side_by_side.py: SwishRNN's
# Pallas kernels at several tilings against the portable scan, the BLSTM's hand-written
# scan against autodiff, its Pallas kernels and cuDNN, at the base presets' shapes, each
# kernel's numbers checked; then SwishRNN's Triton kernels under PyTorch the same way),
# the six base presets at batch 64 x 128 tokens in mixed_bfloat16 (bfloat16 compute,
# float32 weights) under JAX (then trans_blstm_2_base on the Pallas BLSTM kernels),
# bert_base again through the package's own JAX loop
# (step_time.py --trainer=package: what rbert-pretrain runs, beside Keras' fit), bert_base
# at 256 x 128 under JAX, PyTorch compiled (`torch.compile`: bert_base, bert_rab_base and
# swishrnn_base, whose recurrence is then the Triton kernels; the BLSTM presets' portable
# recurrences are Python loops over T, which compilation unrolls),
# bert_base before them through the package's own PyTorch loop compiled, and the six under
# PyTorch eagerly (then swishrnn_base again on the portable scan, beside the Triton
# kernels "auto" picks), each process stopped at its deadline within the 8 minutes
# (a preset that fails or is cut off is a row saying so). After each preset's timing, 3 more steps run under the backend's
# profiler: the report lists each preset's 10 longest kernels. It ends with the issue's
# goals, each met or not. Exit status 1 if anything failed.
#
# Environment: RB_GPU_SMOKE=1 rehearses the whole script on a CPU (tiny presets, few
# steps, no GPU needed: `RB_GPU_SMOKE=1 PYTHON=.venv/bin/python bash benchmarks/gpu/run.sh`,
# 4 to 8 minutes on 2 cores; it compiles bert_tiny alone under PyTorch). PYTHON (python3), RB_DTYPE,
# RB_BATCH, RB_LARGE_BATCH, RB_SEQ, RB_STEPS, RB_PEAK_TFLOPS (989 on an H100/H200: dense
# bfloat16, SXM), RB_PROFILE_TOP (10; 0: no profiles), RB_PROFILE_STEPS (3),
# RB_TORCH_COMPILED (the presets compiled), RB_BUDGET_S (480; 900 rehearsing),
# RB_COMPILE_S (200, the parallel compilation; 400 rehearsing), RB_PARALLEL (6 processes at a time), RB_KERNELS_S (45, the
# kernels' timing), RB_KERNELS_TORCH_S (40, the PyTorch kernels'), RB_JAX_SHARE (60, % of the time after that), RB_LARGE_S (35, of JAX's
# share for the large batch), RB_PACKAGE_S (30, of JAX's share for the package loop),
# RB_TORCH_COMPILED_SHARE (50, % of PyTorch's time) and RB_TORCH_PACKAGE_S (45, of that
# share for the package's PyTorch loop, timed first) override the settings.
set -euo pipefail

cd "$(dirname "$0")/../.."
# shellcheck source=benchmarks/gpu/setup_keras.sh
source benchmarks/gpu/setup_keras.sh
SMOKE=${RB_GPU_SMOKE:-0}
RESULTS=${RB_RESULTS:-output/gpu_bench}
mkdir -p "$RESULTS"
# A rehearsal's limits are the CPU's, not the card's: on 2 busy cores PyTorch alone can
# take 200 s to compile bert_tiny's step, and each compiled pass traces it again.
BUDGET_S=${RB_BUDGET_S:-$([[ "$SMOKE" == 1 ]] && echo 900 || echo 480)}
COMPILE_S=${RB_COMPILE_S:-$([[ "$SMOKE" == 1 ]] && echo 400 || echo 200)}
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
# PyTorch compiles the presets without a Python loop over T: SwishRNN's recurrence is the
# Triton kernels on a GPU, the BLSTMs' would be unrolled by torch.compile (minutes a preset).
COMPILED=${RB_TORCH_COMPILED:-$([[ "$SMOKE" == 1 ]] && echo bert_tiny || echo "bert_$SIZE,bert_rab_$SIZE,swishrnn_$SIZE")}
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

# Both backends' caches live in the checkout's output/, shared by every process below.
export JAX_COMPILATION_CACHE_DIR="$(pwd)/output/gpu_cache/jax" JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
export TORCHINDUCTOR_CACHE_DIR="$(pwd)/output/gpu_cache/torch"
KERNEL_ARGS=$([[ "$SMOKE" == 1 ]] && echo --smoke || echo --reps=10)
status=0

# benchmarks/step_time.py in a process where `import tensorflow` fails, as on the GPU
# machine, at this run's sequence length, steps, dtype and peak; then its ARGS.
STEP_TIME=("$PY" -c "$NO_TF" --seq_length="$SEQ" "${SETTINGS[@]}" --dtype="$DTYPE" --peak_tflops="$PEAK")

# -- everything compiled at once: RB_PARALLEL processes at a time -----------------------
# Each process runs its preset's first call (the compilation) and ends; the card's memory
# is allocated as needed (not JAX's 75% up front), so the processes fit side by side.
COMPILE_END=$((SECONDS + COMPILE_S))
# Jobs by name, the longest first: torch_P (compiled), torch_package, jax_P, jax_pallas_P,
# jax_large, jax_package, kernels.
COMPILE_JOBS=()
for preset in ${COMPILED//,/ }; do COMPILE_JOBS+=("torch_$preset"); done
COMPILE_JOBS+=("torch_package_bert_$SIZE")
for preset in ${PRESETS//,/ }; do COMPILE_JOBS+=("jax_$preset"); done
# trans_blstm_2 once more on the Pallas BLSTM kernels ("auto" is cuDNN on a GPU): its row
# follows the presets in JAX's pass (not in the CPU rehearsal, where Pallas would have to
# be interpreted).
BLSTM_VARIANTS=()
if [[ "$SMOKE" != 1 ]]; then
  COMPILE_JOBS+=("jax_pallas_trans_blstm_2_$SIZE")
  BLSTM_VARIANTS=(--blstm_implementations auto pallas)
fi
COMPILE_JOBS+=("jax_large_bert_$SIZE" "jax_package_bert_$SIZE" kernels)
echo "== compiling ${#COMPILE_JOBS[@]} programs, ${RB_PARALLEL:-6} at a time ($((SECONDS - START)) s)"
rm -rf "$RESULTS/compile" "$RESULTS"/step_time_*.json "$RESULTS"/kernels_side_by_side*.json
mkdir -p "$RESULTS/compile"
compile_one() {  # NAME: one job, its log in $RESULTS/compile/NAME.txt, its status in .rc
  local name=$1 code args
  case $name in
    kernels) args=(-c "${NO_TF/step_time.py/kernels_side_by_side.py}" $KERNEL_ARGS --reps=0) ;;
    jax_pallas_*) args=("${STEP_TIME[@]:1}" --backend=jax --presets="${name#jax_pallas_}" --blstm_implementations pallas --batch_size="$BATCH") ;;
    jax_large_*) args=("${STEP_TIME[@]:1}" --backend=jax --presets="${name#jax_large_}" --batch_size="$LARGE_BATCH") ;;
    jax_package_*) args=("${STEP_TIME[@]:1}" --backend=jax --trainer=package --presets="${name#jax_package_}" --batch_size="$BATCH") ;;
    jax_*) args=("${STEP_TIME[@]:1}" --backend=jax --presets="${name#jax_}" --batch_size="$BATCH") ;;
    torch_package_*) args=("${STEP_TIME[@]:1}" --backend=torch --jit_compile=true --trainer=package --presets="${name#torch_package_}" --batch_size="$BATCH") ;;
    torch_*) args=("${STEP_TIME[@]:1}" --backend=torch --jit_compile=true --presets="${name#torch_}" --batch_size="$BATCH") ;;
  esac
  [[ $name == kernels ]] || args+=(--compile_only)
  set +e
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout -k 10 $((COMPILE_END - SECONDS)) "$PY" "${args[@]}" \
    >"$RESULTS/compile/$name.txt" 2>&1
  code=$?
  set -e
  echo "$code" >"$RESULTS/compile/$name.rc"
  echo "  $name: exit $code ($((SECONDS - START)) s)"
}
for name in "${COMPILE_JOBS[@]}"; do
  while (($(jobs -rp | wc -l) >= ${RB_PARALLEL:-6})); do wait -n || true; done
  compile_one "$name" &
done
wait
for backend in jax torch; do
  rc="$RESULTS/compile/${backend}_bert_$SIZE.rc"
  [[ ! -f $rc || $(cat "$rc") == 0 ]] || {
    tail -n 20 "$RESULTS/compile/${backend}_bert_$SIZE.txt" >&2
    die "bert_$SIZE did not compile under $backend: nothing more is run"
  }
done
failed=$(grep -L '^0$' "$RESULTS"/compile/*.rc | xargs -r -n1 basename | sed 's/\.rc$//' | tr '\n' ' ')
[[ -z $failed ]] || { echo "run.sh: not compiled (see $RESULTS/compile/): $failed" >&2; status=1; }
# compiled PREFIX PRESETS: those of the comma-separated PRESETS whose job PREFIX_<preset>
# compiled (a timed pass would compile the others again, out of its time).
compiled() {
  local preset out=()
  for preset in ${2//,/ }; do
    [[ $(cat "$RESULTS/compile/$1_$preset.rc" 2>/dev/null) != 0 ]] || out+=("$preset")
  done
  (IFS=,; echo "${out[*]}")
}

# -- the recurrences' kernels side by side (benchmarks/kernels_side_by_side.py) -----------
if [[ $(cat "$RESULTS/compile/kernels.rc") == 0 ]]; then
  echo "== recurrence kernels ($((SECONDS - START)) s)"
  set +e
  timeout -k 10 "${RB_KERNELS_S:-45}" "$PY" -c "${NO_TF/step_time.py/kernels_side_by_side.py}" \
    $KERNEL_ARGS --json="$RESULTS/kernels_side_by_side.json" 2>&1 | tee "$RESULTS/log_kernels.txt"
  ((PIPESTATUS[0] == 0)) || { echo "run.sh: the recurrence kernels' benchmark failed" >&2; status=1; }
  set -e
else
  echo "run.sh: the recurrence kernels did not compile: not timed" >&2
  tail -n 20 "$RESULTS/compile/kernels.txt" >&2
fi
# SwishRNN's Triton kernels under PyTorch at the same tilings, against PyTorch's portable
# loop (Triton compiles each in seconds, here, out of this stage's time).
echo "== recurrence kernels under PyTorch ($((SECONDS - START)) s)"
TORCH_KERNELS_ENV=(KERAS_BACKEND=torch)
[[ "$SMOKE" != 1 ]] || TORCH_KERNELS_ENV+=(TRITON_INTERPRET=1)  # a CPU interprets them
set +e
env "${TORCH_KERNELS_ENV[@]}" timeout -k 10 "${RB_KERNELS_TORCH_S:-40}" "$PY" \
  -c "${NO_TF/step_time.py/kernels_side_by_side.py}" --backend=torch $KERNEL_ARGS \
  --json="$RESULTS/kernels_side_by_side_torch.json" 2>&1 | tee "$RESULTS/log_kernels_torch.txt"
((PIPESTATUS[0] == 0)) || { echo "run.sh: the PyTorch kernels' benchmark failed" >&2; status=1; }
set -e

# bench NAME SECONDS PRESETS ARGS...: one timed step_time.py process of the PRESETS
# (ARGS: backend, batch) that is stopped after SECONDS; $RESULTS/step_time_NAME.json keeps
# the presets it finished.
bench() {
  local name=$1 seconds=$2 presets=$3 code
  shift 3
  [[ -n $presets ]] || { echo "run.sh: $name: no preset compiled" >&2; return 0; }
  ((seconds > 20)) || { echo "run.sh: no time left for $name" >&2; status=1; return 0; }
  echo "== $name: --presets=$presets $*, at most $seconds s ($((SECONDS - START)) s so far)"
  rm -f "$RESULTS/step_time_$name.json"
  set +e
  timeout -k 10 "$seconds" "${STEP_TIME[@]}" --presets="$presets" "$@" "${PROFILE[@]}" \
    --json="$RESULTS/step_time_$name.json" \
    2>&1 | tee "$RESULTS/log_$name.txt"
  code=${PIPESTATUS[0]}
  set -e
  ((code == 0)) || { echo "run.sh: $name exited $code (124: out of time)" >&2; status=1; }
}
left() { echo $((BUDGET_S - (SECONDS - START) - 15)); }  # 15 s for the report

# -- JAX, then PyTorch compiled, then eager: deadlines, not fixed shares (time one pass
# leaves over goes to the next) -----------------------------------------------------------
JAX_END=$((SECONDS + $(left) * ${RB_JAX_SHARE:-60} / 100))
LARGE_S=${RB_LARGE_S:-35} PACKAGE_S=${RB_PACKAGE_S:-30}
bench jax $((JAX_END - SECONDS - LARGE_S - PACKAGE_S)) "$(compiled jax "$PRESETS")" --backend=jax \
  --batch_size="$BATCH" "${BLSTM_VARIANTS[@]}"
bench jax_package $((JAX_END - SECONDS - LARGE_S)) "$(compiled jax_package "bert_$SIZE")" \
  --backend=jax --trainer=package --batch_size="$BATCH"
bench jax_large $((JAX_END - SECONDS)) "$(compiled jax_large "bert_$SIZE")" --backend=jax \
  --batch_size="$LARGE_BATCH"
# The package's loop first: it is what `KERAS_BACKEND=torch rbert-pretrain --jit_compile`
# runs, and each compiled pass traces its model again (Inductor's cache keeps kernels only).
TORCH_COMPILED_END=$((SECONDS + $(left) * ${RB_TORCH_COMPILED_SHARE:-50} / 100))
TORCH_PACKAGE_S=${RB_TORCH_PACKAGE_S:-$([[ "$SMOKE" == 1 ]] && echo 150 || echo 45)}  # a CPU traces slowly
bench torch_package "$TORCH_PACKAGE_S" "$(compiled torch_package "bert_$SIZE")" \
  --backend=torch --jit_compile=true --trainer=package --batch_size="$BATCH"
bench torch $((TORCH_COMPILED_END - SECONDS)) "$(compiled torch "$COMPILED")" \
  --backend=torch --jit_compile=true --batch_size="$BATCH"
# swishrnn_base once more on the portable scan after the six: the Triton kernels' gain.
bench torch_eager $(left) "$PRESETS" --backend=torch --batch_size="$BATCH" \
  --swish_rnn_implementations auto portable

"$PY" benchmarks/gpu/table.py --presets="$PRESETS" --size="$SIZE" --batch="${BATCH}x$SEQ" \
  --large_batch="${LARGE_BATCH}x$SEQ" "$RESULTS"/step_time_{jax,jax_package,jax_large,torch,torch_package,torch_eager}.json \
  | tee "$RESULTS/step_time.md"
echo "run.sh: $((SECONDS - START)) s in all, exit $status"
exit $status
