"""CoNLL-2003 (and generic word<TAB>tag) readers: sentences of words with one tag each.

CoNLL-2003 as distributed (eng.train / eng.testa / eng.testb, or train.txt / valid.txt /
test.txt): one token per line, `word POS chunk NER` separated by spaces (runs of spaces
or tabs are accepted), blank lines between sentences, and a `-DOCSTART- -X- -X- O` line
at the start of each document (that line is not a sentence). The NER tags are IOB1 in the
original files (a chunk starts with I- unless it directly follows a chunk of the same
type) and IOB2 in many re-distributions (every chunk starts with B-); one tag set,
`CONLL2003_TAGS`, serves both. `read_conll` takes the tag from `tag_column` (default the
last; POS or chunk tags are other columns, though only IOB-style tags are accepted).

The generic format (`read_word_tag`) is `word<TAB>tag` per line, blank lines between
sentences, and optionally -DOCSTART- lines as well (in either format, a line whose first
space- or tab-separated field is -DOCSTART- starts a document, whatever else it holds).
A word must not contain whitespace (a "New York<TAB>B-LOC" line is one word per line gone
wrong).

Unlabeled files (`labeled=False`): lines with only the word (or any columns after it,
which are ignored) give sentences whose tags are ().

Both readers accept CRLF line ends, blank lines (also of spaces/tabs) anywhere, and a
missing final blank line. Tags accepted: "O" and PREFIX-TYPE with PREFIX one of B, I, E, S
(IOB1, IOB2 and IOBES) and TYPE any non-empty text without whitespace; the official
conlleval script takes any PREFIX-TYPE, but a U- or L- tag (BILOU) would be scored as
something else there, so it is refused here. With a `label_list`, a tag must also be in it.

Each of these is an `InputError` naming file:line: a line that is not UTF-8, too few
columns for the tag column, a column count different from the file's first token line, a
malformed tag or one not in the label list, an empty word or one with whitespace (generic
format); and a file without a sentence. With `skip_bad_rows`, the whole sentence holding a
bad line is skipped instead and listed (one "file:line: what" per sentence, the first bad
line) in `SplitData.skipped`.
"""

import dataclasses
import re
from typing import Callable, List, Optional, Sequence, Tuple

from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import InputError
from recurrent_bert.errors import at
from recurrent_bert.tasks import text_rows

# The CoNLL-2003 NER tags, in TFDS's (and Hugging Face's) order of label ids.
CONLL2003_TAGS: Tuple[str, ...] = (
    "O",
    "B-PER",
    "I-PER",
    "B-ORG",
    "I-ORG",
    "B-LOC",
    "I-LOC",
    "B-MISC",
    "I-MISC",
)

# The line that starts a document; its other columns ("-X- -X- O") are not read.
DOCSTART = "-DOCSTART-"

# "O", or B-/I-/E-/S- and a type (module docstring).
_TAG = re.compile(r"O|[BIES]-\S+")
_CONLL_SEPARATOR = re.compile(r"[ \t]+")
# A -DOCSTART- line in either format, whatever follows it.
_DOCSTART_LINE = re.compile(r"[ \t]*-DOCSTART-(?:[ \t]|$)")


@dataclasses.dataclass(frozen=True)
class TaggedSentence:
  """One sentence of a CoNLL-style file.

  Attributes:
    words: the words, in order.
    tags: one tag per word; () for an unlabeled file.
    document: 0-based index of its document within the file (counting -DOCSTART- lines;
      text before the first -DOCSTART- is document 0).
    guid: "<path>:<line of its first word>".
  """

  words: Tuple[str, ...]
  tags: Tuple[str, ...]
  document: int
  guid: str


def tag_problem(tag: str, label_list: Optional[Sequence[str]] = None) -> Optional[str]:
  """Why `tag` is not a usable tag (malformed, or not in `label_list`), or None."""
  if not _TAG.fullmatch(tag):
    return f"tag {tag!r} is not O or B-/I-/E-/S- and a type (e.g. B-PER)"
  if label_list is not None and tag not in label_list:
    return f"tag {tag!r} is not in the label list {', '.join(label_list)}"
  return None


def word_problem(word: str) -> Optional[str]:
  """Why `word` is not a usable word (empty, or holding whitespace), or None."""
  if not word:
    return "empty word"
  if any(c.isspace() for c in word):
    return f"word {word!r} contains whitespace; write one word per line"
  return None


def check_label_list(label_list: Sequence[str], where: str = "label list") -> Tuple[str, ...]:
  """`label_list` as a tuple, each tag well-formed and given once.

  Raises:
    InputError: a malformed or repeated tag ("<where>: ...").
  """
  for i, tag in enumerate(label_list):
    problem = tag_problem(tag)
    if problem is not None:
      raise InputError(f"{where}: {problem}")
    if tag in label_list[:i]:
      raise InputError(f"{where}: tag {tag!r} is given twice")
  if not label_list:
    raise InputError(f"{where}: no tags")
  return tuple(label_list)


@dataclasses.dataclass(frozen=True)
class _Format:
  """How one file format splits a token line and which column holds what."""

  split: Callable[[str], List[str]]
  columns: Callable[[int], str]  # describes n columns for messages ("3 columns")
  tag_column: int
  check_words: bool  # refuse words with whitespace
  max_columns: Optional[int] = None  # labeled: exactly this many (generic format)


