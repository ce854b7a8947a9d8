"""The report's tokenizer comparison (the demo's --tokenizers): the tokenisation lecture's
WordPiece versus unigram LM versus BPE, the same model and budget for each.

Reads what the comparison's stages wrote: each tokenizer's vocabulary, the held-out
records' stats.json (the dev documents' pieces), the pretraining run's eval_results.json
(held-out MLM loss per piece and per word, accuracy) and its fine-tuning runs (through
the demo's stage results); the dev documents' text for the words. No TensorFlow.

  pieces per word  = pieces of the dev documents (the data tool's input_tokens) / their
                     whitespace-separated words: the same denominator for every tokenizer
  loss per piece   = Σ w·CE / masked pieces
  loss per word    = Σ w·CE / masked words: with whole-word masking a masked word's loss is
                     the sum of its pieces' (recurrent_bert.training.pretraining_eval)
  per text word    = loss per piece x pieces per word: the words are the vocabulary's own
                     above (WordPiece splits at punctuation, SentencePiece at spaces), the
                     whitespace words of the text here, the same for every vocabulary.
Both per-word losses lean to short words: whole-word masking skips a word whose pieces would
overrun the sequence's prediction budget, so long words are masked less than their share.
"""

import json
import os
import statistics
from typing import Dict, List, Optional, Sequence

from recurrent_bert.data import vocab as vocab_lib
from recurrent_bert.demo import claims
from recurrent_bert.demo import claims_report

SECTION_TITLE = "## Tokenizers (the lecture's comparison)"
DISPLAY = {"wordpiece": "WordPiece", "unigram": "unigram LM", "bpe": "BPE"}


def whitespace_words(documents_file: str) -> int:
  """Words separated by whitespace in a documents file (one sentence per line)."""
  with open(documents_file, encoding="utf-8") as f:
    return sum(len(line.split()) for line in f)


def tokenizer_row(tokenizer: str, entry: Dict, words: int) -> Dict:
  """One tokenizer's numbers.

  Args:
    tokenizer: "wordpiece", "unigram" or "bpe".
    entry: the demo's report input of it: "vocab_file", "eval_data" (a glob of the held-out
      records; stats.json beside them), "pretrain_dir", "runs" (fine-tuning runs, each
      with "dev_accuracy", "test_accuracy", "seed").
    words: whitespace words of the dev documents.
  """
  with open(os.path.join(os.path.dirname(entry["eval_data"]), "stats.json"), encoding="utf-8") as f:
    pieces = json.load(f)["input_tokens"]
  with open(os.path.join(entry["pretrain_dir"], "eval_results.json"), encoding="utf-8") as f:
    held_out = json.load(f)
  evaluation = held_out["eval"]
  runs = entry["runs"]
  return {
      "tokenizer": tokenizer,
      "name": DISPLAY.get(tokenizer, tokenizer),
      "vocab_size": vocab_lib.read_vocabulary(entry["vocab_file"]).vocab_size,
      "pieces_per_word": pieces / words if words else float("nan"),
      "eval_mlm_loss": evaluation["mlm_loss"],
      "eval_mlm_loss_per_text_word": (
          evaluation["mlm_loss"] * pieces / words if words else float("nan")
      ),
      "eval_mlm_loss_per_word": evaluation.get("mlm_loss_per_word", float("nan")),
      "eval_mlm_accuracy": evaluation["mlm_accuracy"],
      "eval_mlm_words": evaluation.get("mlm_words"),
      "eval_step": held_out["global_step"],
      "dev_accuracy": [r["dev_accuracy"] for r in runs],
      "test_accuracy": [r["test_accuracy"] for r in runs],
      "seeds": [r["seed"] for r in runs],
  }


def tokenizer_rows(inputs: Dict) -> List[Dict]:
  """The rows of every compared tokenizer, in --tokenizers order."""
  s = inputs["settings"]
  words = whitespace_words(os.path.join(s["work_dir"], "corpus", "dev_documents.txt"))
  return [tokenizer_row(t, inputs["tokenizers"][t], words) for t in s["tokenizers"]]


def unigram_claim(rows: Sequence[Dict], run_seconds: float) -> Optional[claims.Claim]:
  """The lecture's "unigram LM beats BPE downstream" (test accuracy), when both ran."""
  by_name = {r["tokenizer"]: r for r in rows}
  if "unigram" not in by_name or "bpe" not in by_name:
    return None
  ours, theirs = by_name["unigram"]["test_accuracy"], by_name["bpe"]["test_accuracy"]
  return claims.Claim(
      source="tokenisation lecture",
      statement="a unigram LM vocabulary fine-tunes to a higher test accuracy than BPE of "
      "the same size (the same model, pretraining and fine-tuning)",
      evidence=f"{claims.mean_and_spread(ours)} vs {claims.mean_and_spread(theirs)}",
      comparison=claims.compare([(1.0, ours), (-1.0, theirs)]),
      predicted_sign=1,
      seed_seconds=2 * run_seconds,
      unit="fine-tuning seeds per tokenizer",
  )


