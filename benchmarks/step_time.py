"""One training step's time of every family, on Keras' TensorFlow, JAX or PyTorch backend.

  python benchmarks/step_time.py              # TensorFlow, all families, base, batch 8
  python benchmarks/step_time.py --quick      # tiny presets, batch 8, seq 64: a smoke check
  python benchmarks/step_time.py --backend=jax --presets=bert_base,swishrnn_base \
      --batch_size=64 --dtype=mixed_bfloat16 --peak_tflops=989
  python benchmarks/step_time.py --families=blstm --blstm_implementations scan fused
  python benchmarks/step_time.py --backend=torch --presets=swishrnn_base \
      --swish_rnn_implementations auto portable

A step is one training step of the portable trainer (training/keras_training.py's
`ObjectiveModel`): the pretraining loss (MLM at P positions + NSP; MLM only with
`--no_nsp`), its gradients and the optimizer's update (`create_optimizer`: AdamW or LAMB),
on a synthetic numpy batch. `--trainer=package` (JAX, PyTorch) times the loop the
package's pretraining runs instead (training/jax_loop.py: one jitted step that donates its
state; training/torch_loop.py: autograd, `torch.compile`d with `--jit_compile=true`; both
clip the gradient's global norm to 1 and put a numpy batch on the device each step): what
a user of `KERAS_BACKEND=jax` or `torch` `rbert-pretrain` gets, beside Keras' own trainer.
No tf.data: under JAX and PyTorch nothing imports TensorFlow, which need not be installed.
Each timed call trains K = `--steps_per_call` steps (1: one `train_on_batch`; more: one
`fit` of K steps, the host queueing a step while the device runs the last, as in
training; the package's loop: K of its steps) and waits until the device has finished
them, so a step's time is all of its cost; a row gives the median over `--steps` calls
of the time per step, after `--warmup` untimed calls (the first compiles). Presets run
one after another, each freed before the next (`--round_robin` keeps all of them and
times one call of each per round, so a noisy machine's spikes hit all alike). `--json`
rewrites a file after every preset, so a run cut short keeps the presets it finished.

Per row: ms per step, tokens/s (B·T per step), the ratios to the step of `bert_<size>`
and of `bert_rab_<size>` in the same run (the row's own size), model TFLOPs per step,
their rate and the model FLOPs utilisation against `--peak_tflops`. `--dtype` is the
Keras dtype policy: mixed_bfloat16 computes in bfloat16 on float32 weights. PyTorch runs
eagerly unless `--jit_compile=true` (Keras' trainer then runs its step through
`torch.compile`); the first call's time, compilation included, is logged (first_call_s).
`--profile_top=N` (JAX, PyTorch) traces `--profile_steps` more steps of each preset and
prints the N longest kernels and the device's busy time (kernel_profile.py).

Model FLOPs are counted from the config, never measured (model_flops.py has the formula).
"""

import argparse
import gc
import json
import os
import sys
import time
import traceback
from typing import List, Optional

BACKENDS = ("tensorflow", "jax", "torch")
BACKEND_NAMES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}
DTYPES = ("float32", "bfloat16", "mixed_bfloat16")
PROGRAM = "step_time.py"


def fail(message: str):
  """Bad input: one line on stderr, exit status 2 (argparse's for usage errors)."""
  print(f"{PROGRAM}: {message}", file=sys.stderr)
  sys.exit(2)


def select_backend(argv: List[str]) -> str:
  """The --backend of `argv` (else $KERAS_BACKEND, else tensorflow), set for Keras."""
  pre = argparse.ArgumentParser(add_help=False)
  pre.add_argument("--backend", default=None)
  backend, source = pre.parse_known_args(argv)[0].backend, "--backend"
  if backend is None:
    backend, source = os.environ.get("KERAS_BACKEND") or "tensorflow", "KERAS_BACKEND"
  if backend not in BACKENDS:
    fail(f"{source}={backend!r}: choose one of {', '.join(BACKENDS)}")
  if "keras" in sys.modules and sys.modules["keras"].backend.backend() != backend:
    fail(f"--backend={backend}: keras is already imported with another backend")
  os.environ["KERAS_BACKEND"] = backend
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  return backend


# Keras reads KERAS_BACKEND once, when first imported, and recurrent_bert checks it on
# import: the flag must be in the environment before either is imported.
if __name__ == "__main__":
  select_backend(sys.argv[1:])

# The modules beside this file, also when it runs through runpy (which adds no path).
if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import model_flops  # noqa: E402
from step_inputs import add_implementation_flags  # noqa: E402
from step_inputs import implementation_variants  # noqa: E402
from step_inputs import unknown_implementation  # noqa: E402
from step_trial import Row  # noqa: E402
from step_trial import Trial  # noqa: E402

