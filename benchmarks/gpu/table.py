"""The GPU benchmark's report from the `--json` files of benchmarks/step_time.py: tables,
the issue's goals checked, and where each preset's step time goes.

  python benchmarks/gpu/table.py --presets=bert_base,bert_rab_base step_time_jax.json \
      step_time_jax_256.json step_time_torch.json step_time_torch_eager.json

One table per batch shape (batch x tokens), one column group per file of that shape
("JAX", "JAX package loop" (step_time.py --trainer=package), "PyTorch compiled",
"PyTorch eager"): ms per step, the ratios to bert and bert_rab of the same size, MFU. A
preset missing from a file (its process was stopped, or never started) reads "not run"; a
missing file leaves its columns so; a file's rows beyond the presets (a preset timed again
on another implementation, "swishrnn_base [portable]") follow them. Then:

  goals     each goal met / NOT met with the measured value, or "not measured": MFU of
            bert at --batch and --large_batch (against the run's --peak_tflops, 989 on an
            H100 or H200), the recurrent presets' step time against their baselines (in
            each pass that was to time the preset)
  first     the first call of every preset (compilation and K steps), seconds
  profiles  per preset, the longest kernels of its short profile (step_time.py
            --profile_top; benchmarks/kernel_profile.py prints them)

Standard library only: it runs after the backends' processes, wherever they ran.
"""

import argparse
import json
import os
import sys
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kernel_profile  # beside this folder; the standard library only at import

NAMES = {"jax": "JAX", "torch": "PyTorch", "tensorflow": "TensorFlow"}
# The goals, by family at --size. (family, reference family, the file's ratio
# column, at most), at --batch on every backend that ran both presets.
RATIO_GOALS = (
    ("bert_rab", "bert", "x_bert", 1.05),
    ("swishrnn", "bert_rab", "x_bert_rab", 1.1),
    ("trans_blstm_2", "bert", "x_bert", 2.4),
    ("trans_blstm_small_2", "bert", "x_bert", 1.5),
    ("blstm", "bert", "x_bert", 1.5),
)
# (backend, family, "batch" or "large_batch", at least): model FLOPs utilisation.
MFU_GOALS = (
    ("jax", "bert", "batch", 0.35),
    ("jax", "bert", "large_batch", 0.45),
    ("torch", "bert", "batch", 0.25),
)


class Run:
  """One step_time.py --json file: its backend, mode, batch shape and rows by preset."""

  def __init__(self, path: str):
    self.path = path
    self.meta: Optional[dict] = None
    self.rows: Dict[str, dict] = {}
    if os.path.exists(path):
      with open(path) as f:
        self.meta = json.load(f)
      self.rows = {row["preset"]: row for row in self.meta["rows"]}

  @property
  def shape(self) -> Optional[Tuple[int, int]]:
    return (self.meta["batch_size"], self.meta["seq_length"]) if self.meta else None

  @property
  def backend(self) -> Optional[str]:
    return self.meta["backend"] if self.meta else None

  @property
  def name(self) -> str:
    """ "JAX", "PyTorch compiled", "PyTorch eager" (the file's name when it is missing)."""
    if not self.meta:
      return os.path.basename(self.path)
    name = NAMES.get(self.backend, self.backend)
    if self.backend == "torch":  # JAX and TensorFlow's XLA rows say nothing more
      name += " compiled" if self.meta.get("jit_compile") else " eager"
    if self.meta.get("trainer") == "package":  # the package's own loop, not Keras' fit
      name += " package loop"
    return name


def shape_text(shape: Optional[Tuple[int, int]]) -> str:
  return "?" if shape is None else f"{shape[0]}x{shape[1]}"


def parse_shape(text: str) -> Tuple[int, int]:
  """ "64x128" -> (64, 128)."""
  batch, length = text.lower().split("x")
  return int(batch), int(length)


def cells(row: Optional[dict], dtype: Optional[str] = None) -> List[str]:
  """A pass's four cells of one preset; a row built under another policy than its run's
  --dtype says so beside its time."""
  if row is None or (row.get("step_ms") is None and not row.get("error")):
    return ["not run", "", "", ""]  # not reached (a pass cut off) or not asked for
  if row.get("step_ms") is None:
    return [f"failed: {row['error']}", "", "", ""]
  fmt = lambda v, spec: "-" if v is None else format(v, spec)
  policy = row.get("dtype_policy")
  built = f" (built in {policy}, not {dtype})" if dtype and policy and policy != dtype else ""
  return [
      f"{row['step_ms']:.1f}{built}",
      fmt(row.get("x_bert"), ".2f"),
      fmt(row.get("x_bert_rab"), ".2f"),
      fmt(row.get("mfu"), ".1%"),
  ]