def read_conll(
    path: str,
    *,
    tag_column: int = -1,
    label_list: Optional[Sequence[str]] = None,
    skip_bad_rows: bool = False,
    labeled: bool = True,
) -> SplitData:
  """Reads a CoNLL-2003-format file (module docstring).

  Args:
    path: the file.
    tag_column: 0-based column of the tag (negative counts from the end); not 0, the word.
    label_list: the allowed tags (None: any well-formed tag).
    skip_bad_rows: skip sentences with a bad line (listed in `SplitData.skipped`) instead
      of refusing the file.
    labeled: False for files without tags (any columns after the word are ignored).

  Returns:
    SplitData whose examples are `TaggedSentence`s, in file order.

  Raises:
    InputError: a bad line (module docstring) unless skipped, or no sentence; names
      file:line.
  """
  if tag_column == 0:
    raise InputError(f"tag column {tag_column} is the word column; the tag is another column")
  fmt = _Format(
      split=lambda line: _CONLL_SEPARATOR.split(line.strip(" \t")),
      columns=lambda n: f"{n} space-separated column{'s' if n != 1 else ''}",
      tag_column=tag_column,
      check_words=False,
  )
  return _read(path, fmt, label_list, skip_bad_rows, labeled)


def read_word_tag(
    path: str,
    *,
    label_list: Optional[Sequence[str]] = None,
    skip_bad_rows: bool = False,
    labeled: bool = True,
) -> SplitData:
  """Reads a generic `word<TAB>tag` file (module docstring); arguments as `read_conll`."""
  fmt = _Format(
      split=lambda line: line.split("\t"),
      columns=lambda n: f"{n} tab-separated column{'s' if n != 1 else ''}",
      tag_column=1,
      check_words=True,
      max_columns=2,
  )
  return _read(path, fmt, label_list, skip_bad_rows, labeled)


def infer_label_list(sentences: Sequence[TaggedSentence]) -> Tuple[str, ...]:
  """The tag set of labeled sentences: "O" first, then by type, B- before I- (E-, S-).

  Every type seen gets both its B- and I- tag (an IOB1 training file may never use B-PER,
  yet a dev file or a prediction can), and E-/S- tags too if any IOBES tag is seen, so the
  list fits every file of the same scheme.

  Raises:
    InputError: the sentences hold no tags (unlabeled).
  """
  tags = {tag for sentence in sentences for tag in sentence.tags}
  if not tags:
    raise InputError("cannot infer a label list: the sentences have no tags (unlabeled file?)")
  prefixes = "BIES" if any(tag[0] in "ES" for tag in tags if tag != "O") else "BI"
  types = sorted({tag[2:] for tag in tags if tag != "O"})
  return ("O",) + tuple(f"{prefix}-{type_}" for type_ in types for prefix in prefixes)


def _read(
    path: str,
    fmt: _Format,
    label_list: Optional[Sequence[str]],
    skip_bad_rows: bool,
    labeled: bool,
) -> SplitData:
  """Reads one file of `fmt` into TaggedSentences (see read_conll)."""
  labels = None if label_list is None else check_label_list(label_list)
  data = SplitData(examples=[], source=path)
  bad_rows = text_rows.BadRows(data, skip_bad_rows)
  tag_column = fmt.tag_column
  needed = 1 if not labeled else (tag_column + 1 if tag_column >= 0 else 1 - tag_column)
  first_token_line: Optional[Tuple[int, int]] = None  # (line number, columns)
  document = -1
  words: List[str] = []
  tags: List[str] = []
  first_line = 0
  sentence_is_bad = False

  def end_sentence():
    nonlocal words, tags, sentence_is_bad
    if words and not sentence_is_bad:
      data.examples.append(
          TaggedSentence(tuple(words), tuple(tags), document, f"{path}:{first_line}")
      )
    words, tags, sentence_is_bad = [], [], False

  for line_number, line, problem in text_rows.read_text_lines(path):
    if problem is None and not line.strip(" \t"):
      end_sentence()
      continue
    if line is not None and _DOCSTART_LINE.match(line):
      end_sentence()
      document += 1
      continue
    if not words and not sentence_is_bad:
      first_line = line_number
      document = max(document, 0)
    if sentence_is_bad:
      continue  # the rest of a skipped sentence
    fields = [] if line is None else fmt.split(line)
    if problem is None:
      problem = _line_problem(fields, fmt, needed, first_token_line, labeled, labels)
    if problem is not None:
      sentence_is_bad = True
      if skip_bad_rows:
        problem += "; its sentence is skipped"
      bad_rows.refuse(at(path, line_number), problem)
      continue
    if first_token_line is None:
      first_token_line = (line_number, len(fields))
    words.append(fields[0])
    if labeled:
      tags.append(fields[tag_column])
  end_sentence()
  if not data.examples and not data.skipped:
    raise InputError(
        f"{path}: no sentences (the file is empty or holds only blank and {DOCSTART} lines)"
    )
  bad_rows.check_not_empty()
  return data


def _line_problem(
    fields: List[str],
    fmt: _Format,
    needed: int,
    first_token_line: Optional[Tuple[int, int]],
    labeled: bool,
    labels: Optional[Tuple[str, ...]],
) -> Optional[str]:
  """Why a token line is unusable (columns, word, tag), or None."""
  n = len(fields)
  if labeled and fmt.max_columns is not None and n != fmt.max_columns:
    return f"expected word and tag ({fmt.columns(fmt.max_columns)}), found {fmt.columns(n)}"
  if n < needed:
    return f"found {fmt.columns(n)}, but the tag column ({fmt.tag_column}) needs at least {needed}"
  if fmt.max_columns is not None and n > fmt.max_columns:
    return f"expected at most {fmt.columns(fmt.max_columns)}, found {fmt.columns(n)}"
  if first_token_line is not None and n != first_token_line[1]:
    line, columns = first_token_line
    return (
        f"found {fmt.columns(n)}, but line {line} has {columns}; every token line of a file "
        "has the same columns"
    )
  if fmt.check_words:
    problem = word_problem(fields[0])
    if problem is not None:
      return problem
  return tag_problem(fields[fmt.tag_column], labels) if labeled else None
