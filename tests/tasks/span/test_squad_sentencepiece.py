"""SQuAD features and post-processing with a SentencePiece model, checked against the
`sentencepiece` library's own piece offsets (begin/end bytes of each piece in the original
text), sliced from the context here: answers map to piece spans and back to exactly their
text, windows cover every piece once as max context, predicted spans are substrings of the
context that neither start nor end with whitespace. Tagging reads each word's first piece.
"""

import numpy as np
import pytest
import sentencepiece

from recurrent_bert.data import tokenization
from recurrent_bert.tasks.span import squad
from recurrent_bert.tasks.span import squad_alignment
from recurrent_bert.tasks.span import squad_postprocessing
from recurrent_bert.tasks.span import squad_windows
from recurrent_bert.tasks.tagging import tagging_features
from recurrent_bert.tasks.tagging.conll import TaggedSentence
from tests.data.conftest import corpus_file  # noqa: F401
from tests.data.sentencepiece_models import MARKER
from tests.data.sentencepiece_models import build_model

SPACES = " \t\n"
CONTEXTS = [
    'Zürich is a city (Zürich) in Switzerland; naïve visitors say: "Grüezi!"',
    "The  value   of the attribute,returned by  getattr() , is None.",
    "東京は日本の首都です。北京是中国的首都。 Tokyo (東京) is big.",
    "\tThe résumé was written in 1999.\nIt said: déjà vu, à la carte.  ",
    "Return the value of the named attribute of object. " * 6,
]


@pytest.fixture(scope="module")
def model(tmp_path_factory, corpus_file):
  path = build_model(corpus_file, "unigram", str(tmp_path_factory.mktemp("spm") / "spm"))
  return tokenization.make_tokenizer(path), sentencepiece.SentencePieceProcessor(model_file=path)


def reference_spans(processor, context):
  """[(piece, char_start, char_end)] from the library: the piece's original characters with
  the whitespace around them cut off; (end, start) for a piece of whitespace only."""
  encoded = context.encode("utf-8")
  spans = []
  for piece in processor.encode(context, return_type="proto").pieces:
    start = len(encoded[: piece.begin].decode("utf-8"))
    end = len(encoded[: piece.end].decode("utf-8"))
    text = context[start:end]
    if text.strip(SPACES):
      start += len(text) - len(text.lstrip(SPACES))
      end -= len(text) - len(text.rstrip(SPACES))
    else:
      start, end = end, start
    spans.append((piece.piece, start, end))
  return spans


@pytest.mark.slow(seconds=3)
def test_context_pieces_are_the_library_pieces_at_their_characters(model):
  tokenizer, processor = model
  lone_marks = 0
  for context, pieces in zip(CONTEXTS, squad_alignment.context_pieces(CONTEXTS, tokenizer)):
    reference = reference_spans(processor, context)
    lone_marks += sum(p == MARKER for p, _, _ in reference)
    assert [tokenizer.vocab[i] for i in pieces.ids] == [p for p, _, _ in reference]
    assert list(zip(pieces.char_start, pieces.char_end)) == [(s, e) for _, s, e in reference]
    covered = [context[s:e] for _, s, e in reference if e > s]
    assert "".join(covered) == "".join(context.split())  # every character once, in order
  assert lone_marks  # lone "▁" pieces are exercised


def answers_of(context, reference):
  """Answers whose ends fall on piece boundaries (start, end, middle of the context,
  across punctuation the pieces join), and ones inside a piece."""
  bounded = [(s, e) for _, s, e in reference if e > s]
  spans = [(0, 1), (0, 3), (len(bounded) - 2, len(bounded) - 1), (3, 6), (5, 5), (7, 11)]
  aligned = [context[bounded[i][0] : bounded[j][1]] for i, j in spans]
  starts = [bounded[i][0] for i, _ in spans]
  inside = []
  for _, s, e in reference:
    if e - s >= 3:  # the middle character of a longer piece
      inside.append((context[s + 1 : s + 2], s + 1))
  return list(zip(aligned, starts)), inside[:3]