from recurrent_bert.config import FAMILIES  # noqa: E402
from recurrent_bert.config import PRESETS  # noqa: E402


def device_description(backend: str) -> str:
  """The device the backend computes on, e.g. "gpu: NVIDIA H100 80GB HBM3"."""
  if backend == "jax":
    import jax

    devices = jax.devices()
    return f"{devices[0].platform}: {devices[0].device_kind} (x{len(devices)})"
  if backend == "torch":
    import torch

    if torch.cuda.is_available():
      return f"cuda: {torch.cuda.get_device_name(0)}"
    return "cpu"
  import tensorflow as tf

  gpus = tf.config.list_physical_devices("GPU")
  if gpus:
    return "gpu: " + tf.config.experimental.get_device_details(gpus[0]).get("device_name", "?")
  return "cpu"


def record_failure(row: Row, error: Exception):
  """Keeps the run going (e.g. one preset out of memory) but loudly: the traceback on
  stderr (not for an InputError, e.g. an implementation this backend does not offer:
  its one line says it all), the first line in the table, exit status 1 at the end."""
  from recurrent_bert.errors import InputError

  if not isinstance(error, InputError):
    traceback.print_exc()
  lines = [line for line in str(error).splitlines() if line.strip()] or [""]
  row.error = f"{type(error).__name__}: {lines[0][:200]}"
  print(f"  {row.name}: FAILED {row.error}", flush=True)


def profile_row(row: Row, trial: Trial, args) -> None:
  """With --profile_top: profiles --profile_steps more steps (kernel_profile.py, beside
  this file: put on the path, also when run with runpy) and prints where they went."""
  if not args.profile_top or row.error:
    return
  here = os.path.dirname(os.path.abspath(__file__))
  if here not in sys.path:
    sys.path.insert(0, here)
  import kernel_profile

  run = lambda: trial.train(args.profile_steps)
  row.profile = kernel_profile.trace_and_print(
      args.backend, run, args.profile_steps, args.profile_top, 1000 * row.step_s
  )


def time_and_profile(trial: Trial, row: Row, args, started: float) -> None:
  """The row's --steps timed calls, their line, then its profile (--profile_top)."""
  for _ in range(args.steps):
    seconds, row.loss = trial.call()
    row.times.append(seconds)
  first = "" if row.first_call_s is None else f", first call {row.first_call_s:.1f} s"
  print(
      f"  {row.name}: {1000 * row.step_s:.1f} ms/step, loss {row.loss:.3f} "
      f"({time.perf_counter() - started:.0f} s with compilation{first})",
      flush=True,
  )
  profile_row(row, trial, args)


def free_memory():
  import keras

  keras.backend.clear_session()
  gc.collect()


def measure(rows: List[Row], args, jit_compile: bool, report):
  """Fills each row's step times (or error); `report()` after every finished preset."""
  if args.round_robin and not args.compile_only:
    trials = {}
    for row in rows:
      try:
        trials[row.name] = Trial(row, args, jit_compile)
        trials[row.name].warm_up(args.warmup, row)
      except Exception as e:  # a failed preset (e.g. out of memory) must not stop the rest
        record_failure(row, e)
    for _ in range(args.steps):
      for row in rows:
        if row.name in trials and not row.error:
          seconds, row.loss = trials[row.name].call()
          row.times.append(seconds)
    for row in rows:
      if row.name in trials and args.profile_top and not row.error:
        print(f"  {row.name}:", flush=True)
        profile_row(row, trials[row.name], args)
    report()
    return
  for row in rows:
    started = time.perf_counter()
    try:
      trial = Trial(row, args, jit_compile)
      trial.warm_up(max(args.warmup, 1) if args.compile_only else args.warmup, row)
      if args.compile_only:
        print(f"  {row.name}: compiled, first call {row.first_call_s:.1f} s", flush=True)
      else:
        time_and_profile(trial, row, args, started)
    except Exception as e:  # a failed preset (e.g. out of memory) must not stop the rest
      record_failure(row, e)
    trial = None
    free_memory()
    report()


def summarize(rows: List[Row], args) -> List[dict]:
  """The table's numbers per row (also what --json writes): ratios within this run."""
  by_name = {row.name: row for row in rows}
  out = []
  for row in rows:
    size = row.name.split(" ")[0].rsplit("_", 1)[-1]
    entry = {"preset": row.name, "flops_per_step": row.flops, "error": row.error}
    entry.update(first_call_s=row.first_call_s, profile=row.profile)
    entry.update(dtype_policy=row.dtype_policy, programs=row.programs)
    step = row.step_s
    if step is not None:
      entry.update(step_ms=1000 * step, loss=row.loss, tokens_per_s=_tokens(args) / step)
      entry["tflops_per_s"] = row.flops / step / 1e12
      entry["mfu"] = entry["tflops_per_s"] / args.peak_tflops if args.peak_tflops else None
      for key, reference in (("x_bert", f"bert_{size}"), ("x_bert_rab", f"bert_rab_{size}")):
        ref = by_name.get(reference)
        entry[key] = step / ref.step_s if ref is not None and ref.step_s else None
    out.append(entry)
  return out


