"""The report of `--pretraining_only`: the papers' MLM claims from the pretraining runs.

What a GPU session runs (benchmarks/gpu/claims.sh): the demo's corpus, vocabulary and
records, every model x pretraining seed, then this report instead of fine-tuning,
export and the full report. It writes to <work_dir>/report/:

  claims.md     the settings and device, the models' held-out MLM losses, and each MLM
                claim with its interval and verdict (`claims.mlm_claims`: TRANS-BLSTM
                against BERT-orig, SwishRNN against BERT-rab, paired by seed)
  mlm_loss.png  training and held-out MLM loss against the step (`figures.plot_mlm_figure`)
  claims.json   the same numbers

No TensorFlow is needed (step times come from TensorBoard events where TensorFlow wrote
them, else they are left out).
"""

import math
import os
import platform
from typing import Dict, List

from recurrent_bert import io_utils
from recurrent_bert.demo import claims
from recurrent_bert.demo import claims_report
from recurrent_bert.demo import figures
from recurrent_bert.demo import plateau
from recurrent_bert.demo import run_results


def _device(backend: str) -> str:
  """What trained the models: JAX's device kind under JAX, PyTorch's CUDA GPU under
  PyTorch on one, else the host's CPU."""
  try:
    if backend == "jax":
      import jax

      device = jax.devices()[0]
      return f"{device.device_kind} x {jax.device_count()} ({device.platform}, JAX)"
    if backend == "torch":
      import torch

      if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (cuda, PyTorch)"
  except Exception:  # pylint: disable=broad-except  # no library or device: name the host
    pass
  return f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"


def _table(rows: List[Dict]) -> List[str]:
  lines = [
      "| model | preset | parameters | held-out MLM loss | held-out MLM accuracy | s/step | "
      "flagged runs |",
      "|---|---|---:|---|---|---:|---|",
  ]
  for r in rows:
    step = r["pretrain_seconds_per_step"]
    lines.append(
        f"| {r['model']} | {r['preset']} | {r['parameters']:,} | "
        f"{claims.mean_and_spread(r['eval_mlm_loss'])} | "
        f"{claims.mean_and_spread(r['eval_mlm_accuracy'])} | "
        + (f"{step:.4f}" if math.isfinite(step) else "n/a")
        + f" | {claims.flagged_runs([r]) or '—'} |"
    )
  return lines


def write_pretraining_report(inputs: Dict) -> Dict:
  """Writes claims.md, mlm_loss.png and claims.json; returns their paths and the claims.

  `inputs`: "settings" (the demo's Settings as a dict), "results" ({stage: result}),
  "timings" ([{stage, status, seconds, ...}]), "pretrain_dirs" ({preset: {seed: dir}}),
  "out_dir" (as the full report's).
  """
  s = inputs["settings"]
  out_dir = inputs["out_dir"]
  os.makedirs(out_dir, exist_ok=True)
  rows = [run_results.pretraining_row(inputs, preset) for preset in s["presets"]]
  unigram = plateau.held_out_unigram(inputs)
  plateau.flag_rows(rows, unigram[0])
  png = figures.plot_mlm_figure(rows, s, out_dir)
  checked = claims.mlm_claims(rows, {r["preset"]: r["pretrain_seconds"] for r in rows})
  device = _device(s.get("backend", "tensorflow"))
  lines = [
      "# The papers' MLM claims",
      "",
      f"{len(rows)} models at size {s['size']}, {len(s['pretrain_seeds'])} pretraining "
      f"seeds each, {s['pretrain_steps']} steps x {s['batch_size']} sequences x "
      f"{s['seq_length']} tokens, backend {s.get('backend', 'tensorflow')}, on {device}. "
      "Held-out: the same records of held-out documents for every model, at the last step.",
      "",
      *_table(rows),
      "",
      "## Claims",
      "",
      *claims_report.claims_section(checked, s),
      "",
      plateau.describe_rule(*unigram),
      "",
      f"![MLM loss]({os.path.basename(png)})",
      "",
  ]
  claims_md = os.path.join(out_dir, "claims.md")
  io_utils.atomic_write_text(claims_md, "\n".join(lines))
  claims_json = os.path.join(out_dir, "claims.json")
  io_utils.atomic_write_json(
      claims_json,
      {
          "device": device,
          "models": [
              {k: v for k, v in r.items() if k not in ("train_curves", "eval_curves")} for r in rows
          ],
          "claims": [claims_report.as_dict(c) for c in checked],
          "unigram_plateau_loss": unigram[0],
          "settings": s,
          "stage_timings": inputs["timings"],
      },
  )
  return {
      "claims_md": claims_md,
      "mlm_loss_png": png,
      "claims_json": claims_json,
      "claims": [f"{c.verdict}: {c.statement}" for c in checked],
  }
