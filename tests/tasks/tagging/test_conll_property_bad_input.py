"""Issue 15's property on the CoNLL-2003 reader: a valid file, one mutation, then either an
InputError naming file:line or exactly the sentences the mutated file holds.

Valid files are written here in CoNLL-2003's layout ("word POS chunk tag" lines, blank
lines between sentences, a -DOCSTART- line before each document); the expected sentences
are the (words, tags, document) the test wrote, not the reader's output.
"""

from hypothesis import given
from hypothesis import strategies as st

from recurrent_bert.tasks.tagging import conll
from tests.support import mutations

WORDS = st.text(alphabet="abcxyzé東.,'\"-", min_size=1, max_size=6).filter(
    lambda w: not w.startswith("-DOCSTART-")
)
TAGS = st.sampled_from(["O", "B-PER", "I-PER", "B-LOC", "I-ORG", "B-MISC", "S-X", "E-LOC"])
# Tags the reader must refuse: not O, not B-/I-/E-/S- and a type.
BAD_TAGS = ("U-PER", "L-LOC", "B-", "X", "b-per", "O-PER", "BPER", "-", "0", "I_ORG")


@st.composite
def conll_file(draw):
  """Documents (lists of sentences of (word, tag)): 1-2 documents of 1-3 sentences."""
  return [
      [
          draw(st.lists(st.tuples(WORDS, TAGS), min_size=1, max_size=4))
          for _ in range(draw(st.integers(1, 3)))
      ]
      for _ in range(draw(st.integers(1, 2)))
  ]


def render(documents):
  """(file bytes, token lines) of CoNLL-2003 text; token lines are (0-based line, word, tag)."""
  lines, tokens = [], []
  for document in documents:
    lines += ["-DOCSTART- -X- -X- O", ""]
    for sentence in document:
      for word, tag in sentence:
        tokens.append((len(lines), word, tag))
        lines.append(f"{word} NN I-NP {tag}")
      lines.append("")
  return ("\n".join(lines) + "\n").encode("utf-8"), tokens


def expected_sentences(documents):
  return [
      (tuple(w for w, _ in sentence), tuple(t for _, t in sentence), d)
      for d, document in enumerate(documents)
      for sentence in document
  ]


def sentences(data):
  return [(s.words, s.tags, s.document) for s in data.examples]


MUTATIONS = [
    "bad_tag",
    "extra_column",
    "missing_column",
    "duplicate_line",
    "non_utf8",
    "odd_character",
    "blank_line",
    "tabs",
    "crlf",
    "no_final_newline",
]


@mutations.fuzz_settings()
@given(conll_file(), st.sampled_from(MUTATIONS), st.data())
def test_property_conll_mutations(tmp_path, documents, mutation, data):
  content, tokens = render(documents)
  k = data.draw(st.integers(0, len(tokens) - 1), label="token")
  index, word, tag = tokens[k]
  line = index + 1  # 1-based
  expected = expected_sentences(documents)
  # The sentence of token k, and the token's position in it.
  position, s = k, 0
  while position >= len(expected[s][0]):
    position -= len(expected[s][0])
    s += 1
  refused_at = None
  if mutation == "bad_tag":
    bad = data.draw(st.sampled_from(BAD_TAGS))
    content = mutations.replace_line(content, index, f"{word} NN I-NP {bad}".encode())
    refused_at = line
  elif mutation in ("extra_column", "missing_column"):
    new = f"{word} NN I-NP {tag} x" if mutation == "extra_column" else f"{word} NN {tag}"
    content = mutations.replace_line(content, index, new.encode())
    if k > 0 or mutation == "extra_column":
      refused_at = line  # its column count differs from the first token line's; "x" no tag
    elif len(tokens) > 1:
      refused_at = tokens[1][0] + 1  # the first token line sets the count: the next differs
    # else the only token line, still ending in its tag: the same sentences
  elif mutation == "duplicate_line":
    content = mutations.insert_line(content, index + 1, f"{word} NN I-NP {tag}".encode())
    words, tags, document = expected[s]
    expected[s] = (
        words[: position + 1] + words[position:],
        tags[: position + 1] + tags[position:],
        document,
    )
  elif mutation == "non_utf8":
    bad = data.draw(st.sampled_from(mutations.NON_UTF8))
    raw = word.encode()
    content = mutations.replace_line(
        content, index, raw[:1] + bad + raw[1:] + f" NN I-NP {tag}".encode()
    )
    refused_at = line
  elif mutation == "odd_character":
    odd = data.draw(st.sampled_from(mutations.ODD_CHARACTERS))
    new_word = word[:1] + odd + word[1:]
    content = mutations.replace_line(content, index, f"{new_word} NN I-NP {tag}".encode())
    words, tags, document = expected[s]
    expected[s] = (words[:position] + (new_word,) + words[position + 1 :], tags, document)
  elif mutation == "blank_line":
    # Next to the blank line that ends token k's sentence: still one sentence break.
    end = index + len(expected[s][0]) - position
    content = mutations.insert_line(content, end, data.draw(st.sampled_from([b"", b" \t "])))
  elif mutation == "tabs":
    content = mutations.replace_line(content, index, f"{word}\tNN \t I-NP\t{tag}".encode())
  elif mutation == "crlf":
    content = mutations.to_crlf(content)
  elif mutation == "no_final_newline":
    content = content.rstrip(b"\n")
  path = tmp_path / "train.txt"
  path.write_bytes(content)
  mutations.check_outcome(
      "conll",
      lambda: sentences(conll.read_conll(str(path))),
      str(path),
      expected=None if refused_at else expected,
      line=refused_at,
  )