def _tokens(args) -> int:
  return args.batch_size * args.seq_length


def _fmt(value, spec):
  return "-" if value is None else format(value, spec)


def print_table(entries: List[dict], header: str):
  print(f"\n{header}")
  print("| preset | ms/step | tokens/s | ×BERT | ×BERT-rab | TFLOP/step | TFLOP/s | MFU | loss |")
  print("|---|---|---|---|---|---|---|---|---|")
  for e in entries:
    tflop = f"{e['flops_per_step'] / 1e12:.3g}"
    if e.get("step_ms") is None:
      print(f"| {e['preset']} | failed: {e['error']} | | | | {tflop} | | | |")
      continue
    print(
        f"| {e['preset']} | {e['step_ms']:.1f} | {e['tokens_per_s']:.0f} | "
        f"{_fmt(e['x_bert'], '.2f')} | {_fmt(e['x_bert_rab'], '.2f')} | {tflop} | "
        f"{e['tflops_per_s']:.3g} | {_fmt(e['mfu'], '.1%')} | {e['loss']:.3f} |"
    )
  print(flush=True)


def parse_args(argv: List[str], backend: str):
  parser = argparse.ArgumentParser(
      prog=PROGRAM, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
  )
  parser.add_argument("--backend", default=backend, help=f"one of {', '.join(BACKENDS)}")
  parser.add_argument("--presets", default="", help="comma-separated preset names")
  parser.add_argument("--quick", action="store_true", help="tiny presets, seq 64")
  parser.add_argument("--size", default=None, help="preset size of --families (base)")
  parser.add_argument("--families", default=",".join(FAMILIES))
  parser.add_argument("--batch_size", type=int, default=8)
  parser.add_argument("--seq_length", type=int, default=None, help="128 (64 with --quick)")
  parser.add_argument("--max_predictions", type=int, default=None, help="ceil(0.15 T)")
  parser.add_argument("--dtype", default="float32", help=f"one of {', '.join(DTYPES)}")
  parser.add_argument("--peak_tflops", type=float, default=0.0, help="for MFU; 0: none")
  parser.add_argument(
      "--steps", "--repeats", type=int, default=None, help="timed calls: 10 (--quick 5)"
  )
  parser.add_argument("--warmup", type=int, default=2, help="untimed calls first")
  parser.add_argument(
      "--steps_per_call",
      type=int,
      default=1,
      help="K training steps per timed call: 1 is train_on_batch, more is one fit of K",
  )
  parser.add_argument(
      "--jit_compile",
      default="auto",
      help="true, false, both (a table each) or auto: true on TensorFlow and JAX, false "
      "on PyTorch (there true is torch.compile, minutes of compilation; Keras' auto is false)",
  )
  parser.add_argument("--no_xla", action="store_true", help="the same as --jit_compile=false")
  parser.add_argument(
      "--trainer",
      default="keras",
      help="keras (Keras' fit / train_on_batch) or package (JAX, PyTorch: the package's own "
      "loop, training/jax_loop.py or torch_loop.py, as rbert-pretrain runs it)",
  )
  parser.add_argument("--no_nsp", action="store_true", help="MLM loss only")
  parser.add_argument("--optimizer", default="adamw", help="adamw or lamb")
  parser.add_argument("--round_robin", action="store_true", help="interleave the presets")
  parser.add_argument(
      "--compile_only",
      action="store_true",
      help="each preset's first call alone, no table: it compiles (with a persistent "
      "compilation cache, e.g. JAX_COMPILATION_CACHE_DIR, a later run reads it back)",
  )
  parser.add_argument("--json", default=None, help="write the rows here after each preset")
  parser.add_argument("--profile_top", type=int, default=0, help="N longest kernels; 0: none")
  parser.add_argument("--profile_steps", type=int, default=3, help="steps traced per profile")
  add_implementation_flags(parser, "time")
  parser.error = fail  # a bad value (e.g. --batch_size=x): one line, not the usage
  args = parser.parse_args(argv)
  if args.dtype not in DTYPES:
    fail(f"--dtype={args.dtype!r}: choose one of {', '.join(DTYPES)}")
  if args.jit_compile not in ("auto", "true", "false", "both"):
    fail(f"--jit_compile={args.jit_compile!r}: choose one of auto, true, false, both")
  if args.trainer not in ("keras", "package"):
    fail(f"--trainer={args.trainer!r}: choose keras or package")
  if args.trainer == "package" and args.backend == "tensorflow":
    fail(
        "--trainer=package: the package's own loops are timed under JAX and PyTorch; "
        "TensorFlow's is tf.distribute's (benchmarks/pretrain_throughput.py)"
    )
  if args.json and args.jit_compile == "both" and not args.no_xla:
    fail("--json: takes one --jit_compile mode, not both")
  if unknown_implementation(args):
    fail(unknown_implementation(args))
  if args.seq_length is None:
    args.seq_length = 64 if args.quick else 128
  if args.max_predictions is None and args.seq_length > 0:
    args.max_predictions = model_flops.default_predictions(args.seq_length)
  if args.steps is None:
    args.steps = 5 if args.quick else 10
  for flag in ("batch_size", "seq_length", "max_predictions", "steps", "steps_per_call"):
    if getattr(args, flag) < 1:
      fail(f"--{flag}={getattr(args, flag)}: must be at least 1")
  if args.warmup < 0:
    fail(f"--warmup={args.warmup}: must be at least 0")
  if (
      args.profile_top < 0
      or args.profile_steps < 1
      or (args.profile_top and args.backend == "tensorflow")
  ):
    fail("--profile_top: at least 0, under JAX or PyTorch only; --profile_steps: at least 1")
  if args.max_predictions >= args.seq_length:
    fail(f"--max_predictions={args.max_predictions}: must be below --seq_length")
  return args


