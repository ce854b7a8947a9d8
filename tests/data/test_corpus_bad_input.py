"""Issue 15, corpora: every reader of a text corpus ends lines as Python's universal
newlines do (\\n, \\r\\n, or a lone \\r from an old Mac), so the same text with other line
ends is the same corpus: the same documents, words, vocabulary and pretraining instances.

Before, a CR-only corpus was one line: one sentence (21 instances became 1) and
rbert-create-pretraining-data still exited 0. The expectation here is always the corpus
with \\n line ends, read by hand (`str.split("\\n")`).
"""

import io
import os

from hypothesis import given
from hypothesis import strategies as st
import pytest

from recurrent_bert import io_utils
from recurrent_bert.data import builtin_corpus
from recurrent_bert.data import pretraining_corpus
from recurrent_bert.data import pretraining_data
from recurrent_bert.data import pretraining_options
from recurrent_bert.data.mlm_masking import MaskingConfig
from recurrent_bert.errors import InputError
from tests.support import mutations
from tests.support.readme_text import run_module

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SENTENCES = [
    "The cat sat on the mat.",
    "It was warm there.",
    "Then it slept.",
    "A dog came by later.",
    "The two looked at each other.",
    "Nothing else happened that day.",
    "The next morning was cold.",
]
# Three documents (blank line between), as recurrent_bert/tools/create_pretraining_data expects.
CORPUS = "\n".join(SENTENCES[:3] + [""] + SENTENCES[3:5] + [""] + SENTENCES[5:]) + "\n"
LF = CORPUS.encode("utf-8")


def documents_by_hand(text: str):
  """(sentences, first line) of each document of \\n-ended text, read without the package."""
  documents, current, first = [], [], 0
  for number, line in enumerate(text.split("\n"), start=1):
    if line.strip():
      first = first or number
      current.append(line.strip())
    elif current:
      documents.append((current, first))
      current, first = [], 0
  if current:
    documents.append((current, first))
  return documents


def read_documents(path):
  return [
      (d.sentences, int(d.source.rsplit(":", 1)[1]))
      for d in pretraining_corpus.iter_documents([path])
  ]


def write(tmp_path, data: bytes, name="corpus.txt"):
  path = tmp_path / name
  path.write_bytes(data)
  return str(path)


@pytest.mark.parametrize("ending", [b"\r", b"\r\n"])
def test_old_mac_and_windows_line_ends_give_the_same_documents(tmp_path, ending):
  path = write(tmp_path, LF.replace(b"\n", ending))
  assert read_documents(path) == documents_by_hand(CORPUS)
  assert len(read_documents(path)) == 3


def test_read_lines_checked_numbers_lines_as_universal_newlines_do(tmp_path):
  data = b"one\rtwo\r\nthree\nfour\r\rsix"
  path = write(tmp_path, data)
  assert list(io_utils.read_lines_checked(path)) == list(
      enumerate(["one", "two", "three", "four", "", "six"], start=1)
  )
  # The same lines Python's text mode gives.
  with open(path, encoding="utf-8") as f:
    assert [line for _, line in io_utils.read_lines_checked(path)] == f.read().split("\n")


def test_non_utf8_line_is_named_after_cr_line_ends(tmp_path):
  path = write(tmp_path, b"fine\rstill fine\rbad \xff here\r")
  with pytest.raises(InputError, match=r"corpus\.txt:3: not valid UTF-8"):
    list(io_utils.read_lines_checked(path))


@given(
    data=st.binary(max_size=40).map(lambda b: b.replace(b"\x00", b"a")),
    chunk=st.integers(1, 8),
)
@mutations.fuzz_settings(max_examples=200)
def test_chunked_split_equals_splitlines(data, chunk):
  # A \r\n cut between two reads still ends one line; bytes.splitlines is the reference.
  assert list(io_utils.split_universal_lines(io.BytesIO(data), chunk)) == data.splitlines()


