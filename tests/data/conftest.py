"""Shared fixtures of the data tests: a small real corpus slice and a vocab built from it.

The vocabulary is made here by plain counting (reserved tokens, every character with and
without `##`, frequent words, frequent `##` suffixes) so the data tests do not depend on
the WordPiece learner, which tests/tools covers.
"""

import collections
import re

import pytest

from recurrent_bert.data import builtin_corpus

RESERVED = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def write_vocab(path, tokens):
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(tokens) + "\n")
  return str(path)


def vocab_from_text(text, num_words=1500, lower=True):
  if lower:
    text = text.lower()
  words = re.findall(r"[A-Za-z]+", text)
  chars = sorted({c for c in text if not c.isspace()})
  counts = collections.Counter(words)
  suffixes = collections.Counter(w[-k:] for w in words for k in (2, 3, 4) if len(w) > k + 2)
  tokens = list(RESERVED) + chars + ["##" + c for c in chars if c.isalnum()]
  tokens += [w for w, _ in counts.most_common(num_words) if len(w) > 1]
  tokens += ["##" + s for s, _ in suffixes.most_common(300)]
  seen, unique = set(), []
  for t in tokens:
    if t not in seen:
      seen.add(t)
      unique.append(t)
  return unique


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory):
  """~250 KB of real docstring prose in the standard format (first documents of stdlib)."""
  path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
  builtin_corpus.write_corpus(str(path), max_bytes=250_000)
  return str(path)


@pytest.fixture(scope="session")
def vocab_file(tmp_path_factory, corpus_file):
  with open(corpus_file, encoding="utf-8") as f:
    text = f.read()
  return write_vocab(tmp_path_factory.mktemp("vocab") / "vocab.txt", vocab_from_text(text))
