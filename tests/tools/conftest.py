"""Fixtures of tests/data (corpus slice, vocab) reused by the tool tests."""

from tests.data.conftest import corpus_file, vocab_file  # noqa: F401
