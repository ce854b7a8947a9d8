"""Where a training step's device time goes: the longest kernels of a short profile.

  profile = kernel_profile.trace("jax", run, steps=3, keep=10)  # run(): 3 steps, waited for
  print("\n".join(kernel_profile.describe(profile, step_ms=19.9)))

Both backends' own profilers, neither TensorFlow nor TensorBoard:

  JAX      `jax.profiler.trace` writes an XSpace (a *.xplane.pb file), which
           `jax.profiler.ProfileData` reads back as planes -> lines -> events (name,
           start_ns, duration_ns, stats). On a GPU the plane "/device:GPU:0" holds one
           line per CUDA stream ("Stream #N(...)") with every kernel and copy the step ran;
           the first device plane is read (the others of a DataParallel run do the same).
           Without a device plane (a CPU), the host plane's XLA ops are read instead: the
           events carrying an `hlo_op` stat, the innermost on each thread that ran them.
  PyTorch  `torch.profiler.profile`: the CUDA kernels when there are any (each kernel's
           device time), else the CPU operators with their self time (time in the
           operator itself, not in the operators it called, so nothing counts twice).

A profile is a plain dict (what `step_time.py --json` stores in a row's "profile"):

  source      where the ops came from: the plane or kind of event, e.g. "/device:GPU:0
              (stream kernels)", "/host:CPU (XLA ops)", "torch cuda kernels"
  steps       training steps traced
  traced_ms   wall time of those steps under the profiler (the call, waited for)
  busy_ms     time in which at least one op ran (the union of their intervals; the sum of
              self times for PyTorch's CPU operators)
  total_ms    the ops' durations summed (above busy_ms where ops overlapped)
  num_ops     distinct op names
  ops         [[name, ms, count], ...] the `keep` longest by total time, all steps
  kinds       {kind: ms} every op's time by the kind its name says (`kind_of`): matmul,
              attention, recurrence, copy, other (elementwise ops and XLA's fusions)

busy_ms per step over the step timed without the profiler is the share of the wall time
the device computed: far below 1, the host (Python, dispatch) is what the step waits for,
not the kernels. Against traced_ms it understates a GPU step under JAX: with a profiler
attached XLA runs the step's command buffers (CUDA graphs) as separate launches.

Standard library at import time; jax or torch only inside the function that traces.
"""

import glob
import os
import tempfile
import time
from typing import Callable, Dict, Iterable, List, Optional, Tuple

# (name, start ns, duration ns): one op's run, in one clock per profile.
Event = Tuple[str, float, float]

# Lines of a device plane that hold the kernels themselves; derived lines ("XLA Ops",
# "XLA Modules", "Steps") repeat the same time and are read only where no stream is.
_STREAM_PREFIX = "Stream"
_DERIVED_OPS_LINE = "XLA Ops"


def busy_ns(events: Iterable[Event]) -> float:
  """Nanoseconds covered by at least one event (the union of [start, start + duration])."""
  total, end = 0.0, None
  for _, start, duration in sorted(events, key=lambda e: e[1]):
    stop = start + duration
    if end is None or start >= end:
      total += duration
      end = stop
    elif stop > end:
      total += stop - end
      end = stop
  return total


def innermost(events: List[Event]) -> List[Event]:
  """The events of one thread that hold no other: a CPU's `while` op runs its body's ops
  inside its own interval on the same thread, and would count them twice."""
  ordered = sorted(events, key=lambda e: (e[1], -e[2]))
  return [
      event
      for event, after in zip(ordered, ordered[1:] + [None])
      if after is None or after[1] >= event[1] + event[2]
  ]


# (kind, substrings of a kernel's lower-cased name), the first match wins: cuBLAS/cuDNN
# GEMMs (nvjet, xmma, cutlass), XLA's GEMM fusions and dots; fused attention kernels;
# the package's Pallas SwishRNN and cuDNN's RNN kernels; copies and memsets.
_KINDS = (
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn_generated")),
    ("matmul", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "dot", "matmul")),
    ("recurrence", ("swish_rnn", "rnn", "lstm")),
    ("copy", ("memcpy", "memset", "copy")),
)


def kind_of(name: str) -> str:
  """The kind of an op from its name: matmul, attention, recurrence, copy or other."""
  lowered = name.lower()
  for kind, parts in _KINDS:
    if any(part in lowered for part in parts):
      return kind
  return "other"