def test_answer_piece_spans_give_back_the_answer_text(model):
  tokenizer, processor = model
  for context, pieces in zip(CONTEXTS, squad_alignment.context_pieces(CONTEXTS, tokenizer)):
    aligned, inside = answers_of(context, reference_spans(processor, context))
    for text, start in aligned:
      first, last = squad_windows.answer_piece_span(pieces, squad.SquadAnswer(text, start))
      assert context[pieces.char_start[first] : pieces.char_end[last]] == text
    for text, start in inside:  # the smallest span covering it: one piece around it
      first, last = squad_windows.answer_piece_span(pieces, squad.SquadAnswer(text, start))
      assert first == last
      assert pieces.char_start[first] <= start < start + len(text) <= pieces.char_end[first]


@pytest.mark.parametrize("max_seq_length,doc_stride", [(24, 5), (40, 16), (128, 64)])
def test_windows_cover_every_piece_once_and_map_spans_to_the_context(
    model, max_seq_length, doc_stride
):
  tokenizer, processor = model
  examples = [
      squad.SquadExample(str(i), "What is it?", c, (squad.SquadAnswer(c[:5], 0),))
      for i, c in enumerate(CONTEXTS)
  ]
  features = squad_windows.squad_features(
      examples, tokenizer, max_seq_length=max_seq_length, doc_stride=doc_stride
  )
  rng = np.random.default_rng(0)
  for index, example in enumerate(examples):
    reference = reference_spans(processor, example.context)
    rows = np.flatnonzero(features["example_index"] == index)
    seen = np.zeros(len(reference), np.int64)
    for row in rows:
      at = np.flatnonzero(features["token_char_start"][row] >= 0)  # context positions
      window = [
          offset  # the reference piece the window starts at
          for offset in range(len(reference) - len(at) + 1)
          if [s for _, s, _ in reference[offset : offset + len(at)]]
          == features["token_char_start"][row, at].tolist()
      ]
      assert len(window) == 1
      held = reference[window[0] : window[0] + len(at)]
      assert [processor.piece_to_id(p) for p, _, _ in held] == features["input_ids"][
          row, at
      ].tolist()
      seen[window[0] : window[0] + len(at)] += features["token_is_max_context"][row, at]
      bounds = [k for k, (_, s, e) in enumerate(held) if e > s]
      for _ in range(10):  # random predicted spans map to the reference's characters
        first, last = sorted(rng.choice(bounds, 2))
        got = example.context[
            features["token_char_start"][row, at[first]] : features["token_char_end"][row, at[last]]
        ]
        assert got == example.context[held[first][1] : held[last][2]]
        assert got and got == got.strip(SPACES)
    assert seen.tolist() == [1] * len(reference)


def test_postprocessed_answers_are_substrings_without_outer_spaces(model):
  tokenizer, _ = model
  examples = [squad.SquadExample(str(i), "Who?", c, ()) for i, c in enumerate(CONTEXTS)]
  features = squad_windows.squad_features(examples, tokenizer, max_seq_length=32, doc_stride=8)
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(2, *features["input_ids"].shape))
  # Lone "▁" pieces get the highest logits: they still never bound an answer.
  blank = features["token_char_end"] <= features["token_char_start"]
  logits[:, blank & (features["token_char_start"] >= 0)] += 100.0
  result = squad_postprocessing.postprocess_squad(
      examples, features, logits[0], logits[1], n_best_size=5
  )
  for example in examples:
    for entry in result.nbest[example.qas_id]:
      assert entry["text"] and entry["text"] in example.context
      assert entry["text"] == entry["text"].strip(SPACES)


def test_tagging_reads_each_words_first_piece(model):
  tokenizer, processor = model
  words = ["Zürich", "(", "naïve", ")", "東京", "getattr()", ",", "résumé"]
  labels = ["A", "B"]
  sentence = TaggedSentence(
      tuple(words), tuple(labels[i % 2] for i in range(len(words))), 0, "test:1"
  )
  features = tagging_features.tagging_features([sentence], tokenizer, labels, max_seq_length=64)
  positions = np.flatnonzero(features["label_weights"][0])
  expected, cursor = [], 1  # after [CLS]
  for word in words:
    pieces = processor.encode(word, out_type=str)
    assert pieces[0].startswith(MARKER)  # a word's first piece carries the mark
    expected.append(cursor)
    cursor += len(pieces)
  assert positions.tolist() == expected
  assert any(processor.encode(w, out_type=str)[0] == MARKER for w in words)  # a lone "▁"
  assert features["label_ids"][0, positions].tolist() == [i % 2 for i in range(len(words))]