def _pm(values: Sequence[float]) -> str:
  if not values:
    return "n/a"
  mean = statistics.fmean(values)
  return f"{mean:.3f} ± {statistics.stdev(values):.3f}" if len(values) > 1 else f"{mean:.3f}"


def section_lines(
    rows: Sequence[Dict], claim: Optional[claims.Claim], settings: Dict, entry: Dict
) -> List[str]:
  """The report section (markdown lines).

  Args:
    rows: `tokenizer_rows`.
    claim: `unigram_claim`, or None.
    settings: the demo's settings (as a dict).
    entry: any tokenizer's report input ("preset", "seed", "learning_rate").
  """
  s = settings
  lines = [
      SECTION_TITLE,
      "",
      f"The same model (`{entry['preset']}`, pretraining seed {entry['seed']}) pretrained "
      f"with each vocabulary for {s['pretrain_steps']} steps of {s['batch_size']} x "
      f"{s['seq_length']} pieces, on whole-word-masked records of the train documents "
      "(every piece of a masked word masked), evaluated on the same held-out dev documents "
      "cut by the same tokenizer; then fine-tuned on the task at learning rate "
      f"{entry['learning_rate']:g} with seeds {', '.join(map(str, s['finetune_seeds']))}. "
      f"Every vocabulary has --vocab_size={s['vocab_size']} entries, learned from the same "
      "train documents (WordPiece: the main runs' vocabulary, the others: "
      "rbert-build-vocab --tokenizer=unigram|bpe).",
      "",
      "| tokenizer | vocabulary | pieces per word | held-out MLM loss per piece | "
      "per word | per text word | MLM accuracy | dev accuracy | test accuracy |",
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
  ]
  for r in rows:
    lines.append(
        f"| {r['name']} | {r['vocab_size']:,} | {r['pieces_per_word']:.3f} | "
        f"{r['eval_mlm_loss']:.3f} | {r['eval_mlm_loss_per_word']:.3f} | "
        f"{r['eval_mlm_loss_per_text_word']:.3f} | {r['eval_mlm_accuracy']:.3f} | "
        f"{_pm(r['dev_accuracy'])} | {_pm(r['test_accuracy'])} |"
    )
  lines += [
      "",
      "- *pieces per word*: pieces of the dev documents over their whitespace-separated "
      "words (the same words for every tokenizer).",
      "- *held-out MLM loss per piece*: the mean cross-entropy of a masked piece; it favours "
      "the vocabulary that cuts words finer (each piece is easier to guess). *Per word*: "
      "the summed cross-entropy of a masked word's pieces, averaged over the masked words "
      "(the vocabulary's own words: a WordPiece word is split at punctuation, a "
      "SentencePiece word runs to the next space, so WordPiece counts more, shorter "
      "words and its loss per word comes out lower). *Per text word*: the loss per piece "
      "times the pieces per word: the cross-entropy of a whitespace word of the text, on "
      "words that are the same for every vocabulary. Both lean to short words: whole-word "
      "masking skips a word whose pieces would overrun a sequence's "
      f"{s['max_predictions_per_seq']} predictions, so long words are masked less than "
      "their share. *MLM accuracy*: of the masked pieces. All at the last step.",
      "- *dev / test accuracy*: mean ± sample std over the fine-tuning seeds.",
  ]
  if claim is not None:
    lines += [
        "",
        "The lecture reports the unigram LM up to 1% better than BPE downstream:",
        "",
        claims_report.claims_table([claim]),
    ]
  lines.append("")
  return lines


def write_section(inputs: Dict, run_seconds: float) -> Dict:
  """The section's lines and its results.json entry, from the report's inputs.

  Args:
    inputs: the report's inputs with "tokenizers" ({tokenizer: entry}, see
      `tokenizer_row`, plus "preset", "seed", "learning_rate").
    run_seconds: wall seconds of one fine-tuning run (for the claim's budget).
  """
  rows = tokenizer_rows(inputs)
  claim = unigram_claim(rows, run_seconds)
  entry = next(iter(inputs["tokenizers"].values()))
  return {
      "lines": section_lines(rows, claim, inputs["settings"], entry),
      "results": {
          "rows": rows,
          "claims": [claims_report.as_dict(claim)] if claim else [],
          "preset": entry["preset"],
          "learning_rate": entry["learning_rate"],
      },
  }
