"""conlleval chunk metrics against two references: seqeval 1.2.2 (default mode, its
conlleval-compatible one) and a transcription, written here, of the conlleval perl
script's per-token loop (its startOfChunk / endOfChunk rules and its "inCorrect" state)."""

import random

import pytest
from seqeval import metrics as seqeval_metrics
from seqeval.metrics.sequence_labeling import get_entities

from recurrent_bert.tasks.tagging import conlleval

# (gold sentences, predicted sentences): every chunk-boundary rule, both schemes.
CASES = {
    "I- after O starts a chunk (IOB1)": (
        [["O", "I-PER", "I-PER", "O"]],
        [["O", "B-PER", "I-PER", "O"]],
    ),
    "type change inside a chunk": ([["B-PER", "I-ORG", "I-ORG"]], [["B-PER", "I-PER", "I-ORG"]]),
    "IOB1 adjacent chunks vs one chunk": ([["I-PER", "B-PER", "O"]], [["I-PER", "I-PER", "O"]]),
    "IOB1 versus IOB2 of the same chunks": (
        [["I-LOC", "I-LOC", "O", "I-PER", "B-PER"]],
        [["B-LOC", "I-LOC", "O", "B-PER", "B-PER"]],
    ),
    "B- after I- of the same type starts a chunk": (
        [["B-PER", "I-PER", "B-PER", "I-PER"]],
        [["B-PER", "I-PER", "I-PER", "I-PER"]],
    ),
    "B- after B-": ([["B-ORG", "B-ORG", "B-ORG"]], [["B-ORG", "B-ORG", "I-ORG"]]),
    "chunks end at the sentence end": (
        [["O", "B-PER"], ["I-PER", "O"], ["B-LOC"]],
        [["O", "B-PER"], ["I-PER", "O"], ["I-LOC"]],
    ),
    "empty sentences": ([[], ["B-PER"], [], ["O"]], [[], ["B-PER"], [], ["B-LOC"]]),
    "all O": ([["O", "O"], ["O"]], [["O", "O"], ["O"]]),
    "no predicted chunk": ([["B-PER", "O", "I-LOC"]], [["O", "O", "O"]]),
    "no gold chunk": ([["O", "O", "O"]], [["B-MISC", "O", "I-MISC"]]),
    "types with hyphens": ([["B-GEO-LOC", "I-GEO-LOC"]], [["B-GEO-LOC", "I-GEO-NAT"]]),
    "IOBES: S- and E- end chunks": (
        [["S-PER", "S-PER", "B-LOC", "E-LOC", "B-LOC", "I-LOC", "E-LOC", "O"]],
        [["S-PER", "B-PER", "E-PER", "E-LOC", "I-LOC", "I-LOC", "E-LOC", "S-ORG"]],
    ),
    "IOBES: S- after B-/I- of the same type": (
        [["B-PER", "S-PER", "I-PER", "S-PER", "O"]],
        [["B-PER", "I-PER", "I-PER", "E-PER", "O"]],
    ),
    "IOBES: I-/E- after E-/S- start a chunk": (
        [["E-PER", "E-PER", "I-PER", "S-LOC", "E-LOC", "O", "E-ORG"]],
        [["E-PER", "I-PER", "I-PER", "S-LOC", "I-LOC", "O", "I-ORG"]],
    ),
}


def seqeval_scores(gold, predicted):
  """Our score names from seqeval (fractions → percent), per type from classification_report."""
  gold, predicted = [list(s) for s in gold], [list(s) for s in predicted]
  kwargs = dict(mode=None, zero_division=0)
  result = {
      "precision": 100 * seqeval_metrics.precision_score(gold, predicted, **kwargs),
      "recall": 100 * seqeval_metrics.recall_score(gold, predicted, **kwargs),
      "f1": 100 * seqeval_metrics.f1_score(gold, predicted, **kwargs),
      "num_gold_chunks": len(get_entities(gold)),
      "num_predicted_chunks": len(get_entities(predicted)),
      "num_tokens": sum(len(s) for s in gold),
  }
  if result["num_tokens"]:
    result["accuracy"] = 100 * seqeval_metrics.accuracy_score(gold, predicted)
  types = {t for t, _, _ in get_entities(gold) + get_entities(predicted)}
  if types:
    report = seqeval_metrics.classification_report(gold, predicted, output_dict=True, **kwargs)
    for type_ in types:
      for ours, theirs in (("precision", "precision"), ("recall", "recall"), ("f1", "f1-score")):
        result[f"{type_}_{ours}"] = 100 * report[type_][theirs]
  return result


