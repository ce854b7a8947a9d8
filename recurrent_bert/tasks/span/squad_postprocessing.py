"""SQuAD span logits → answer texts, n-best lists and v2.0 null odds (what the files hold).

Post-processing: for each window, the n_best_size best start and end positions among its
context pieces are paired (end ≥ start, at most max_answer_length pieces, start having
max context) and scored start_logit + end_logit; candidates from all windows of an
example are ranked together, duplicates of the same text dropped. For v2.0 the null score
is the smallest start_logit[CLS] + end_logit[CLS] over the windows; the question is
predicted unanswerable when null score − best span score > null_score_diff_threshold.

Answers are exact substrings of the original contexts: the features' token_char_start /
token_char_end (`squad_windows`) map pieces back to characters.

Files (`write_squad_predictions`): predictions.json {qid: text}; nbest_predictions.json
{qid: [{text, probability, start_logit, end_logit}, ...]}; null_odds.json {qid: odds}
(v2.0), as google-research/bert writes them and the official v2.0 scorer reads.
"""

import dataclasses
import json
import os
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from recurrent_bert.io_utils import atomic_write_text
from recurrent_bert.tasks.span.squad import SquadExample

# The odds written when no window offers any valid span: "certainly unanswerable".
_NO_SPAN_NULL_ODDS = 1e9


@dataclasses.dataclass
class SquadPredictions:
  """What the official files hold.

  Attributes:
    predictions: question id → answer text ("" = no answer, v2.0 only).
    nbest: question id → up to n_best_size dicts {text, probability, start_logit,
      end_logit}, best first; probabilities are a softmax over the listed scores.
    null_odds: question id → null score − best span score (v2.0 only, else empty).
  """

  predictions: Dict[str, str]
  nbest: Dict[str, List[Dict[str, Any]]]
  null_odds: Dict[str, float]


def _top_indices(logits: np.ndarray, allowed: np.ndarray, count: int) -> np.ndarray:
  """Indices of the `count` largest logits among allowed positions, best first."""
  candidates = np.flatnonzero(allowed)
  order = np.argsort(-logits[candidates], kind="stable")[:count]
  return candidates[order]


def _span_candidates(
    features: Mapping[str, np.ndarray],
    row: int,
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best_size: int,
    max_answer_length: int,
) -> List[Tuple[float, int, int, int]]:
  """(score, row, start, end) of the valid spans among a window's best starts and ends."""
  # Context pieces that cover a character (not SentencePiece's lone "▁").
  in_context = (features["token_char_start"][row] >= 0) & (
      features["token_char_end"][row] > features["token_char_start"][row]
  )
  starts = _top_indices(
      start_logits[row], in_context & (features["token_is_max_context"][row] > 0), n_best_size
  )
  ends = _top_indices(end_logits[row], in_context, n_best_size)
  candidates = []
  for start in starts:
    for end in ends:
      if start <= end < start + max_answer_length:
        candidates.append(
            (float(start_logits[row, start] + end_logits[row, end]), row, int(start), int(end))
        )
  return candidates


def _softmax(scores: Sequence[float]) -> List[float]:
  scores = np.asarray(scores, np.float64)
  exp = np.exp(scores - scores.max())
  return (exp / exp.sum()).tolist()


def postprocess_squad(
    examples: Sequence[SquadExample],
    features: Mapping[str, np.ndarray],
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> SquadPredictions:
  """Turns span logits into answer texts (exact substrings of the original contexts).

  Args:
    examples: the E examples the features were made from.
    features: the dict from `squad_features` (N rows).
    start_logits, end_logits: float [N, T], the model's outputs for those rows.
    n_best_size: starts and ends considered per window, and n-best entries kept.
    max_answer_length: longest answer, in pieces.
    version_2_with_negative: SQuAD 2.0: allow and score "no answer".
    null_score_diff_threshold: predict "" when null score − best span score exceeds it.

  Returns:
    SquadPredictions for every example.
  """
  start_logits = np.asarray(start_logits, np.float64)
  end_logits = np.asarray(end_logits, np.float64)
  rows_of: Dict[int, List[int]] = {}
  for row, example_index in enumerate(features["example_index"].tolist()):
    rows_of.setdefault(example_index, []).append(row)
  if start_logits.shape != features["input_ids"].shape or end_logits.shape != start_logits.shape:
    raise ValueError(
        f"logits {start_logits.shape}/{end_logits.shape} do not match the "
        f"features {features['input_ids'].shape}"
    )

  result = SquadPredictions({}, {}, {})
  for example_index, example in enumerate(examples):
    rows = rows_of.get(example_index, [])
    candidates = []
    for row in rows:
      candidates += _span_candidates(
          features, row, start_logits, end_logits, n_best_size, max_answer_length
      )
    candidates.sort(key=lambda c: -c[0])
    entries: List[Dict[str, Any]] = []
    seen_texts = set()
    for _, row, start, end in candidates:
      if len(entries) == n_best_size:
        break
      char_start = int(features["token_char_start"][row, start])
      char_end = int(features["token_char_end"][row, end])
      text = example.context[char_start:char_end]
      if text in seen_texts:
        continue
      seen_texts.add(text)
      entries.append(
          {
              "text": text,
              "start_logit": float(start_logits[row, start]),
              "end_logit": float(end_logits[row, end]),
          }
      )
    best_span = entries[0] if entries else None

    if version_2_with_negative and rows:
      null_row = min(rows, key=lambda r: start_logits[r, 0] + end_logits[r, 0])
      null_entry = {
          "text": "",
          "start_logit": float(start_logits[null_row, 0]),
          "end_logit": float(end_logits[null_row, 0]),
      }
      null_score = null_entry["start_logit"] + null_entry["end_logit"]
      entries.append(null_entry)
      entries.sort(key=lambda e: -(e["start_logit"] + e["end_logit"]))
      del entries[n_best_size:]
      if best_span is None:
        odds = _NO_SPAN_NULL_ODDS
      else:
        odds = null_score - (best_span["start_logit"] + best_span["end_logit"])
      result.null_odds[example.qas_id] = float(odds)
      prediction = "" if odds > null_score_diff_threshold else best_span["text"]
    else:
      prediction = best_span["text"] if best_span else ""

    if not entries:
      entries = [{"text": "", "start_logit": 0.0, "end_logit": 0.0}]
    for entry, probability in zip(
        entries, _softmax([e["start_logit"] + e["end_logit"] for e in entries])
    ):
      entry["probability"] = probability
    result.predictions[example.qas_id] = prediction
    result.nbest[example.qas_id] = entries
  return result


def _write_json(path: str, obj: Any) -> None:
  # Non-ASCII stays readable; insertion order (best n-best entry first) is kept.
  atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def write_squad_predictions(
    output_dir: str, predictions, version_2_with_negative: bool
) -> Dict[str, str]:
  """Writes predictions.json, nbest_predictions.json and (v2.0) null_odds.json.

  Args:
    output_dir: directory of the files.
    predictions: a `squad_postprocessing.SquadPredictions`.
    version_2_with_negative: also write null_odds.json.

  Returns:
    file name → path written.
  """
  files = {"predictions.json": predictions.predictions, "nbest_predictions.json": predictions.nbest}
  if version_2_with_negative:
    files["null_odds.json"] = predictions.null_odds
  paths = {}
  for name, content in files.items():
    paths[name] = os.path.join(output_dir, name)
    _write_json(paths[name], content)
  return paths
