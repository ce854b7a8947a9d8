"""Held-out pretraining results, whichever backend computed the sums.

`results_from_sums` turns the evaluation's summed statistics into the reported metrics
(the formulas are in `pretraining_eval`'s docstring); `record_eval_results` writes them
where a pretraining model_dir keeps them (eval_results.json, a metrics.jsonl row, events).
The TensorFlow evaluator (`pretraining_eval`) and JAX's and PyTorch's
(`numpy_pretraining`) call these, so their files are the same. This module imports no
TensorFlow.
"""

import math
import os
import sys
from typing import Callable, Dict, List, Optional

from absl import logging

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert.data import tfrecord_frames
from recurrent_bert.data import vocab as vocab_lib
from recurrent_bert.training import metric_sums

EVAL_SPLIT = "eval"


def results_from_sums(sums: Dict[str, float], num_steps: int, use_nsp: bool) -> Dict[str, float]:
  """mlm_loss, mlm_accuracy, mlm_perplexity, (nsp_loss, nsp_accuracy,) loss, and the
  num_examples / num_predictions they are over; with `mlm_words` in the sums,
  mlm_loss_per_word and mlm_words."""
  results = metric_sums.summarize(sums, num_steps, use_nsp)
  results.update(metric_sums.per_word(sums))
  results["mlm_perplexity"] = math.exp(min(results["mlm_loss"], 700.0))
  results["num_examples"] = sums["num_examples"]
  results["num_predictions"] = sums["mlm_weight_sum"]
  return results


def record_eval_results(
    model_dir: str,
    step: int,
    checkpoint: str,
    results: Dict[str, float],
    write_events: Optional[Callable[[Dict[str, float]], None]] = None,
) -> Dict:
  """Writes one evaluation where fine-tuning writes its own (call on the chief only).

  `write_events({"eval/<metric>": value})` at `step` (TensorBoard, where installed), a
  metrics.jsonl row {"step", "eval/<metric>": ...}, and model_dir/eval_results.json
  (replaced atomically): {"task": "pretraining", "global_step", "checkpoint",
  "main_metric": "mlm_loss", "eval_splits": ["eval"], "eval": results,
  "main_metric_value"}.

  Returns:
    The eval_results.json content.
  """
  if write_events is not None:
    write_events({f"{EVAL_SPLIT}/{name}": value for name, value in results.items()})
  row = {"step": step, **{layout.EVAL_METRICS_PREFIX + k: v for k, v in results.items()}}
  io_utils.append_metrics_rows(model_dir, [row])
  summary = {
      "task": "pretraining",
      "global_step": step,
      "checkpoint": checkpoint,
      "main_metric": "mlm_loss",
      "eval_splits": [EVAL_SPLIT],
      EVAL_SPLIT: results,
      "main_metric_value": results["mlm_loss"],
  }
  io_utils.atomic_write_json(os.path.join(model_dir, layout.EVAL_RESULTS_FILE), summary)
  return summary


def eval_word_starts(settings, vocab_size: int) -> Optional[List[bool]]:
  """Per token id whether it starts a word (for the held-out loss per word): from the
  settings' vocab_file, else the vocabulary recorded in model_dir; None when neither is
  there. Ids past the vocabulary (a larger vocab_size) count as words."""
  vocab_file = settings.vocab_file
  if not vocab_file:
    info = layout.read_tokenizer_info(settings.model_dir)
    recorded = os.path.join(settings.model_dir, info.vocab_file if info else layout.VOCAB_FILE)
    vocab_file = recorded if layout.isfile(recorded) else None
  if not vocab_file:
    return None
  starts = list(vocab_lib.read_vocabulary(vocab_file).word_starts)
  return starts + [True] * (vocab_size - len(starts))


def report_skipped(skipped) -> None:
  """The end-of-run line of skipped damaged records (stderr and the log)."""
  if skipped is not None:
    for line in tfrecord_frames.describe(skipped):
      logging.warning("%s", line)
      print(line, file=sys.stderr)


def train_and_export(
    trainer, settings, evaluate, skipped, fresh: bool, restore_init, export
) -> dict:
  """The end both pretraining runners share: --init_checkpoint for a fresh run, the
  training run (evaluating as --mode says), the skipped-records line, the encoder export.

  Args:
    trainer: a `driver.TrainingDriver`.
    settings: the run's `PretrainSettings`.
    evaluate: evaluate(step) -> results, or None.
    skipped: the run's `SkippedRecords` (--skip_bad_records) or None.
    fresh: no checkpoint to resume from (only then is --init_checkpoint read).
    restore_init: restore_init(path) -> what was read, for --init_checkpoint.
    export: export(info) -> the export's path, on the chief only (None elsewhere).

  Returns:
    The final training metrics.
  """
  s = settings
  if s.init_checkpoint and fresh:
    # Only for a fresh run: a resumed run continues from its own checkpoint.
    logging.info("initialised weights from %s", restore_init(s.init_checkpoint))
  try:
    final = trainer.run(evaluate if s.mode == "train_and_eval" else None, s.eval_every_steps)
  finally:
    report_skipped(skipped)
  if export is not None:
    info = {
        "global_step": trainer.current_step(),
        "source_checkpoint": trainer.latest_checkpoint(),
        "final_metrics": final,
    }
    logging.info("encoder exported to %s", export(info))
  return final