def assert_matches_seqeval(gold, predicted):
  ours = conlleval.conlleval_scores(gold, predicted)
  reference = seqeval_scores(gold, predicted)
  # Every per-type key of ours is a type seqeval found, and the reverse.
  assert {k for k in ours if k.endswith("_f1")} == {k for k in reference if k.endswith("_f1")}
  for key, value in reference.items():
    assert ours[key] == pytest.approx(value, abs=1e-9), key
  for sentence in [*gold, *predicted]:  # the chunks themselves (seqeval's end is inclusive)
    spans = [(t, start, end - 1) for t, start, end in conlleval.chunk_spans(sentence)]
    assert spans == get_entities(list(sentence)), sentence


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_boundary_rule_matches_seqeval(name):
  gold, predicted = CASES[name]
  assert_matches_seqeval(gold, predicted)
  assert_matches_seqeval(predicted, gold)


def test_all_cases_together_match_seqeval():
  gold = [s for g, _ in CASES.values() for s in g]
  predicted = [s for _, p in CASES.values() for s in p]
  assert_matches_seqeval(gold, predicted)


@pytest.mark.parametrize("prefixes", ["BI", "BIES"])
def test_random_sequences_match_seqeval(prefixes):
  rng = random.Random(16)
  tags = ["O"] + [f"{p}-{t}" for t in ("PER", "LOC", "MISC") for p in prefixes]
  gold, predicted = [], []
  for _ in range(300):
    length = rng.randint(0, 9)
    gold.append([rng.choice(tags) for _ in range(length)])
    # Predictions copy gold tags often, so that many chunks are right.
    predicted.append([g if rng.random() < 0.6 else rng.choice(tags) for g in gold[-1]])
  assert_matches_seqeval(gold, predicted)
  for g, p in zip(gold[:100], predicted[:100]):  # and sentence by sentence
    assert_matches_seqeval([g], [p])


# ------------------------------------------------------------- the perl script, transcribed


def _perl_split(tag):
  prefix, dash, type_ = tag.partition("-")
  return (prefix, type_) if dash else (tag, "")


def _perl_end(prev, tag, prev_type, type_):
  """endOfChunk's rules for the tags B, I, O."""
  pairs = {("B", "B"), ("B", "O"), ("I", "B"), ("I", "O")}
  return (prev, tag) in pairs or (prev != "O" and prev_type != type_)


def _perl_start(prev, tag, prev_type, type_):
  """startOfChunk's rules for the tags B, I, O."""
  pairs = {("B", "B"), ("I", "B"), ("O", "B"), ("O", "I")}
  return (prev, tag) in pairs or (tag != "O" and prev_type != type_)


def perl_conlleval(gold, predicted):
  """The script's main loop; a blank line (tags O O) follows every sentence."""
  counts = {"found_correct": {}, "found_guessed": {}, "correct_chunk": {}}
  tokens = correct_tags = 0
  in_correct = False
  last_c, last_ct, last_g, last_gt = "O", "", "O", ""
  lines = []
  for g, p in zip(gold, predicted):
    lines += [(a, b, True) for a, b in zip(g, p)] + [("O", "O", False)]

  def add(kind, type_):
    counts[kind][type_] = counts[kind].get(type_, 0) + 1

  for correct_tag, guessed_tag, is_token in lines:
    c, ct = _perl_split(correct_tag)
    g, gt = _perl_split(guessed_tag)
    if in_correct:
      c_end, g_end = _perl_end(last_c, c, last_ct, ct), _perl_end(last_g, g, last_gt, gt)
      if c_end and g_end and last_gt == last_ct:
        in_correct = False
        add("correct_chunk", last_ct)
      elif c_end != g_end or gt != ct:
        in_correct = False
    c_start, g_start = _perl_start(last_c, c, last_ct, ct), _perl_start(last_g, g, last_gt, gt)
    if c_start and g_start and gt == ct:
      in_correct = True
    if c_start:
      add("found_correct", ct)
    if g_start:
      add("found_guessed", gt)
    if is_token:
      correct_tags += c == g and ct == gt
      tokens += 1
    last_c, last_ct, last_g, last_gt = c, ct, g, gt
  if in_correct:
    add("correct_chunk", last_ct)
  return counts, tokens, correct_tags