def select_rows(args) -> List[Row]:
  """The rows to time: --presets as given, else --families at --size with the references."""
  if args.presets:
    names = [n for n in args.presets.split(",") if n]
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
      fail(f"--presets: unknown {unknown[0]!r}; choose from {', '.join(sorted(PRESETS))}")
  else:
    size = args.size or ("tiny" if args.quick else "base")
    families = [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
      fail(f"--families: unknown {unknown[0]!r}; choose from {', '.join(FAMILIES)}")
    if f"bert_{size}" not in PRESETS:
      fail(f"--size={size!r}: choose one of tiny, mini, base, large")
    families = [f for f in ("bert", "bert_rab") if f not in families] + families
    names = [f"{family}_{size}" for family in families]
  rows, variants = [], []
  for name in names:
    PRESETS[name].check_sequence_length(args.seq_length, "--seq_length", name)
    for label, variant in implementation_variants(name, PRESETS[name], args):
      flops = model_flops.model_flops(
          variant, args.batch_size, args.seq_length, args.max_predictions, not args.no_nsp
      )
      # "auto" keeps the preset's name, so the ratios and goals find it; the others come
      # after every preset's own row (a pass cut short loses the extras first).
      (rows if label == name else variants).append(Row(label, variant, flops))
  return rows + variants


def main(argv: Optional[List[str]] = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  backend = select_backend(argv)
  args = parse_args(argv, backend)
  try:
    select_rows(args)  # bad input fails here, before Keras starts
  except ValueError as e:  # ConfigError: a sequence longer than the learned positions
    fail(str(e))
  modes = {"true": [True], "false": [False], "both": [False, True]}.get(
      args.jit_compile, [backend != "torch"]
  )
  if args.no_xla:
    modes = [False]

  import keras

  device = device_description(backend)
  failed = False
  for jit in modes:
    rows = select_rows(args)
    steps = (
        f"{args.steps} calls of {args.steps_per_call}" if args.steps_per_call > 1 else args.steps
    )
    header = (
        f"{backend} (keras {keras.__version__}) on {device}: one training step "
        f"(MLM at {args.max_predictions} positions{'' if args.no_nsp else ' + NSP'}, "
        f"{args.optimizer}), batch {args.batch_size} x {args.seq_length} tokens, "
        f"{args.dtype}, jit_compile={jit}, median of {steps} steps after {args.warmup}"
        + (f", the package's {BACKEND_NAMES[backend]} loop" if args.trainer == "package" else "")
    )
    print(f"measuring {len(rows)} presets: {header}", flush=True)

    def report(rows=rows, jit=jit):
      if args.json:
        meta = {k: getattr(args, k) for k in ("batch_size", "seq_length", "dtype", "peak_tflops")}
        meta.update(backend=backend, device=device, keras=keras.__version__, jit_compile=jit)
        meta.update(trainer=args.trainer)
        with open(args.json + ".tmp", "w") as f:
          json.dump(dict(meta, rows=summarize(rows, args)), f, indent=1)
        os.replace(args.json + ".tmp", args.json)

    measure(rows, args, jit, report)
    if not args.compile_only:
      print_table(summarize(rows, args), header)
    failed = failed or any(row.error for row in rows)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