def test_create_pretraining_data_reads_a_cr_corpus_as_the_lf_one(tmp_path, vocab_file):
  outputs = {}
  for name, data in (("lf", LF * 3), ("cr", (LF * 3).replace(b"\n", b"\r"))):
    (tmp_path / name).mkdir()
    options = pretraining_options.GeneratorOptions(
        input_files=[write(tmp_path / name, data)],
        output_files=[str(tmp_path / name / "shard.tfrecord")],
        vocab_file=vocab_file,
        max_seq_length=16,
        masking=MaskingConfig(max_predictions_per_seq=3),
        dupe_factor=1,
        show_progress=False,
    )
    stats = pretraining_data.create_pretraining_data(options)
    outputs[name] = (
        stats["documents"],
        stats["instances"],
        open(options.output_files[0], "rb").read(),
    )
  assert outputs["cr"] == outputs["lf"]
  assert outputs["lf"][0] == len(documents_by_hand(CORPUS * 3)) and outputs["lf"][1] > 7


@pytest.mark.slow(seconds=4)
def test_tokenize_text_writes_one_row_per_cr_line(tmp_path, vocab_file):
  # recurrent_bert/tools/build_vocab reads through the same io_utils.read_lines_checked.
  import json

  from recurrent_bert.data import tokenization

  cr = write(tmp_path, LF.replace(b"\n", b"\r"), "cr.txt")
  out = tmp_path / "cr.jsonl"
  result = run_module(
      "recurrent_bert.tools.tokenize_text",
      f"--vocab_file={vocab_file}",
      f"--input_file={cr}",
      f"--output_file={out}",
  )
  assert result.returncode == 0, result.stderr[-2000:]
  rows = [json.loads(line) for line in out.read_text(encoding="utf-8").split("\n")[:-1]]
  lines = CORPUS.split("\n")[:-1]
  tokenizer = tokenization.BertWordpieceTokenizer(vocab_file)
  expected = [[p.decode() for p in row] for row in tokenizer.tokenize_to_pieces(lines).to_list()]
  assert rows == expected and len(rows) == 9


def test_builtin_corpus_reads_cr_and_crlf_sources_alike():
  source = (
      '"""Module summary sentence here.\n\nSecond paragraph has words. It also has\n'
      'a continued line here.\n"""\ndef f():\n  """Function doc is fine. Another one\x0c'
      'follows\u2028here.\n  """\n'
  )

  def sentences(text):
    return [
        s
        for doc in builtin_corpus._docstrings(text)
        for p in builtin_corpus.docstring_paragraphs(doc)
        for s in builtin_corpus.split_sentences(p)
    ]

  expected = sentences(source)
  assert sentences(source.replace("\n", "\r")) == expected
  assert sentences(source.replace("\n", "\r\n")) == expected
  # Written one per line, no sentence holds a line end of any reader.
  assert all(len(s.splitlines()) == 1 and "\r" not in s for s in expected)
  assert "Another one follows here." in expected


# -- the property -------------------------------------------------------------------------


@mutations.fuzz_settings(max_examples=60)
@given(data=st.data())
def test_corpus_line_ends_property(tmp_path_factory, data):
  lines = mutations.lines_of(LF)
  endings = data.draw(
      st.lists(st.sampled_from([b"\n", b"\r\n", b"\r"]), min_size=len(lines), max_size=len(lines))
  )
  for i in range(1, len(lines)):
    if endings[i - 1] == b"\r" and lines[i] == b"\n" and endings[i].startswith(b"\n"):
      endings[i] = b"\r"  # "\r" then an empty "\n" line would be one "\r\n" line end
  content = b"".join(line.rstrip(b"\n") + end for line, end in zip(lines, endings))
  if data.draw(st.booleans()):
    content = content.rstrip(b"\r\n")  # no final line end
  line = None
  if data.draw(st.booleans()):  # one line not UTF-8: refused, naming it
    index = data.draw(mutations.line_index(LF))
    bad = data.draw(st.sampled_from(mutations.NON_UTF8))
    pieces = content.splitlines(keepends=True)
    pieces[index] = b"x" + bad + pieces[index]
    content, line = b"".join(pieces), index + 1
  path = write(tmp_path_factory.mktemp("corpus"), content)
  mutations.check_outcome(
      "corpus text",
      lambda: read_documents(path),
      path,
      None if line else documents_by_hand(CORPUS),
      line=line,
  )
