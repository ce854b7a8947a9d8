"""SQuAD v1.1 / v2.0 JSON files: the examples, and the rules a file must follow.

`read_squad` reads train-v1.1.json, dev-v2.0.json, ... into `SquadExample`s, checking the
structure field by field; an error names file:line and the JSON path of the question or
answer that breaks a rule. The rest of the SQuAD pipeline: `squad_alignment` (context
pieces ↔ characters), `squad_windows` (doc_stride windows into features) and
`squad_postprocessing` (span logits → answer texts).
"""

import bisect
import dataclasses
import functools
import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

from recurrent_bert import io_utils
from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import InputError
from recurrent_bert.tasks.span.squad_alignment import word_char_spans


@dataclasses.dataclass(frozen=True)
class SquadAnswer:
  text: str
  char_start: int  # context[char_start:char_start + len(text)] == text (checked)


@dataclasses.dataclass(frozen=True)
class SquadExample:
  """One question about one context.

  Attributes:
    qas_id: the question id (the key of predictions.json).
    question, context: the texts.
    answers: the gold answers (several in dev files, none in unlabeled files and for
      unanswerable questions).
    is_impossible: v2.0 unanswerable question.
    title: the article's title.
  """

  qas_id: str
  question: str
  context: str
  answers: Tuple[SquadAnswer, ...]
  is_impossible: bool = False
  title: str = ""


# ------------------------------------------------------------------------------ reader


class _LineDict(dict):
  """A JSON object remembering the line its "{" is on."""

  line = 0


def _parse_json_with_lines(text: str):
  """json.loads that records each object's line; slow (pure Python), used for errors only."""
  newline_offsets = [i for i, ch in enumerate(text) if ch == "\n"]
  decoder = json.JSONDecoder()

  def parse_object(s_and_end, *args, **kwargs):
    obj, end = json.decoder.JSONObject(s_and_end, *args, **kwargs)
    positioned = _LineDict(obj)
    # s_and_end[1] is just past the "{"; lines before it = newlines before it.
    positioned.line = bisect.bisect_left(newline_offsets, s_and_end[1] - 1) + 1
    return positioned, end

  decoder.parse_object = parse_object
  decoder.scan_once = json.scanner.py_make_scanner(decoder)
  return decoder.decode(text)


class _LineFinder:
  """JSON paths -> lines of a file's text; parses it (slowly) once, on first use."""

  def __init__(self, text: str):
    self._text = text
    self._document = None

  def line_of(self, json_path: Sequence) -> Optional[int]:
    """The line of the innermost object on json_path (keys and list indices), if found."""
    if self._document is None:
      self._document = _parse_json_with_lines(self._text)
    node, line = self._document, None
    for step in json_path:
      if isinstance(node, _LineDict):
        line = node.line
      try:
        node = node[step]
      except (KeyError, IndexError, TypeError):
        break
    if isinstance(node, _LineDict):
      line = node.line
    return line


class _SchemaError(Exception):

  def __init__(self, json_path: Sequence, message: str):
    super().__init__(message)
    self.json_path = list(json_path)
    self.message = message


def _path_text(json_path: Sequence) -> str:
  return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in json_path).lstrip(".")


def _field(obj: Any, key: str, expected_type, json_path: List, optional: bool = False):
  if not isinstance(obj, dict):
    raise _SchemaError(json_path, "expected a JSON object")
  if key not in obj:
    if optional:
      return None
    raise _SchemaError(json_path, f"missing field {key!r}")
  value = obj[key]
  wrong_bool = isinstance(value, bool) and expected_type is not bool
  if wrong_bool or not isinstance(value, expected_type):
    raise _SchemaError(
        json_path,
        f"field {key!r} should be {expected_type.__name__}, got {json.dumps(value)[:60]}",
    )
  return value