def summarize(
    events: List[Event],
    source: str,
    steps: int,
    traced_s: float,
    keep: int,
    busy: Optional[float] = None,
) -> Dict:
  """The profile dict of the module docstring from the traced events.

  Args:
    events: (name, start_ns, duration_ns) per op run.
    source: where they came from (printed with them).
    steps: training steps traced.
    traced_s: wall seconds of those steps under the profiler.
    keep: the longest op names kept.
    busy: nanoseconds busy, where the union of intervals would be wrong (self times).
  """
  totals: Dict[str, List[float]] = {}
  for name, _, duration in events:
    entry = totals.setdefault(name, [0.0, 0])
    entry[0] += duration
    entry[1] += 1
  ranked = sorted(totals.items(), key=lambda item: -item[1][0])
  kinds: Dict[str, float] = {}
  for name, (ns, _) in totals.items():
    kind = kind_of(name)
    kinds[kind] = kinds.get(kind, 0.0) + 1e-6 * ns
  return {
      "source": source,
      "steps": steps,
      "traced_ms": 1e3 * traced_s,
      "busy_ms": 1e-6 * (busy_ns(events) if busy is None else busy),
      "total_ms": 1e-6 * sum(duration for _, _, duration in events),
      "num_ops": len(totals),
      "ops": [[name, 1e-6 * ns, count] for name, (ns, count) in ranked[:keep]],
      "kinds": dict(sorted(kinds.items(), key=lambda item: -item[1])),
  }


def xspace_events(data) -> Tuple[str, List[Event]]:
  """(source, events) of a `jax.profiler.ProfileData`: the first device plane's kernels,
  else the host's XLA ops (module docstring)."""
  planes = list(data.planes)
  devices = sorted((p for p in planes if p.name.startswith("/device:")), key=lambda p: p.name)
  for plane in devices:
    lines = list(plane.lines)
    streams = [line for line in lines if line.name.startswith(_STREAM_PREFIX)]
    derived = [line for line in lines if line.name == _DERIVED_OPS_LINE]
    chosen, what = (streams, "stream kernels") if streams else (derived, "XLA ops")
    if not chosen:
      chosen, what = lines, "all lines"
    events = [
        (event.name, event.start_ns, event.duration_ns)
        for line in chosen
        for event in line.events
        if event.duration_ns > 0
    ]
    if events:
      return f"{plane.name} ({what})", events
  for plane in planes:
    if not plane.name.startswith("/host:CPU"):
      continue
    events = []
    for line in plane.lines:
      ops = [
          (event.name, event.start_ns, event.duration_ns)
          for event in line.events
          if event.duration_ns > 0 and any(stat[0] == "hlo_op" for stat in event.stats)
      ]
      events += innermost(ops)
    if events:
      return f"{plane.name} (XLA ops)", events
  names = ", ".join(p.name for p in planes) or "none"
  raise ValueError(f"the trace has no device plane and no XLA ops on the host (planes: {names})")


def read_xspace(folder: str) -> Tuple[str, List[Event]]:
  """(source, events) of the newest *.xplane.pb under `folder` (a `jax.profiler.trace`)."""
  import jax

  paths = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
  if not paths:
    raise ValueError(f"jax.profiler.trace wrote no *.xplane.pb under {folder}")
  return xspace_events(jax.profiler.ProfileData.from_file(max(paths, key=os.path.getmtime)))


def _trace_jax(run: Callable[[], None]) -> Tuple[str, List[Event], float, Optional[float]]:
  import jax

  options = jax.profiler.ProfileOptions()
  # Python's own calls are not what is measured, and tracing them slows the host; no HLO
  # protos either: they only make the file larger. (Where a JAX lacks an option, its own.)
  for name, value in (("python_tracer_level", 0), ("enable_hlo_proto", False)):
    if hasattr(options, name):
      setattr(options, name, value)
  with tempfile.TemporaryDirectory() as folder:
    with jax.profiler.trace(folder, profiler_options=options):
      start = time.perf_counter()
      run()
      traced = time.perf_counter() - start
    source, events = read_xspace(folder)
  return source, events, traced, None


