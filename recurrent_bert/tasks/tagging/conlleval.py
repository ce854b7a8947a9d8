"""Chunk precision / recall / F1 as the official CoNLL `conlleval` script computes them.

A chunk (a named entity) is a run of tokens that the script's chunk-boundary rules group,
read from tags PREFIX-TYPE ("B-PER") and "O". Between the previous token's tag and this
one's, with the boundary between sentences (and the start and end of each) read as "O":

  a chunk ENDS    after B-/I- when this tag is B-, S- or O, or of another type;
                  always after E- and S-;          never after O.
  a chunk STARTS  at B- and S-; at I-/E- after O, E- or S-, or after another type;
                  never at O.

On IOB1 and IOB2 tags (B-, I-, O) these are exactly the rules of the script's
startOfChunk / endOfChunk, so e.g. I-PER after O starts a chunk (IOB1), B-PER after I-PER
starts a new one, and B-PER I-ORG is two chunks. The script predates IOBES: it has no S-
and reads E- as IOE's "end before a chunk of the same type"; for E-/S- tags this module
follows the IOBES reading of seqeval (and of the script's Python ports) instead.

A predicted chunk is correct if a gold chunk has the same type, first and last token.
Scores are in percent, as the script prints them (but not rounded):

  precision  100 · correct / predicted chunks   (0 when nothing is predicted)
  recall     100 · correct / gold chunks        (0 when there is no gold chunk)
  f1         2 · precision · recall / (precision + recall)   (0 when both are 0)
  accuracy   100 · tokens whose whole tag is right / tokens

overall and per chunk type (`<TYPE>_precision`, ...; the types of gold or predicted
chunks). `ChunkCounts` holds the raw counts, so counts of shards or replicas add up
exactly (`a + b`) before scoring.
"""

import collections
import dataclasses
from typing import Dict, List, Mapping, Sequence, Tuple


@dataclasses.dataclass(frozen=True)
class ChunkCounts:
  """The counts conlleval scores from; `+` adds two (shards, replicas).

  Attributes:
    gold: chunk type → chunks in the gold tags (types with 0 are left out).
    predicted: chunk type → chunks in the predicted tags.
    correct: chunk type → predicted chunks that are gold chunks.
    num_tokens: tokens compared.
    num_correct_tokens: tokens whose predicted tag equals the gold tag.
  """

  gold: Mapping[str, int] = dataclasses.field(default_factory=dict)
  predicted: Mapping[str, int] = dataclasses.field(default_factory=dict)
  correct: Mapping[str, int] = dataclasses.field(default_factory=dict)
  num_tokens: int = 0
  num_correct_tokens: int = 0

  def __add__(self, other: "ChunkCounts") -> "ChunkCounts":
    return ChunkCounts(
        gold=_add(self.gold, other.gold),
        predicted=_add(self.predicted, other.predicted),
        correct=_add(self.correct, other.correct),
        num_tokens=self.num_tokens + other.num_tokens,
        num_correct_tokens=self.num_correct_tokens + other.num_correct_tokens,
    )

  @property
  def types(self) -> Tuple[str, ...]:
    """The chunk types of gold or predicted chunks, sorted (the script's per-type rows)."""
    return tuple(sorted(set(self.gold) | set(self.predicted)))

  def scores(self) -> Dict[str, float]:
    """precision, recall, f1, accuracy, <TYPE>_{precision,recall,f1} (percent) and the
    counts num_gold_chunks, num_predicted_chunks, num_correct_chunks, num_tokens."""
    gold, predicted, correct = (sum(c.values()) for c in (self.gold, self.predicted, self.correct))
    result = dict(zip(("precision", "recall", "f1"), _prf(correct, predicted, gold)))
    result["accuracy"] = (
        100.0 * self.num_correct_tokens / self.num_tokens if self.num_tokens else 0.0
    )
    for type_ in self.types:
      p, r, f = _prf(
          self.correct.get(type_, 0), self.predicted.get(type_, 0), self.gold.get(type_, 0)
      )
      result.update({f"{type_}_precision": p, f"{type_}_recall": r, f"{type_}_f1": f})
    result.update(
        num_gold_chunks=float(gold),
        num_predicted_chunks=float(predicted),
        num_correct_chunks=float(correct),
        num_tokens=float(self.num_tokens),
    )
    return result