def print_tables(runs: List[Run], presets: List[str]) -> None:
  """One table per batch shape, in the order the shapes first appear (missing files with
  the first); the first lists every preset, the others those their files ran."""
  shapes: List[Optional[Tuple[int, int]]] = []
  for run in runs:
    if run.shape not in shapes and run.shape is not None:
      shapes.append(run.shape)
  for i, shape in enumerate(shapes or [None]):
    group = [r for r in runs if r.shape == shape or (i == 0 and r.shape is None)]
    meta = next((r.meta for r in group if r.meta), None)
    if meta:
      print(
          f"\nOne training step (MLM + NSP, AdamW) on {meta['device']}, batch "
          f"{shape_text(shape)} tokens, {meta['dtype']}, MFU against "
          f"{meta['peak_tflops']:g} TFLOP/s (keras {meta['keras']})"
      )
    rows = presets if i == 0 else [p for p in presets if any(p in r.rows for r in group)]
    # Rows beyond the presets (a preset once more on another implementation, "name [impl]",
    # step_time.py --swish_rnn_implementations) follow them, in the files' order.
    rows = rows + [
        name for r in group for name in r.rows if name not in presets and name not in rows
    ]
    header = ["preset"]
    for run in group:
      header += [f"{run.name} ms", "×BERT", "×BERT-rab", "MFU"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for preset in rows:
      line = [preset]
      for run in group:
        line += cells(run.rows.get(preset), (run.meta or {}).get("dtype"))
      print("| " + " | ".join(line) + " |")


def goal_lines(runs: List[Run], size: str, shapes: Dict[str, Tuple[int, int]]) -> List[str]:
  """One line per goal and run it applies to: met, NOT met or not measured."""
  lines = []
  for backend, family, which, limit in MFU_GOALS:
    preset, shape = f"{family}_{size}", shapes[which]
    goal = f"{preset} MFU at {shape_text(shape)} (goal >= {limit:.0%})"
    matching = [r for r in runs if r.backend == backend and r.shape == shape]
    if not matching:
      lines.append(f"{NAMES[backend]}: {goal}: not measured (no {NAMES[backend]} run)")
    for run in matching:
      row = run.rows.get(preset) or {}
      mfu, peak = row.get("mfu"), run.meta["peak_tflops"]
      if mfu is None:
        why = "no --peak_tflops" if row.get("step_ms") and not peak else "not run or failed"
        lines.append(f"{run.name}: {goal}: not measured ({why})")
      else:
        verdict = "met" if mfu >= limit else "NOT met"
        lines.append(f"{run.name}: {goal}: {mfu:.1%} of {peak:g} TFLOP/s: {verdict}")
  for family, reference, column, limit in RATIO_GOALS:
    preset, ref = f"{family}_{size}", f"{reference}_{size}"
    goal = f"{preset} <= {limit}x {ref} at {shape_text(shapes['batch'])}"
    # The passes that were to time the preset (one cut off before it still lists it).
    matching = [r for r in runs if r.shape == shapes["batch"] and preset in r.rows]
    if not matching:
      lines.append(f"{goal}: not measured (no pass at that batch timed {preset})")
    for run in matching:
      value = (run.rows.get(preset) or {}).get(column)
      if value is None:
        lines.append(f"{run.name}: {goal}: not measured (one of them not run or failed)")
      else:
        verdict = "met" if value <= limit else "NOT met"
        lines.append(f"{run.name}: {goal}: {value:.2f}x: {verdict}")
  return lines


def first_call_lines(runs: List[Run], presets: List[str]) -> List[str]:
  lines = []
  for run in runs:
    found = [(p, run.rows[p].get("first_call_s")) for p in presets if p in run.rows]
    found = [f"{p} {s:.1f}" for p, s in found if s is not None]
    if found:
      lines.append(f"{run.name} {shape_text(run.shape)}: " + ", ".join(found))
  return lines


def profile_lines(runs: List[Run], presets: List[str]) -> List[str]:
  lines = []
  for run in runs:
    for preset in presets:
      row = run.rows.get(preset) or {}
      if row.get("profile"):
        lines.append(f"{run.name} {shape_text(run.shape)}, {preset}:")
        lines += kernel_profile.describe(row["profile"], row.get("step_ms"))
  return lines


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--presets", required=True, help="the rows, in order")
  parser.add_argument("--size", default="base", help="the presets' size the goals name")
  parser.add_argument("--batch", default="64x128", help="batch x tokens of most goals")
  parser.add_argument("--large_batch", default="256x128", help="of the large-batch MFU goal")
  parser.add_argument("files", nargs="+", help="step_time.py --json files")
  args = parser.parse_args(argv)
  presets = [p for p in args.presets.split(",") if p]
  shapes = {"batch": parse_shape(args.batch), "large_batch": parse_shape(args.large_batch)}
  runs = [Run(path) for path in args.files]
  print_tables(runs, presets)
  present = [r for r in runs if r.meta]
  for title, lines in (
      ("Goals", goal_lines(present, args.size, shapes)),
      ("First call, compilation included (s)", first_call_lines(present, presets)),
      ("Where the time goes: each preset's longest kernels", profile_lines(present, presets)),
  ):
    if lines:
      print(f"\n{title}:")
      print("\n".join(lines))
  return 0 if present else 1


if __name__ == "__main__":
  sys.exit(main())
