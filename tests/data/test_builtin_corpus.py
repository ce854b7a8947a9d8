"""The built-in corpus: real prose, standard format, deterministic, no code lines."""

from recurrent_bert.data import builtin_corpus


def test_format_and_content(corpus_file):
  with open(corpus_file, encoding="utf-8") as f:
    text = f.read()
  assert text.endswith("\n\n")
  documents = [d for d in text.split("\n\n") if d.strip()]
  assert len(documents) >= 10
  lines = [line for line in text.splitlines() if line]
  assert len(lines) > 1000
  for line in lines:
    assert line == line.strip()
    assert not line.startswith((">>>", "...", "def ", "import ", "class "))
  # Mostly prose: sentences start with a capital and end with punctuation.
  sentence_like = sum(line[0].isupper() and line[-1] in ".!?:" for line in lines)
  assert sentence_like > 0.6 * len(lines)


def test_deterministic_and_capped(tmp_path):
  a, b = tmp_path / "a.txt", tmp_path / "b.txt"
  stats_a = builtin_corpus.write_corpus(str(a), max_documents=5)
  builtin_corpus.write_corpus(str(b), max_documents=5)
  assert a.read_bytes() == b.read_bytes()
  assert stats_a["documents"] == 5 == len([d for d in a.read_text().split("\n\n") if d])


def test_docstring_cleaning_and_sentence_splitting():
  doc = """Compute the thing. It is fast, e.g. for small inputs.

  Example:

      x = compute(3)

  >>> compute(2)
  4

  Args:
    value: The input value. Must be positive.
  """
  import inspect

  paragraphs = builtin_corpus.docstring_paragraphs(inspect.cleandoc(doc))
  sentences = [s for p in paragraphs for s in builtin_corpus.split_sentences(p)]
  assert sentences == [
      "Compute the thing.",
      "It is fast, e.g. for small inputs.",
      "The input value.",
      "Must be positive.",
  ]


def test_builtin_name_resolves_to_cache(tmp_path):
  [path] = builtin_corpus.resolve_input_files(
      ["builtin"], cache_dir=str(tmp_path), max_bytes=20_000
  )
  assert path.startswith(str(tmp_path)) and open(path).read().strip()
  assert builtin_corpus.resolve_input_files(
      ["builtin"], cache_dir=str(tmp_path), max_bytes=20_000
  ) == [path]
