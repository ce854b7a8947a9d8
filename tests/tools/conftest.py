"""Fixtures of tests/data (corpus slice, vocab) reused by the tool tests."""

from tests.data.conftest import corpus_file
from tests.data.conftest import vocab_file