def read_squad(
    path: str,
    version: Optional[str] = None,
    *,
    require_answers: bool = False,
    skip_bad_rows: bool = False,
) -> SplitData:
  """Reads a SQuAD v1.1 or v2.0 JSON file (train-v1.1.json, dev-v2.0.json, ...).

  A labeled file (a training file, or any file where some question has an answer) must
  label every question: a v1.1 question needs at least one answer; a v2.0 question needs
  one unless it is `is_impossible` (then it has none; without the field, a v2.0 question
  with no answers is unanswerable). Every answer must have a text with at least one word
  (not empty, not only whitespace or dropped characters) and an answer_start inside the
  context where exactly that text is. Question ids are unique. A predict file without any
  answer is read as unlabeled (predictions only).

  Args:
    path: the JSON file.
    version: "1.1" or "2.0"; None: as the file's "version" field says (1.1 without one).
    require_answers: the file is training data: it must be labeled.
    skip_bad_rows: skip a question that breaks a rule above (a wrong or missing field of
      it included) instead of raising; each skip is listed in `SplitData.skipped`.

  Returns:
    SplitData of `SquadExample`s, in file order.

  Raises:
    InputError: unreadable file, invalid JSON, a missing/mistyped field, a question or
      answer breaking a rule above (unless skipped), or no question left; the message names
      file:line and the JSON path (data[i].paragraphs[j].qas[k]...).
  """
  try:
    with io_utils.open_file(path, "rb") as f:
      text = f.read().decode("utf-8")
  except OSError as e:
    raise InputError(f"cannot read SQuAD file {path!r}: {e.strerror or e}") from e
  except UnicodeDecodeError as e:
    line = e.object[: e.start].count(b"\n") + 1
    raise InputError(f"{path}:{line}: not valid UTF-8") from e
  try:
    document = json.loads(text)
  except json.JSONDecodeError as e:
    raise InputError(f"{path}:{e.lineno}: invalid JSON at column {e.colno}: {e.msg}") from e
  lines = _LineFinder(text)

  def place(error: _SchemaError) -> str:
    line = lines.line_of(error.json_path)
    where = f"{path}:{line}" if line is not None else path
    return f"{where}: {_path_text(error.json_path) or 'top level'}: {error.message}"

  if version is None:
    file_version = document.get("version") if isinstance(document, dict) else None
    is_v2 = isinstance(file_version, str) and file_version.lstrip("v").startswith("2")
    version = "2.0" if is_v2 else "1.1"
  reader = _SquadReader(
      version,
      labeled=require_answers or _has_answers(document),
      blank_texts=blank_texts_of(_answer_texts(document)),
  )
  result = SplitData(examples=[], source=path)
  try:
    for read_question in reader.questions(document):
      try:
        result.examples.append(read_question())
      except _SchemaError as e:
        if not skip_bad_rows:
          raise
        result.skipped.append(place(e))
  except _SchemaError as e:
    raise InputError(place(e)) from None
  if not result.examples:
    reason = f" (all {len(result.skipped)} were skipped as bad)" if result.skipped else ""
    raise InputError(f"{path}: no questions{reason}")
  return result


def _answer_lists(document: Any):
  """Every well-formed qas[k]["answers"] list of the document (for the file-wide checks)."""
  articles = document.get("data") if isinstance(document, dict) else None
  for article in articles if isinstance(articles, list) else []:
    paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
    for paragraph in paragraphs if isinstance(paragraphs, list) else []:
      qas = paragraph.get("qas") if isinstance(paragraph, dict) else None
      for qa in qas if isinstance(qas, list) else []:
        answers = qa.get("answers") if isinstance(qa, dict) else None
        if isinstance(answers, list):
          yield answers


def _has_answers(document: Any) -> bool:
  return any(answers for answers in _answer_lists(document))


def _answer_texts(document: Any) -> List[str]:
  return [
      answer["text"]
      for answers in _answer_lists(document)
      for answer in answers
      if isinstance(answer, dict) and isinstance(answer.get("text"), str)
  ]


