"""SQuAD v1.1 / v2.0: JSON reader, windowed features, and span post-processing.

Alignment. The tokenizer runs in TensorFlow and does not report where its pieces came
from, so the context is cut in Python first, keeping character offsets:
  1. split the context into the basic tokenizer's words, located in the original text
     (`tokenization.split_words_with_offsets`: the tokenizer's own definition of
     whitespace, dropped characters, punctuation and CJK; byte offsets turned into char
     offsets);
  2. tokenize each word on its own: every piece inherits its word's [char_start, char_end)
     in the ORIGINAL context, which never starts or ends with a dropped character (NUL,
     U+FEFF ...).
A predicted span of pieces (i..j) therefore maps to context[char_start(i):char_end(j)],
an exact substring of the original text (whitespace, punctuation, case and accents kept);
its granularity is the basic-tokenizer word, which is what the model can point at anyway.

A SentencePiece model has no such words (pieces cross punctuation; a word is a run of
pieces from a "▁" one): the whole context is tokenized at once and each piece keeps its
own characters (`tokenization.pieces_with_offsets`: the model's offsets, moved off the
whitespace a "▁" stands for), so spans are piece-grained. A lone "▁" piece covers no
character: it can neither start nor end a predicted span (nor can any piece with
char_end <= char_start), and an answer's piece span never starts or ends on one.

Windows (google-research/bert `run_squad.py`): the question is cut to max_query_length
pieces; the context pieces are covered by windows of max_seq_length − |question| − 3
pieces starting doc_stride apart; each feature is [CLS] question [SEP] window [SEP]. A
context piece seen by several windows is scored only in the window where it has the most
context on both sides (`token_is_max_context`).

Post-processing: for each window, the n_best_size best start and end positions among its
context pieces are paired (end ≥ start, at most max_answer_length pieces, start having
max context) and scored start_logit + end_logit; candidates from all windows of an
example are ranked together, duplicates of the same text dropped. For v2.0 the null score
is the smallest start_logit[CLS] + end_logit[CLS] over the windows; the question is
predicted unanswerable when null score − best span score > null_score_diff_threshold.
"""

import bisect
import dataclasses
import functools
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert.data import tokenization
from recurrent_bert.data.feature_cache import Features
from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import InputError
from recurrent_bert.tasks.pair_features import pack_pair
from recurrent_bert.tasks.pair_features import tokenize_texts

_TOKENIZE_BATCH_SIZE = 4096
# The odds written when no window offers any valid span: "certainly unanswerable".
_NO_SPAN_NULL_ODDS = 1e9


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


# ---------------------------------------------------------------------------- features


@dataclasses.dataclass
class ContextPieces:
  """A context's word pieces, each with the context characters it came from.

  Attributes:
    ids: int [P] piece ids.
    char_start, char_end: int [P]; piece i covers context[char_start[i]:char_end[i]]
      (the whole basic-tokenizer word it belongs to; a SentencePiece piece's own
      characters, char_end <= char_start for one that covers none).
  """

  ids: np.ndarray
  char_start: np.ndarray
  char_end: np.ndarray


def _byte_to_char_offsets(text: str) -> np.ndarray:
  """[len(utf-8 bytes) + 1] char offset of each byte offset of `text`."""
  sizes = [len(ch.encode("utf-8")) for ch in text]
  return np.repeat(np.arange(len(text) + 1), [*sizes, 1])


def word_char_spans(texts: Sequence[str]) -> List[List[Tuple[int, int]]]:
  """The basic tokenizer's words of each text, as [start, end) char offsets into it.

  Args:
    texts: N strings.

  Returns:
    N lists of (char_start, char_end), in text order.
  """
  spans: List[List[Tuple[int, int]]] = []
  for begin in range(0, len(texts), _TOKENIZE_BATCH_SIZE):
    batch = list(texts[begin : begin + _TOKENIZE_BATCH_SIZE])
    _, byte_starts, byte_ends = tokenization.split_words_with_offsets(tf.constant(batch, tf.string))
    for text, starts, ends in zip(batch, byte_starts.to_list(), byte_ends.to_list()):
      if len(text.encode("utf-8")) == len(text):  # ASCII: byte offsets are char offsets
        spans.append(list(zip(starts, ends)))
      else:
        char_of = _byte_to_char_offsets(text)
        spans.append([(int(char_of[a]), int(char_of[b])) for a, b in zip(starts, ends)])
  return spans


