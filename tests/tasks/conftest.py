"""Fixtures of the task tests: the corpus slice and vocabulary the data tests build."""

from tests.data.conftest import corpus_file, vocab_file  # noqa: F401
