"""One definition of a word: the tokenizer, SQuAD's character offsets and the native
tokenizer agree on where words start and end (issue 15: NUL, U+000B, U+2028 ... used to
split or cut words in the offset path only).

The expected words are written from BERT's rule (google-research/bert `tokenization.py`,
Hugging Face's BertNormalizer + BertPreTokenizer): NUL, U+FFFD, control (Cc, but tab,
newline, carriage return) and format (Cf) characters are deleted; tab, newline, carriage
return and the Unicode space, line and paragraph separators (Zs, Zl, Zp) separate words;
punctuation is a word of its own.
"""

import string
import unicodedata

from hypothesis import given
from hypothesis import strategies as st
import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.data import tokenization
from recurrent_bert.tasks.span import squad
from recurrent_bert.tasks.span import squad_alignment
from recurrent_bert.tasks.span import squad_postprocessing
from recurrent_bert.tasks.span import squad_windows
from tests.data.conftest import RESERVED
from tests.data.conftest import write_vocab
from tests.support import mutations

VOCAB = RESERVED + ["cat", "sat", "mat", "it", "saw", "then", "he", "on", "the", ",", ".", ":"]
VOCAB += ["##s", "##a", "##t", "##m", "##i"]

# Characters Python's str.isspace() calls space, but BERT deletes (controls): they join
# their neighbours into one word.
JOINING = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\x85"]
# Line and paragraph separators: whitespace to BERT (its str.split) and to tokenizers.
SEPARATING = ["\u2028", "\u2029"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  path = write_vocab(tmp_path_factory.mktemp("boundaries") / "vocab.txt", VOCAB)
  return tokenization.BertWordpieceTokenizer(path, do_lower_case=True)


def tokenizer_words(text, lower=True):
  """The reference: the in-graph tokenizer's words, decoded."""
  return words_of_each([text], lower)[0]


_BASIC_TOKENIZE = {
    lower: tf.function(
        lambda texts, lower=lower: tokenization.basic_tokenize(texts, lower),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    for lower in (False, True)
}


def words_of_each(texts, lower):
  return [
      [w.decode("utf-8") for w in words]
      for words in _BASIC_TOKENIZE[lower](tf.constant(texts, tf.string)).to_list()
  ]


def offset_words(text):
  return [text[start:end] for start, end in squad_alignment.word_char_spans([text])[0]]


def test_nul_does_not_cut_a_word_short(tokenizer):
  text = "cat\x00sat"
  assert squad_alignment.word_char_spans([text]) == [[(0, 7)]]
  assert tokenizer_words(text) == ["catsat"]
  pieces = squad_alignment.context_pieces([text], tokenizer)[0]
  assert tokenizer.convert_ids_to_tokens(pieces.ids) == ["cat", "##s", "##a", "##t"]
  assert pieces.char_start.tolist() == [0] * 4 and pieces.char_end.tolist() == [7] * 4


@pytest.mark.parametrize("character", JOINING)
def test_control_characters_join_words_in_both_paths(tokenizer, character):
  text = f"cat{character}sat"
  assert squad_alignment.word_char_spans([text]) == [[(0, 7)]]
  assert tokenizer_words(text) == ["catsat"]
  assert squad_alignment.context_pieces([text], tokenizer)[0].ids.tolist() == (
      tokenizer.tokenize_flat([text]).to_list()[0]
  )


@pytest.mark.parametrize("character", SEPARATING)
def test_line_and_paragraph_separators_split_words_in_both_paths(tokenizer, character):
  text = f"cat{character}sat"
  assert squad_alignment.word_char_spans([text]) == [[(0, 3), (4, 7)]]
  assert tokenizer_words(text) == ["cat", "sat"]
  assert tokenizer.tokenize_to_pieces([text]).to_list()[0] == [b"cat", b"sat"]


def test_dropped_characters_never_start_or_end_a_word():
  text = "\ufeff\x00a\x00 \x00, b\u200b\x00"
  assert squad_alignment.word_char_spans([text]) == [[(2, 3), (6, 7), (8, 9)]]
  assert squad_alignment.word_char_spans(["\x00", " \ufeff ", ""]) == [[], [], []]


def test_answer_next_to_line_separator_and_nul_maps_to_its_characters(tokenizer):
  context = "He saw\u2028it: the mat\x00, then\x00 sat."
  # Hand-written: the words BERT sees, and where they are in the context.
  expected_words = [
      ("He", 0, 2),
      ("saw", 3, 6),
      ("it", 7, 9),
      (":", 9, 10),
      ("the", 11, 14),
      ("mat", 15, 18),
      (",", 19, 20),
      ("then", 21, 25),
      ("sat", 27, 30),
      (".", 30, 31),
  ]
  assert squad_alignment.word_char_spans([context])[0] == [(a, b) for _, a, b in expected_words]
  assert [context[a:b] for _, a, b in expected_words] == [w for w, _, _ in expected_words]
  pieces = squad_alignment.context_pieces([context], tokenizer)[0]
  assert pieces.ids.tolist() == tokenizer.tokenize_flat([context]).to_list()[0]

  examples, answers = [], ["it", "mat", ",", "then", "sat"]
  for k, text in enumerate(answers):
    answer = squad.SquadAnswer(text, context.index(text, 7))
    first, last = squad_windows.answer_piece_span(pieces, answer)
    assert context[pieces.char_start[first] : pieces.char_end[last]] == text
    examples.append(squad.SquadExample(f"q{k}", "what", context, (answer,)))

  # Post-processing: logits peaked at each example's target positions give back its text.
  features = squad_windows.squad_features(examples, tokenizer, max_seq_length=24, doc_stride=8)
  rows = np.arange(len(features["input_ids"]))
  start_logits = np.zeros(features["input_ids"].shape)
  end_logits = np.zeros(features["input_ids"].shape)
  start_logits[rows, features["start_positions"]] = 10.0
  end_logits[rows, features["end_positions"]] = 10.0
  result = squad_postprocessing.postprocess_squad(examples, features, start_logits, end_logits)
  assert result.predictions == {f"q{k}": text for k, text in enumerate(answers)}


# --- Property: random text built from letters, punctuation and odd characters. -----------

LETTERS = string.ascii_letters + "éßÆñΩжé中東"
PUNCTUATION = string.punctuation + "“”—…¿"
ALPHABET = list(LETTERS) + list(PUNCTUATION) + list(mutations.ODD_CHARACTERS) + [" ", "\t"]
ALPHABET += SEPARATING + JOINING + ["\ufffd", "\u200b", "\u00a0", "\u3000", "\n", "\r"]


def _is_dropped(ch):
  """BERT's deleted characters, from unicodedata (independent of the regexes)."""
  return ch in "\x00\ufffd" or (ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf"))


random_texts = st.lists(st.sampled_from(ALPHABET), max_size=40).map("".join)


@mutations.fuzz_settings()
@given(text=random_texts)
def test_offset_words_are_the_tokenizers_words(text):
  spans = squad_alignment.word_char_spans([text])[0]
  for lower in (False, True):
    *per_word, whole = words_of_each([text[a:b] for a, b in spans] + [text], lower)
    assert all(len(words) == 1 for words in per_word), (text, per_word)
    assert [w for words in per_word for w in words] == whole, text
  for a, b in spans:
    assert not _is_dropped(text[a]) and not _is_dropped(text[b - 1]), (text, a, b)
  mutations.TALLY["word boundaries (offsets vs tokenizer)", "same words"] += 1


@pytest.fixture(scope="module")
def corpus_tokenizers(vocab_file):
  from recurrent_bert.data import native_tokenizer

  return (
      tokenization.BertWordpieceTokenizer(vocab_file, do_lower_case=True),
      native_tokenizer.NativeWordpieceTokenizer(vocab_file, do_lower_case=True),
  )


@mutations.fuzz_settings()
@given(text=random_texts)
def test_native_tokenizer_gives_the_in_graph_ids(corpus_tokenizers, text):
  graph, native = corpus_tokenizers
  assert native.tokenize_lists([text])[0] == graph.tokenize_flat([text]).to_list()[0], text
  mutations.TALLY["word boundaries (native vs in-graph)", "same ids"] += 1