def _sentencepiece_context_pieces(contexts: Sequence[str], tokenizer) -> List[ContextPieces]:
  """`context_pieces` of a SentencePiece tokenizer: each piece at its own characters."""
  result = []
  for begin in range(0, len(contexts), _TOKENIZE_BATCH_SIZE):
    batch = list(contexts[begin : begin + _TOKENIZE_BATCH_SIZE])
    ids, byte_starts, byte_ends = tokenization.pieces_with_offsets(
        tokenizer, tf.constant(batch, tf.string)
    )
    for context, piece_ids, starts, ends in zip(
        batch, ids.to_list(), byte_starts.to_list(), byte_ends.to_list()
    ):
      char_of = _byte_to_char_offsets(context)
      result.append(
          ContextPieces(
              np.array(piece_ids, np.int64),
              char_of[np.array(starts, np.int64)].astype(np.int64),
              char_of[np.array(ends, np.int64)].astype(np.int64),
          )
      )
  return result


def context_pieces(contexts: Sequence[str], tokenizer) -> List[ContextPieces]:
  """Tokenizes contexts into pieces aligned to characters (module docstring, steps 1-2).

  Args:
    contexts: C context strings.
    tokenizer: a `tokenizer_interface.Tokenizer` (WordPiece or SentencePiece).

  Returns:
    C `ContextPieces`.
  """
  if tokenizer.kind == layout.SENTENCEPIECE:
    return _sentencepiece_context_pieces(contexts, tokenizer)
  words, word_spans, word_context = [], [], []
  for c, (context, spans) in enumerate(zip(contexts, word_char_spans(contexts))):
    words += [context[start:end] for start, end in spans]
    word_spans += spans
    word_context += [c] * len(spans)

  piece_ids = tokenize_texts(tokenizer, words)
  per_context: List[Tuple[List[int], List[int], List[int]]] = [([], [], []) for _ in contexts]
  for ids, (start, end), c in zip(piece_ids, word_spans, word_context):
    target = per_context[c]
    target[0].extend(ids)
    target[1].extend([start] * len(ids))
    target[2].extend([end] * len(ids))
  return [
      ContextPieces(np.array(ids, np.int64), np.array(starts, np.int64), np.array(ends, np.int64))
      for ids, starts, ends in per_context
  ]


def answer_piece_span(pieces: ContextPieces, answer: SquadAnswer) -> Optional[Tuple[int, int]]:
  """The smallest piece span [first, last] covering the answer's characters, or None."""
  char_end = answer.char_start + len(answer.text)
  first = int(np.searchsorted(pieces.char_end, answer.char_start, side="right"))
  last = int(np.searchsorted(pieces.char_start, char_end, side="left")) - 1
  return (first, last) if first <= last else None


def window_starts(num_pieces: int, window_length: int, doc_stride: int) -> List[int]:
  """Start offsets of the windows covering num_pieces pieces (the last one reaches the end)."""
  starts, start = [], 0
  while True:
    starts.append(start)
    if start + window_length >= num_pieces:
      return starts
    start += min(window_length, doc_stride)


def best_window_of_pieces(
    starts: Sequence[int], lengths: Sequence[int], num_pieces: int
) -> np.ndarray:
  """int [num_pieces]: the window in which each context piece has the most context.

  A piece's context in a window is min(pieces left of it, pieces right of it) plus a small
  bonus for longer windows (google-research/bert's rule); ties go to the earlier window.
  """
  starts = np.asarray(starts)[:, None]
  lengths = np.asarray(lengths)[:, None]
  pieces = np.arange(num_pieces)[None, :]
  left, right = pieces - starts, starts + lengths - 1 - pieces
  scores = np.where((left >= 0) & (right >= 0), np.minimum(left, right) + 0.01 * lengths, -np.inf)
  return np.argmax(scores, axis=0)  # the first maximum: the earlier window