def test_iob_counts_match_the_transcribed_perl_loop():
  rng = random.Random(2003)
  tags = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG"]
  gold = [[rng.choice(tags) for _ in range(rng.randint(0, 8))] for _ in range(400)]
  predicted = [[t if rng.random() < 0.5 else rng.choice(tags) for t in s] for s in gold]
  cases = [
      (g, p) for g, p in CASES.values() if not any("E-" in t or "S-" in t for s in g for t in s)
  ]
  for g, p in [(gold, predicted)] + cases:
    ours = conlleval.conlleval_counts(g, p)
    perl, tokens, correct_tags = perl_conlleval(g, p)
    assert dict(ours.gold) == perl["found_correct"]
    assert dict(ours.predicted) == perl["found_guessed"]
    assert dict(ours.correct) == perl["correct_chunk"]
    assert (ours.num_tokens, ours.num_correct_tokens) == (tokens, correct_tags)


def test_numbers_by_hand():
  # gold: PER(0-1) LOC(3); predicted: PER(0-1) ORG(3): 1 of 2 right, 3 of 4 tokens.
  scores = conlleval.conlleval_scores(
      [["B-PER", "I-PER", "O", "I-LOC"]], [["I-PER", "I-PER", "O", "B-ORG"]]
  )
  assert scores["precision"] == scores["recall"] == scores["f1"] == 50.0
  assert scores["accuracy"] == 50.0  # B-PER≠I-PER: the whole tag must match
  assert (scores["PER_f1"], scores["LOC_recall"], scores["ORG_precision"]) == (100.0, 0.0, 0.0)
  assert (scores["num_gold_chunks"], scores["num_predicted_chunks"]) == (2, 2)
  assert (scores["num_correct_chunks"], scores["num_tokens"]) == (1, 4)
  # 1 right of 3 predicted and 2 gold: P 33.33, R 50, F1 = 2PR/(P+R) = 40.
  scores = conlleval.conlleval_scores(
      [["B-PER", "O", "B-LOC", "O"]], [["B-PER", "B-ORG", "B-LOC", "I-LOC"]]
  )
  assert scores["precision"] == pytest.approx(100 / 3)
  assert (scores["recall"], scores["f1"]) == (50.0, pytest.approx(40.0))
  # Nothing predicted, nothing gold, no token: the script's zeros.
  none = conlleval.conlleval_scores([["B-PER"]], [["O"]])
  assert (none["precision"], none["recall"], none["f1"], none["PER_precision"]) == (0, 0, 0, 0)
  empty = conlleval.conlleval_scores([[]], [[]])
  assert (empty["precision"], empty["f1"], empty["accuracy"], empty["num_tokens"]) == (0, 0, 0, 0)


def test_counts_of_shards_add_up():
  gold = [s for g, _ in CASES.values() for s in g]
  predicted = [s for _, p in CASES.values() for s in p]
  whole = conlleval.conlleval_counts(gold, predicted)
  parts = [conlleval.conlleval_counts(gold[i::3], predicted[i::3]) for i in range(3)]
  assert parts[0] + parts[1] + parts[2] == whole
  assert (conlleval.ChunkCounts() + whole).scores() == whole.scores()


def test_mismatched_or_malformed_tags_are_refused():
  with pytest.raises(ValueError, match="2 gold sentences but 1"):
    conlleval.conlleval_counts([["O"], ["O"]], [["O"]])
  with pytest.raises(ValueError, match="sentence 0: 2 gold tags but 1"):
    conlleval.conlleval_counts([["O", "O"]], [["O"]])
  for tag in ("PER", "B-", "U-PER", "b-PER", ""):
    with pytest.raises(ValueError, match="is not O or B-/I-/E-/S-"):
      conlleval.conlleval_counts([["O"]], [[tag]])
