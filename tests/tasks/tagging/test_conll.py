"""CoNLL-2003 and word<TAB>tag readers on files written here; expected sentences by hand."""

import pytest

from recurrent_bert.errors import InputError
from recurrent_bert.tasks.tagging import conll
from recurrent_bert.tasks.tagging.conll import TaggedSentence

# The layout of eng.train (IOB1 tags: chunks start with I- unless they follow one of the
# same type), with a blank line after each -DOCSTART- and after each sentence.
CONLL_FILE = """\
-DOCSTART- -X- -X- O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC
call NN I-NP O
. . O O

Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP I-NP I-LOC
1996-08-22 CD I-NP O

Hapoel NNP I-NP I-ORG
Haifa NNP I-NP I-ORG
Hapoel NNP I-NP B-ORG
Jerusalem NNP I-NP I-ORG
"""


def expected_conll(path):
  return [
      TaggedSentence(
          ("EU", "rejects", "German", "call", "."),
          ("I-ORG", "O", "I-MISC", "O", "O"),
          0,
          f"{path}:3",
      ),
      TaggedSentence(("Peter", "Blackburn"), ("I-PER", "I-PER"), 0, f"{path}:9"),
      TaggedSentence(("BRUSSELS", "1996-08-22"), ("I-LOC", "O"), 1, f"{path}:14"),
      TaggedSentence(
          ("Hapoel", "Haifa", "Hapoel", "Jerusalem"),
          ("I-ORG", "I-ORG", "B-ORG", "I-ORG"),
          1,
          f"{path}:17",
      ),
  ]


def write(tmp_path, content, name="eng.train"):
  path = tmp_path / name
  if isinstance(content, bytes):
    path.write_bytes(content)
  else:
    path.write_text(content, encoding="utf-8", newline="")
  return str(path)


def test_conll2003_file(tmp_path):
  path = write(tmp_path, CONLL_FILE)
  data = conll.read_conll(path, label_list=conll.CONLL2003_TAGS)
  assert data.examples == expected_conll(path)
  assert data.source == path and data.skipped == []


@pytest.mark.parametrize(
    "variant",
    [
        "crlf",
        "no final newline",
        "trailing blank lines",
        "blank lines of spaces",
        "byte-order mark",
        "tabs and runs of spaces",
    ],
)
def test_conll2003_file_variants(tmp_path, variant):
  content = {
      "crlf": CONLL_FILE.replace("\n", "\r\n"),
      "no final newline": CONLL_FILE.rstrip("\n"),
      "trailing blank lines": CONLL_FILE + "\n\n \n",
      "blank lines of spaces": CONLL_FILE.replace("\n\n", "\n  \t\n"),
      "byte-order mark": "\ufeff" + CONLL_FILE,
      "tabs and runs of spaces": CONLL_FILE.replace(" NNP ", "\tNNP  "),
  }[variant]
  path = write(tmp_path, content)
  assert conll.read_conll(path).examples == expected_conll(path)


def test_tag_column_and_iob2_file(tmp_path):
  path = write(tmp_path, "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n")
  chunks = conll.read_conll(path, tag_column=2)
  assert chunks.examples == [TaggedSentence(("EU", "rejects"), ("B-NP", "B-VP"), 0, f"{path}:3")]
  assert conll.read_conll(path, tag_column=3).examples[0].tags == ("B-ORG", "O")
  assert conll.read_conll(path, tag_column=-1).examples[0].tags == ("B-ORG", "O")


def test_documents(tmp_path):
  # Text before the first -DOCSTART- is document 0; an empty document keeps its number; a
  # -DOCSTART- line ends a sentence even without a blank line before it.
  path = write(
      tmp_path,
      "a O\n\nb B-PER\n-DOCSTART- O\nc O\n\n-DOCSTART- O\n\n-DOCSTART- O\nd I-LOC\ne O\n",
      "doc.txt",
  )
  data = conll.read_conll(path)
  assert [(s.words, s.document, s.guid) for s in data.examples] == [
      (("a",), 0, f"{path}:1"),
      (("b",), 0, f"{path}:3"),
      (("c",), 1, f"{path}:5"),
      (("d", "e"), 3, f"{path}:10"),
  ]
  no_docstart = write(tmp_path, "a\tO\n\nb\tO\n", "plain.txt")
  assert [s.document for s in conll.read_word_tag(no_docstart).examples] == [0, 0]


def test_word_tag_file(tmp_path):
  path = write(tmp_path, "Jean\tB-PER\nDupont\tE-PER\nvit\tO\r\n\r\nParis\tS-LOC\n.\tO", "data.tsv")
  assert conll.read_word_tag(path).examples == [
      TaggedSentence(("Jean", "Dupont", "vit"), ("B-PER", "E-PER", "O"), 0, f"{path}:1"),
      TaggedSentence(("Paris", "."), ("S-LOC", "O"), 0, f"{path}:5"),
  ]


def test_unlabeled_files(tmp_path):
  words_only = write(tmp_path, "-DOCSTART-\n\nEU\nrejects\n\nPeter\n", "test.txt")
  assert conll.read_word_tag(words_only, labeled=False).examples == [
      TaggedSentence(("EU", "rejects"), (), 0, f"{words_only}:3"),
      TaggedSentence(("Peter",), (), 0, f"{words_only}:6"),
  ]
  # A CoNLL test file without its NER column, and a labeled file read without its tags.
  without_ner = "".join(line.rsplit(" ", 1)[0] + "\n" for line in CONLL_FILE.splitlines())
  no_ner = write(tmp_path, without_ner, "eng.testb")
  unlabeled = [TaggedSentence(s.words, (), s.document, s.guid) for s in expected_conll(no_ner)]
  assert conll.read_conll(no_ner, labeled=False).examples == unlabeled
  path = write(tmp_path, CONLL_FILE)
  assert [s.tags for s in conll.read_conll(path, labeled=False).examples] == [()] * 4


def test_infer_label_list(tmp_path):
  path = write(tmp_path, CONLL_FILE)
  # IOB1 train data without B-PER or B-LOC still gets them: dev files and predictions can.
  assert conll.infer_label_list(conll.read_conll(path).examples) == (
      "O",
      "B-LOC",
      "I-LOC",
      "B-MISC",
      "I-MISC",
      "B-ORG",
      "I-ORG",
      "B-PER",
      "I-PER",
  )
  assert set(conll.infer_label_list(conll.read_conll(path).examples)) == set(conll.CONLL2003_TAGS)
  iobes = [TaggedSentence(("a", "b"), ("S-X", "O"), 0, "f:1")]
  assert conll.infer_label_list(iobes) == ("O", "B-X", "I-X", "E-X", "S-X")
  with pytest.raises(InputError, match="no tags"):
    conll.infer_label_list([TaggedSentence(("a",), (), 0, "f:1")])


def test_label_list_is_checked():
  for bad, message in [
      (["O", "B-PER", "O"], "given twice"),
      (["O", "PER"], "is not O or B-/I-/E-/S-"),
      ([], "no tags"),
  ]:
    with pytest.raises(InputError, match=message):
      conll.check_label_list(bad)
  assert conll.check_label_list(list(conll.CONLL2003_TAGS)) == conll.CONLL2003_TAGS