def squad_features(
    examples: Sequence[SquadExample],
    tokenizer,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
) -> Features:
  """Converts examples into windowed features (one example → one or more rows).

  Args:
    examples: E `SquadExample`s.
    tokenizer: a `tokenizer_interface.Tokenizer` (WordPiece or SentencePiece).
    max_seq_length: T.
    doc_stride: distance, in pieces, between the starts of consecutive windows.
    max_query_length: questions are cut to this many pieces.

  Returns:
    dict of numpy arrays, N = number of windows:
      input_ids, input_mask, segment_ids: int32 [N, T]
      start_positions, end_positions: int32 [N]; the first answer's first/last piece in
        the row, 0 ([CLS]) when the window does not contain it, the question is
        unanswerable, or the example has no answers
      example_index: int32 [N], position of the row's example in `examples`
      token_char_start, token_char_end: int32 [N, T]; context char span of each context
        piece, -1 for [CLS], question, [SEP] and padding
      token_is_max_context: int32 [N, T]; 1 where this row is the piece's best window
  """
  rows: Dict[str, List[Any]] = {
      name: []
      for name in (
          "input_ids",
          "input_mask",
          "segment_ids",
          "start_positions",
          "end_positions",
          "example_index",
          "token_char_start",
          "token_char_end",
          "token_is_max_context",
      )
  }
  unique_contexts = list(dict.fromkeys(e.context for e in examples))
  pieces_of = dict(zip(unique_contexts, context_pieces(unique_contexts, tokenizer)))
  questions = tokenize_texts(tokenizer, [e.question for e in examples])

  for example_index, (example, question_ids) in enumerate(zip(examples, questions)):
    question_ids = question_ids[:max_query_length]
    max_window = max_seq_length - len(question_ids) - 3
    if max_window <= 0:
      raise ValueError(
          f"max_seq_length {max_seq_length} leaves no room for the context "
          f"after a {len(question_ids)}-piece question"
      )
    pieces = pieces_of[example.context]
    answer_span = None
    if example.answers and not example.is_impossible:
      answer_span = answer_piece_span(pieces, example.answers[0])
    starts = window_starts(len(pieces.ids), max_window, doc_stride)
    lengths = [min(max_window, len(pieces.ids) - s) for s in starts]
    best_window = best_window_of_pieces(starts, lengths, len(pieces.ids))
    context_offset = len(question_ids) + 2  # [CLS] question [SEP]
    for w, (start, length) in enumerate(zip(starts, lengths)):
      window = slice(start, start + length)
      input_ids, input_mask, segment_ids = pack_pair(
          question_ids,
          pieces.ids[window].tolist(),
          max_seq_length,
          tokenizer.cls_id,
          tokenizer.sep_id,
          tokenizer.pad_id,
      )
      char_start = np.full(max_seq_length, -1, np.int32)
      char_end = np.full(max_seq_length, -1, np.int32)
      max_context = np.zeros(max_seq_length, np.int32)
      inside = slice(context_offset, context_offset + length)
      char_start[inside] = pieces.char_start[window]
      char_end[inside] = pieces.char_end[window]
      max_context[inside] = best_window[window] == w
      start_position = end_position = 0
      if answer_span is not None and answer_span[0] >= start and answer_span[1] < start + length:
        start_position = answer_span[0] - start + context_offset
        end_position = answer_span[1] - start + context_offset
      for name, value in (
          ("input_ids", input_ids),
          ("input_mask", input_mask),
          ("segment_ids", segment_ids),
          ("start_positions", start_position),
          ("end_positions", end_position),
          ("example_index", example_index),
          ("token_char_start", char_start),
          ("token_char_end", char_end),
          ("token_is_max_context", max_context),
      ):
        rows[name].append(value)
  return {
      name: (
          np.array(values, np.int32)
          if values
          else np.zeros(
              (0,)
              if name in ("start_positions", "end_positions", "example_index")
              else (0, max_seq_length),
              np.int32,
          )
      )
      for name, values in rows.items()
  }


# ---------------------------------------------------------------------- post-processing


@dataclasses.dataclass
class SquadPredictions:
  """What the official files hold.

  Attributes:
    predictions: question id → answer text ("" = no answer, v2.0 only).
    nbest: question id → up to n_best_size dicts {text, probability, start_logit,
      end_logit}, best first; probabilities are a softmax over the listed scores.
    null_odds: question id → null score − best span score (v2.0 only, else empty).
  """

  predictions: Dict[str, str]
  nbest: Dict[str, List[Dict[str, Any]]]
  null_odds: Dict[str, float]


def _top_indices(logits: np.ndarray, allowed: np.ndarray, count: int) -> np.ndarray:
  """Indices of the `count` largest logits among allowed positions, best first."""
  candidates = np.flatnonzero(allowed)
  order = np.argsort(-logits[candidates], kind="stable")[:count]
  return candidates[order]