def _trace_torch(run: Callable[[], None]) -> Tuple[str, List[Event], float, Optional[float]]:
  import torch
  from torch.autograd import DeviceType
  from torch.profiler import ProfilerActivity

  activities = [ProfilerActivity.CPU]
  if torch.cuda.is_available():
    activities.append(ProfilerActivity.CUDA)
  with torch.profiler.profile(activities=activities) as prof:
    start = time.perf_counter()
    run()
    traced = time.perf_counter() - start
  events = prof.events()
  # time_range is in microseconds.
  kernels = [
      (e.name, 1e3 * e.time_range.start, 1e3 * e.time_range.elapsed_us())
      for e in events
      if e.device_type == DeviceType.CUDA
  ]
  if kernels:
    return "torch cuda kernels", kernels, traced, None
  operators = [
      (e.name, 1e3 * e.time_range.start, 1e3 * e.self_cpu_time_total)
      for e in events
      if e.device_type == DeviceType.CPU and e.self_cpu_time_total > 0
  ]
  # Self times exclude the callees: their sum is the time in operators, nested or not.
  return "torch CPU operators (self time)", operators, traced, sum(e[2] for e in operators)


def trace(backend: str, run: Callable[[], None], steps: int, keep: int = 10) -> Dict:
  """Profiles `run()`, which trains `steps` steps and waits until the device has finished.

  Args:
    backend: "jax" or "torch" (Keras' backend: whose profiler to use).
    run: the traced work; it should already be compiled (one untimed call before).
    steps: training steps `run` trains (for per-step figures).
    keep: the longest op names kept in the profile.

  Returns:
    The profile dict of the module docstring.
  """
  tracers = {"jax": _trace_jax, "torch": _trace_torch}
  if backend not in tracers:
    raise ValueError(f"no kernel profile for backend {backend!r}: jax or torch")
  source, events, traced, busy = tracers[backend](run)
  return summarize(events, source, steps, traced, keep, busy)


def trace_and_print(
    backend: str, run: Callable[[], None], steps: int, keep: int, step_ms: Optional[float] = None
) -> Dict:
  """`trace`, its `describe` lines printed; a profiler that fails (e.g. no profiler
  plugin on the machine) gives {"error": ...}, printed: the step's timing stands."""
  try:
    profile = trace(backend, run, steps, keep)
  except Exception as e:  # a profile explains a timing; it must not lose it
    profile = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
  print("\n".join(describe(profile, step_ms)), flush=True)
  return profile


def describe(profile: Dict, step_ms: Optional[float] = None, width: int = 72) -> List[str]:
  """Printable lines: where the ops came from and the device's busy time, then the longest
  ops: ms per step, share of the step, runs per step; names cut to `width` characters.

  With `step_ms` (the step timed without the profiler) the shares are of that step: under
  a profiler XLA launches a GPU step's kernels one by one instead of replaying its command
  buffers (CUDA graphs), so the traced step has gaps the timed one does not, and only the
  kernels' own durations carry over. Without it they are of the traced step.
  """
  if profile.get("error"):
    return [f"  profile failed: {profile['error']}"]
  steps = profile["steps"]
  traced = profile["traced_ms"] / steps
  busy = profile["busy_ms"] / steps
  if step_ms:
    of_step = f"{busy / step_ms:.0%} of the timed {step_ms:.2f} ms step (traced {traced:.2f})"
  else:
    of_step = f"{busy / traced:.0%} of the traced {traced:.2f} ms/step"
  lines = [
      f"  profile of {steps} steps, {profile['source']}: busy {busy:.2f} ms per step, "
      f"{of_step}; top {len(profile['ops'])} of {profile['num_ops']} ops",
      f"  {'ms/step':>9} {'step':>6} {'runs/step':>9}  name",
  ]
  step = step_ms or traced
  for name, ms, count in profile["ops"]:
    short = name if len(name) <= width else name[: width - 3] + "..."
    lines.append(f"  {ms / steps:9.3f} {ms / steps / step:6.1%} {count / steps:9.1f}  {short}")
  if profile.get("kinds"):  # profiles stored before the kinds were counted have none
    lines.append(
        "  all ops by kind, ms/step: "
        + ", ".join(f"{kind} {ms / steps:.2f}" for kind, ms in profile["kinds"].items())
    )
  return lines