def _add(a: Mapping[str, int], b: Mapping[str, int]) -> Dict[str, int]:
  total = collections.Counter(a) + collections.Counter(b)  # drops zero counts
  return dict(sorted(total.items()))


def _prf(correct: int, predicted: int, gold: int) -> Tuple[float, float, float]:
  """(precision, recall, F1) in percent, 0 where the script prints 0 (module docstring)."""
  precision = 100.0 * correct / predicted if predicted else 0.0
  recall = 100.0 * correct / gold if gold else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return precision, recall, f1


def split_tag(tag: str) -> Tuple[str, str]:
  """("O", "") for "O", else (prefix, type) of "B-PER" → ("B", "PER").

  Raises:
    ValueError: not O and not B-/I-/E-/S- followed by a type.
  """
  if tag == "O":
    return "O", ""
  prefix, dash, type_ = tag.partition("-")
  if not (dash and type_ and prefix in ("B", "I", "E", "S")):
    raise ValueError(f"tag {tag!r} is not O or B-/I-/E-/S- and a type")
  return prefix, type_


def _chunk_ends(prev: str, prev_type: str, tag: str, type_: str) -> bool:
  """Whether a chunk ends between a token tagged (prev, prev_type) and one tagged (tag, type_)."""
  if prev == "O":
    return False
  return prev in ("E", "S") or tag in ("B", "S", "O") or type_ != prev_type


def _chunk_starts(prev: str, prev_type: str, tag: str, type_: str) -> bool:
  """Whether a chunk starts at a token tagged (tag, type_) after one tagged (prev, prev_type)."""
  if tag == "O":
    return False
  return tag in ("B", "S") or prev in ("O", "E", "S") or type_ != prev_type


def chunk_spans(tags: Sequence[str]) -> List[Tuple[str, int, int]]:
  """The chunks of one sentence's tags: (type, first token, last token + 1), in order.

  Raises:
    ValueError: a malformed tag (`split_tag`).
  """
  spans = []
  prev, prev_type, start = "O", "", 0
  for i, tag in enumerate([*tags, "O"]):  # the sentence end is read as "O"
    prefix, type_ = split_tag(tag)
    if _chunk_ends(prev, prev_type, prefix, type_):
      spans.append((prev_type, start, i))
    if _chunk_starts(prev, prev_type, prefix, type_):
      start = i
    prev, prev_type = prefix, type_
  return spans


def conlleval_counts(
    gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
) -> ChunkCounts:
  """Counts chunks and tokens of sentences' gold and predicted tags (module docstring).

  Args:
    gold: per sentence, its gold tags.
    predicted: per sentence, the predicted tags, as many as its gold tags.

  Raises:
    ValueError: different numbers of sentences or of tags in a sentence, or a malformed tag.
  """
  if len(gold) != len(predicted):
    raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted ones")
  gold_chunks, predicted_chunks, correct_chunks = (collections.Counter() for _ in range(3))
  num_tokens = num_correct_tokens = 0
  for n, (gold_tags, predicted_tags) in enumerate(zip(gold, predicted)):
    if len(gold_tags) != len(predicted_tags):
      raise ValueError(
          f"sentence {n}: {len(gold_tags)} gold tags but {len(predicted_tags)} predicted ones"
      )
    gold_spans, predicted_spans = chunk_spans(gold_tags), chunk_spans(predicted_tags)
    gold_chunks.update(span[0] for span in gold_spans)
    predicted_chunks.update(span[0] for span in predicted_spans)
    correct_chunks.update(span[0] for span in set(gold_spans) & set(predicted_spans))
    num_tokens += len(gold_tags)
    num_correct_tokens += sum(g == p for g, p in zip(gold_tags, predicted_tags))
  return ChunkCounts(
      gold=dict(sorted(gold_chunks.items())),
      predicted=dict(sorted(predicted_chunks.items())),
      correct=dict(sorted(correct_chunks.items())),
      num_tokens=num_tokens,
      num_correct_tokens=num_correct_tokens,
  )


def conlleval_scores(
    gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
) -> Dict[str, float]:
  """`conlleval_counts(gold, predicted).scores()`: the script's numbers, in percent."""
  return conlleval_counts(gold, predicted).scores()