def _span_candidates(
    features: Mapping[str, np.ndarray],
    row: int,
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best_size: int,
    max_answer_length: int,
) -> List[Tuple[float, int, int, int]]:
  """(score, row, start, end) of the valid spans among a window's best starts and ends."""
  # Context pieces that cover a character (not SentencePiece's lone "▁").
  in_context = (features["token_char_start"][row] >= 0) & (
      features["token_char_end"][row] > features["token_char_start"][row]
  )
  starts = _top_indices(
      start_logits[row], in_context & (features["token_is_max_context"][row] > 0), n_best_size
  )
  ends = _top_indices(end_logits[row], in_context, n_best_size)
  candidates = []
  for start in starts:
    for end in ends:
      if start <= end < start + max_answer_length:
        candidates.append(
            (float(start_logits[row, start] + end_logits[row, end]), row, int(start), int(end))
        )
  return candidates


def _softmax(scores: Sequence[float]) -> List[float]:
  scores = np.asarray(scores, np.float64)
  exp = np.exp(scores - scores.max())
  return (exp / exp.sum()).tolist()


def postprocess_squad(
    examples: Sequence[SquadExample],
    features: Mapping[str, np.ndarray],
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> SquadPredictions:
  """Turns span logits into answer texts (exact substrings of the original contexts).

  Args:
    examples: the E examples the features were made from.
    features: the dict from `squad_features` (N rows).
    start_logits, end_logits: float [N, T], the model's outputs for those rows.
    n_best_size: starts and ends considered per window, and n-best entries kept.
    max_answer_length: longest answer, in pieces.
    version_2_with_negative: SQuAD 2.0: allow and score "no answer".
    null_score_diff_threshold: predict "" when null score − best span score exceeds it.

  Returns:
    SquadPredictions for every example.
  """
  start_logits = np.asarray(start_logits, np.float64)
  end_logits = np.asarray(end_logits, np.float64)
  rows_of: Dict[int, List[int]] = {}
  for row, example_index in enumerate(features["example_index"].tolist()):
    rows_of.setdefault(example_index, []).append(row)
  if start_logits.shape != features["input_ids"].shape or end_logits.shape != start_logits.shape:
    raise ValueError(
        f"logits {start_logits.shape}/{end_logits.shape} do not match the "
        f"features {features['input_ids'].shape}"
    )

  result = SquadPredictions({}, {}, {})
  for example_index, example in enumerate(examples):
    rows = rows_of.get(example_index, [])
    candidates = []
    for row in rows:
      candidates += _span_candidates(
          features, row, start_logits, end_logits, n_best_size, max_answer_length
      )
    candidates.sort(key=lambda c: -c[0])
    entries: List[Dict[str, Any]] = []
    seen_texts = set()
    for _, row, start, end in candidates:
      if len(entries) == n_best_size:
        break
      char_start = int(features["token_char_start"][row, start])
      char_end = int(features["token_char_end"][row, end])
      text = example.context[char_start:char_end]
      if text in seen_texts:
        continue
      seen_texts.add(text)
      entries.append(
          {
              "text": text,
              "start_logit": float(start_logits[row, start]),
              "end_logit": float(end_logits[row, end]),
          }
      )
    best_span = entries[0] if entries else None

    if version_2_with_negative and rows:
      null_row = min(rows, key=lambda r: start_logits[r, 0] + end_logits[r, 0])
      null_entry = {
          "text": "",
          "start_logit": float(start_logits[null_row, 0]),
          "end_logit": float(end_logits[null_row, 0]),
      }
      null_score = null_entry["start_logit"] + null_entry["end_logit"]
      entries.append(null_entry)
      entries.sort(key=lambda e: -(e["start_logit"] + e["end_logit"]))
      del entries[n_best_size:]
      if best_span is None:
        odds = _NO_SPAN_NULL_ODDS
      else:
        odds = null_score - (best_span["start_logit"] + best_span["end_logit"])
      result.null_odds[example.qas_id] = float(odds)
      prediction = "" if odds > null_score_diff_threshold else best_span["text"]
    else:
      prediction = best_span["text"] if best_span else ""

    if not entries:
      entries = [{"text": "", "start_logit": 0.0, "end_logit": 0.0}]
    for entry, probability in zip(
        entries, _softmax([e["start_logit"] + e["end_logit"] for e in entries])
    ):
      entry["probability"] = probability
    result.predictions[example.qas_id] = prediction
    result.nbest[example.qas_id] = entries
  return result