def blank_texts_of(texts: Sequence[str]) -> set:
  """The texts without a word for the tokenizer (empty, whitespace, dropped characters)."""
  # A letter or digit is always a word, so only the others are asked of the tokenizer.
  doubtful = list({t for t in texts if not any(ch.isalnum() for ch in t)})
  spans = word_char_spans(doubtful) if doubtful else []
  return {t for t, words in zip(doubtful, spans) if not words}


class _SquadReader:
  """The rules of `read_squad`, question by question.

  Args:
    version: "1.1" or "2.0".
    labeled: every question must carry its answers (or v2.0's is_impossible).
    blank_texts: the answer texts without a word.
  """

  def __init__(self, version: str, labeled: bool, blank_texts: set):
    self.version = version
    self.labeled = labeled
    self.blank_texts = blank_texts
    self.seen_ids: Dict[str, List] = {}

  def questions(self, document: Any):
    """Yields one callable per question, in file order, returning its `SquadExample`.

    A callable raises _SchemaError for a bad question; the file's structure above the
    questions (data, paragraphs, context, qas) is checked as it is walked, and raises here.
    """
    for a, article in enumerate(_field(document, "data", list, [])):
      title = _field(article, "title", str, ["data", a], optional=True) or ""
      for p, paragraph in enumerate(_field(article, "paragraphs", list, ["data", a])):
        paragraph_path = ["data", a, "paragraphs", p]
        context = _field(paragraph, "context", str, paragraph_path)
        for q, qa in enumerate(_field(paragraph, "qas", list, paragraph_path)):
          qa_path = paragraph_path + ["qas", q]
          yield functools.partial(self.question, qa, qa_path, context, title)

  def question(self, qa: Any, qa_path: List, context: str, title: str) -> SquadExample:
    qas_id = _field(qa, "id", str, qa_path)
    question = _field(qa, "question", str, qa_path)
    is_impossible = _field(qa, "is_impossible", bool, qa_path, optional=True)
    answer_list = _field(qa, "answers", list, qa_path, optional=True)
    if is_impossible and self.version != "2.0":
      raise _SchemaError(
          qa_path, "is_impossible is a SQuAD v2.0 field; this file is read as v1.1 (--version)"
      )
    if answer_list is None and self.labeled:
      raise _SchemaError(
          qa_path, "missing field 'answers' (every question of a labeled file has one)"
      )
    answers = tuple(
        self.answer(answer, qa_path + ["answers", k], context)
        for k, answer in enumerate(answer_list or [])
    )
    if is_impossible and answers:
      raise _SchemaError(qa_path, "an is_impossible question must have no answers")
    if is_impossible is None:
      # v2.0 without the field: a question without answers is the unanswerable kind.
      is_impossible = self.version == "2.0" and self.labeled and not answers
    if self.labeled and not is_impossible and not answers:
      needs = "" if self.version == "1.1" else " unless it is_impossible"
      raise _SchemaError(
          qa_path, f"no answer: a question of a labeled SQuAD v{self.version} file needs one{needs}"
      )
    if qas_id in self.seen_ids:
      raise _SchemaError(
          qa_path,
          f"duplicate question id {qas_id!r} (first at {_path_text(self.seen_ids[qas_id])})",
      )
    self.seen_ids[qas_id] = qa_path
    return SquadExample(
        qas_id=qas_id,
        question=question,
        context=context,
        answers=answers,
        is_impossible=is_impossible,
        title=title,
    )

  def answer(self, answer: Any, answer_path: List, context: str) -> SquadAnswer:
    text = _field(answer, "text", str, answer_path)
    start = _field(answer, "answer_start", int, answer_path)
    if text in self.blank_texts:
      raise _SchemaError(answer_path, f"answer text {text!r} is blank: it needs a word")
    if not 0 <= start < len(context):
      raise _SchemaError(
          answer_path,
          f"answer_start {start} is outside the context (0..{len(context) - 1})",
      )
    if context[start : start + len(text)] != text:
      raise _SchemaError(
          answer_path,
          f"answer {text!r} is not at answer_start {start} of the context "
          f"(found {context[start:start + len(text)]!r})",
      )
    return SquadAnswer(text, start)
