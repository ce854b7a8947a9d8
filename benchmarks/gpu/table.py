"""One table from the `--json` files of benchmarks/step_time.py, one column group per file.

  python benchmarks/gpu/table.py --presets=bert_base,bert_rab_base step_time_jax.json \
      step_time_torch.json

A preset missing from a file (its process was stopped, or never started) reads "not run";
a missing file leaves its backend's columns so. Below the table, the issue's targets from
the papers' accelerator figures, checked on every backend that has both numbers.
Standard library only: it runs after the backends' processes, wherever they ran.
"""

import argparse
import json
import os
import sys

NAMES = {"jax": "JAX", "torch": "PyTorch", "tensorflow": "TensorFlow"}
# (preset, reference, column, at most): the targets for the base size.
TARGETS = (
    ("swishrnn_base", "bert_rab_base", "x_bert_rab", 1.1),
    ("trans_blstm_2_base", "bert_base", "x_bert", 2.4),
)
MFU_TARGET = ("bert_base", "jax", 0.40)


def load(path):
  """(backend name, {preset: row}, the file's settings) or None for a missing file."""
  if not os.path.exists(path):
    return None
  with open(path) as f:
    data = json.load(f)
  return data["backend"], {row["preset"]: row for row in data["rows"]}, data


def cell(row):
  if row is None:
    return ["not run", "", "", ""]
  if row.get("step_ms") is None:
    return [f"failed: {row['error']}", "", "", ""]
  fmt = lambda v, spec: "-" if v is None else format(v, spec)
  return [
      f"{row['step_ms']:.1f}",
      fmt(row["x_bert"], ".2f"),
      fmt(row["x_bert_rab"], ".2f"),
      fmt(row["mfu"], ".1%"),
  ]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--presets", required=True, help="the rows, in order")
  parser.add_argument("files", nargs="+", help="step_time.py --json files")
  args = parser.parse_args(argv)
  presets = [p for p in args.presets.split(",") if p]
  loaded = [load(path) for path in args.files]
  present = [x for x in loaded if x is not None]
  if present:
    meta = present[0][2]
    print(
        f"\nOne training step (MLM + NSP, AdamW) on {meta['device']}, batch "
        f"{meta['batch_size']} x {meta['seq_length']} tokens, {meta['dtype']}, MFU against "
        f"{meta['peak_tflops']:g} TFLOP/s (keras {meta['keras']})"
    )
  header, columns = ["preset"], []
  for path, entry in zip(args.files, loaded):
    name = NAMES.get(entry[0], entry[0]) if entry else os.path.basename(path)
    header += [f"{name} ms", "×BERT", "×BERT-rab", "MFU"]
    columns.append(entry[1] if entry else {})
  print("| " + " | ".join(header) + " |")
  print("|" + "---|" * len(header))
  for preset in presets:
    cells = [preset]
    for rows in columns:
      cells += cell(rows.get(preset))
    print("| " + " | ".join(cells) + " |")
  print()
  for entry in present:
    backend, rows, _ = entry
    for preset, reference, column, limit in TARGETS:
      value = (rows.get(preset) or {}).get(column)
      if value is not None:
        verdict = "met" if value <= limit else "NOT met"
        print(
            f"{NAMES.get(backend, backend)}: {preset} {value:.2f}x {reference} "
            f"(target <= {limit}x): {verdict}"
        )
    preset, target_backend, limit = MFU_TARGET
    mfu = (rows.get(preset) or {}).get("mfu")
    if backend == target_backend and mfu is not None:
      verdict = "met" if mfu >= limit else "NOT met"
      print(f"{NAMES[backend]}: {preset} MFU {mfu:.1%} (target >= {limit:.0%}): {verdict}")
  return 0 if present else 1


if __name__ == "__main__":
  sys.exit(main())
