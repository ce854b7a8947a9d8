"""Fixtures of the task tests: the corpus slice and vocabulary the data tests build, and a
word-level vocabulary in which every test word is one piece, so expected features can be
written by hand."""

import pytest

from recurrent_bert.data.tokenization import BertWordpieceTokenizer
from tests.data.conftest import RESERVED
from tests.data.conftest import corpus_file
from tests.data.conftest import vocab_file
from tests.data.conftest import write_vocab

WORDS = [
    "a1",
    "a2",
    "a3",
    "a4",
    "a5",
    "b1",
    "b2",
    "b3",
    "b4",
    "b5",
    "b6",
    "apple",
    "cat",
    "dog",
    "fruit",
    "is",
    "it",
    "red",
    "the",
    "which",
    "?",
    ".",
]


@pytest.fixture(scope="session")
def word_tokenizer(tmp_path_factory):
  path = write_vocab(tmp_path_factory.mktemp("wordvocab") / "vocab.txt", RESERVED + WORDS)
  return BertWordpieceTokenizer(path, do_lower_case=True)


def piece_ids(tokenizer, text):
  """The ids of the whitespace-separated words of `text` (each one piece)."""
  return tokenizer.convert_tokens_to_ids(text.split())
