"""SQuAD: reader, char-aligned windowed features, post-processing and prediction files."""

import json
import os

import numpy as np
import pytest

from recurrent_bert.data.tokenization import BertWordpieceTokenizer
from recurrent_bert.errors import InputError
from recurrent_bert.tasks import metrics
from recurrent_bert.tasks.span import squad
from recurrent_bert.tasks.span import squad_alignment
from recurrent_bert.tasks.span import squad_postprocessing
from recurrent_bert.tasks.span import squad_windows

CONTEXTS = [
    "Visit  Zürich,  “the city”  in 1990! It's (really) nice\u00a0there;\tokay?",
    "The function returns the value.\nA second line: naïve café, 東京 and CJK 中文字.",
    "  leading and trailing spaces, then a-hyphenated-word and e-mail@example.com  ",
]


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
  return BertWordpieceTokenizer(vocab_file, do_lower_case=True)


def squad_json(version, paragraphs):
  return {"version": version, "data": [{"title": "T", "paragraphs": paragraphs}]}


def write_json(path, obj):
  with open(path, "w", encoding="utf-8") as f:
    json.dump(obj, f, indent=2, ensure_ascii=False)
  return str(path)


def answer(context, text, occurrence=0):
  start = -1
  for _ in range(occurrence + 1):
    start = context.index(text, start + 1)
  return {"text": text, "answer_start": start}


# ------------------------------------------------------------------------------ reader


def test_reads_v1_and_v2_files(tmp_path):
  context = CONTEXTS[0]
  path = write_json(
      tmp_path / "dev-v2.0.json",
      squad_json(
          "v2.0",
          [
              {
                  "context": context,
                  "qas": [
                      {
                          "id": "q1",
                          "question": "Where?",
                          "answers": [
                              answer(context, "Zürich"),
                              answer(context, "Zürich,  “the city”"),
                          ],
                      },
                      {
                          "id": "q2",
                          "question": "Who?",
                          "answers": [],
                          "is_impossible": True,
                          "plausible_answers": [answer(context, "1990")],
                      },
                  ],
              }
          ],
      ),
  )
  examples = squad.read_squad(path).examples
  assert [e.qas_id for e in examples] == ["q1", "q2"]
  assert examples[0].answers == (
      squad.SquadAnswer("Zürich", 7),
      squad.SquadAnswer("Zürich,  “the city”", 7),
  )
  assert examples[0].context == context and examples[0].title == "T"
  assert examples[1].is_impossible and examples[1].answers == ()


def _line_containing(path, needle):
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, start=1):
      if needle in line:
        return number
  raise AssertionError(needle)


def test_misaligned_answer_names_file_line_and_path(tmp_path):
  context = CONTEXTS[1]
  path = write_json(
      tmp_path / "train.json",
      squad_json(
          "1.1",
          [
              {
                  "context": context,
                  "qas": [{"id": "ok", "question": "q", "answers": [answer(context, "value")]}],
              },
              {
                  "context": context,
                  "qas": [
                      {
                          "id": "bad",
                          "question": "q",
                          "answers": [
                              answer(context, "value"),
                              {"text": "WRONG-ANSWER", "answer_start": 4},
                          ],
                      }
                  ],
              },
          ],
      ),
  )
  # json.dump(indent=2) puts an object's "{" on the line before its first key.
  expected_line = _line_containing(path, "WRONG-ANSWER") - 1
  with pytest.raises(InputError) as error:
    squad.read_squad(path)
  assert str(error.value).startswith(
      f"{path}:{expected_line}: data[0].paragraphs[1].qas[0].answers[1]: answer "
      f"'WRONG-ANSWER' is not at answer_start 4"
  )


@pytest.mark.parametrize(
    "qa, message",
    [
        # "MARKER" comes first, so the qa object's "{" is on the line above it.
        ({"MARKER": 1, "id": "x", "answers": []}, "missing field 'question'"),
        ({"MARKER": 1, "id": 5, "question": "q", "answers": []}, "field 'id' should be str"),
        ({"MARKER": 1, "id": "ok", "question": "q", "answers": []}, "duplicate question id 'ok'"),
        (
            {
                "MARKER": 1,
                "id": "y",
                "question": "q",
                "is_impossible": True,
                "answers": [{"text": "The", "answer_start": 0}],
            },
            "an is_impossible question must have no answers",
        ),
    ],
)
def test_schema_errors_name_the_question_line(tmp_path, qa, message):
  context = CONTEXTS[1]
  path = write_json(
      tmp_path / "f.json",
      squad_json(
          "2.0", [{"context": context, "qas": [{"id": "ok", "question": "q", "answers": []}, qa]}]
      ),
  )
  expected_line = _line_containing(path, "MARKER") - 1
  with pytest.raises(InputError) as error:
    squad.read_squad(path)
  assert str(error.value).startswith(f"{path}:{expected_line}: data[0].paragraphs[0].qas[1]")
  assert message in str(error.value)


def test_invalid_json_names_the_line(tmp_path):
  path = tmp_path / "broken.json"
  path.write_text(
      '{"data": [\n  {"paragraphs": [\n    {"context": "c",,}\n]}]}\n', encoding="utf-8"
  )
  with pytest.raises(InputError, match=rf"^{path}:3: invalid JSON"):
    squad.read_squad(str(path))


# ----------------------------------------------------------------------- alignment


@pytest.mark.slow(seconds=6)
@pytest.mark.parametrize("context", CONTEXTS)
def test_context_pieces_match_tokenizer_and_original_characters(tokenizer, context):
  pieces = squad_alignment.context_pieces([context], tokenizer)[0]
  # Tokenizing word by word reproduces the tokenizer's pieces for the whole context...
  assert pieces.ids.tolist() == tokenizer.tokenize_flat([context]).to_list()[0]
  # ...and each run of pieces sharing a character span is exactly what the tokenizer
  # makes of those original characters.
  spans = list(zip(pieces.char_start.tolist(), pieces.char_end.tolist()))
  for span in dict.fromkeys(spans):
    ids = [i for i, s in zip(pieces.ids.tolist(), spans) if s == span]
    text = context[span[0] : span[1]]
    assert text and not any(ch.isspace() for ch in text)
    assert tokenizer.tokenize_flat([text]).to_list()[0] == ids, text


def test_windows_respect_doc_stride_and_max_query_length(tokenizer):
  context = " ".join(CONTEXTS * 3)
  question = "which function returns the value of the city in the second line of text"
  example = squad.SquadExample("q", question, context, ())
  max_seq_length, doc_stride, max_query_length = 32, 7, 5
  features = squad_windows.squad_features(
      [example], tokenizer, max_seq_length, doc_stride, max_query_length
  )
  all_pieces = tokenizer.tokenize_flat([context]).to_list()[0]
  question_pieces = tokenizer.tokenize_flat([question]).to_list()[0][:max_query_length]
  window_length = max_seq_length - len(question_pieces) - 3
  num_rows = len(features["input_ids"])
  assert num_rows > 2
  covered = np.zeros(len(all_pieces), int)
  best_window_count = np.zeros(len(all_pieces), int)
  starts = []
  for row in range(num_rows):
    ids = features["input_ids"][row].tolist()
    assert ids[: len(question_pieces) + 2] == (
        [tokenizer.cls_id] + question_pieces + [tokenizer.sep_id]
    )
    context_positions = np.flatnonzero(features["token_char_start"][row] >= 0)
    window = [ids[p] for p in context_positions]
    assert ids[context_positions[-1] + 1] == tokenizer.sep_id
    assert len(window) <= window_length
    # The window is a contiguous slice of the context's pieces, where stride says.
    start = row * doc_stride
    assert window == all_pieces[start : start + len(window)]
    starts.append(start)
    covered[start : start + len(window)] += 1
    best_window_count[start : start + len(window)] += features["token_is_max_context"][row][
        context_positions
    ]
    segment = features["segment_ids"][row]
    assert (segment[context_positions] == 1).all()
  assert covered.min() >= 1
  assert starts[-1] + window_length >= len(all_pieces) > starts[-2] + window_length
  # Every piece is scored in exactly one window.
  assert (best_window_count == 1).all()
  assert (features["example_index"] == 0).all()


# ------------------------------------------------------------- post-processing roundtrip


def _find_sublist(haystack, needle):
  for i in range(len(haystack) - len(needle) + 1):
    if haystack[i : i + len(needle)] == needle:
      return i
  return None


GOLD = [
    (0, "Zürich,  “the city”"),
    (0, "(really) nice\u00a0there"),
    (1, "naïve café, 東京"),
    (1, "中文字."),
    (2, "a-hyphenated-word"),
    (2, "e-mail@example.com"),
]


def _logits_pointing_at_gold(features, tokenizer, gold_texts, value=10.0):
  """Start/end logits [N, T] that are `value` at the gold answer's first/last piece.

  The gold pieces are found from the tokenizer alone (the answer text's own pieces,
  searched for in each row's context part), independently of post-processing.
  """
  start_logits = np.zeros(features["input_ids"].shape, np.float32)
  end_logits = np.zeros_like(start_logits)
  for row, example_index in enumerate(features["example_index"]):
    answer_ids = tokenizer.tokenize_flat([gold_texts[example_index]]).to_list()[0]
    context_part = np.where(
        features["token_char_start"][row] >= 0, features["input_ids"][row], -1
    ).tolist()
    position = _find_sublist(context_part, answer_ids)
    if position is not None:
      start_logits[row, position] = value
      end_logits[row, position + len(answer_ids) - 1] = value
  return start_logits, end_logits


def test_roundtrip_returns_exact_original_substrings(tokenizer):
  examples = [
      squad.SquadExample(
          f"q{i}", "what is it?", CONTEXTS[c], (squad.SquadAnswer(text, CONTEXTS[c].index(text)),)
      )
      for i, (c, text) in enumerate(GOLD)
  ]
  features = squad_windows.squad_features(
      examples, tokenizer, max_seq_length=64, doc_stride=16, max_query_length=8
  )
  assert len(features["input_ids"]) == len(examples)  # one window each
  gold_texts = [text for _, text in GOLD]
  start_logits, end_logits = _logits_pointing_at_gold(features, tokenizer, gold_texts)
  result = squad_postprocessing.postprocess_squad(
      examples, features, start_logits, end_logits, n_best_size=5, max_answer_length=30
  )
  assert result.predictions == {f"q{i}": text for i, text in enumerate(gold_texts)}
  scores = metrics.squad_v1_scores(metrics.squad_gold_answers(examples), result.predictions)
  assert scores["exact_match"] == 100.0 and scores["f1"] == 100.0


def test_roundtrip_across_overlapping_windows(tokenizer):
  filler = " ".join(["the value of the function"] * 6)
  context = f"{filler} Zürich,  “the city”  {filler}"
  gold = "Zürich,  “the city”"
  example = squad.SquadExample(
      "w", "where?", context, (squad.SquadAnswer(gold, context.index(gold)),)
  )
  features = squad_windows.squad_features(
      [example], tokenizer, max_seq_length=32, doc_stride=8, max_query_length=4
  )
  start_logits, end_logits = _logits_pointing_at_gold(features, tokenizer, [gold])
  rows_with_answer = int((start_logits.max(axis=1) > 0).sum())
  assert len(features["input_ids"]) > 3 and rows_with_answer >= 2
  result = squad_postprocessing.postprocess_squad(
      [example], features, start_logits, end_logits, n_best_size=5, max_answer_length=30
  )
  assert result.predictions == {"w": gold}
  # The same text from several windows appears once in the n-best list.
  texts = [e["text"] for e in result.nbest["w"]]
  assert texts.count(gold) == 1


SIMPLE_CONTEXT = "the value of the function is returned to the caller"
WORDS = SIMPLE_CONTEXT.split()


@pytest.fixture
def simple_case(tokenizer):
  assert all(tokenizer.convert_tokens_to_ids([w])[0] != tokenizer.unk_id for w in WORDS)
  example = squad.SquadExample("s", "what happens?", SIMPLE_CONTEXT, ())
  features = squad_windows.squad_features([example], tokenizer, 64, 32, 16)
  offset = int(np.flatnonzero(features["token_char_start"][0] >= 0)[0])
  assert features["input_ids"][0, offset : offset + len(WORDS)].tolist() == (
      tokenizer.convert_tokens_to_ids(WORDS)
  )  # one piece per word
  start = np.full((1, 64), -10.0)
  end = np.full((1, 64), -10.0)
  # Question and [CLS] get the largest logits: they must never become the answer.
  start[0, :offset] = end[0, :offset] = 50.0
  for word_index, value in ((1, 5.0), (6, 4.0)):  # value, returned
    start[0, offset + word_index] = value
  for word_index, value in ((0, 7.0), (2, 3.0), (7, 2.5), (9, 6.0)):  # the, of, to, caller
    end[0, offset + word_index] = value
  return example, features, start, end, offset


@pytest.mark.parametrize(
    "max_answer_length, expected_text, expected_score",
    [
        # Starts: value(1)=5, returned(6)=4. Ends: the(0)=7, of(2)=3, to(7)=2.5, caller(9)=6.
        # (1, 0) has end < start; (1, 9) and (6, 9) are longer than 3 pieces; (1, 7) too.
        # Valid: (1, 2) "value of" = 8, (6, 7) "returned to" = 6.5.
        (3, "value of", 8.0),
        # With 4 pieces allowed, (6, 9) "returned to the caller" = 10 wins.
        (4, "returned to the caller", 10.0),
    ],
)
def test_max_answer_length_and_end_after_start(
    simple_case, max_answer_length, expected_text, expected_score
):
  example, features, start, end, _ = simple_case
  result = squad_postprocessing.postprocess_squad(
      [example], features, start, end, n_best_size=20, max_answer_length=max_answer_length
  )
  assert result.predictions == {"s": expected_text}
  best = result.nbest["s"][0]
  assert best["text"] == expected_text
  assert best["start_logit"] + best["end_logit"] == pytest.approx(expected_score)
  assert sum(e["probability"] for e in result.nbest["s"]) == pytest.approx(1.0)
  assert result.null_odds == {}


@pytest.mark.parametrize(
    "cls_logit, threshold, expected",
    [
        # Null score 2·3 = 6, best span "value of" = 8: odds 6 − 8 = −2.
        (3.0, 0.0, "value of"),
        (3.0, -3.0, ""),  # odds −2 > −3: no answer
        (5.0, 0.0, ""),  # null 10, odds +2
    ],
)
def test_version_2_null_odds_and_threshold(simple_case, cls_logit, threshold, expected):
  example, features, start, end, offset = simple_case
  start[0, :offset] = end[0, :offset] = -20.0
  start[0, 0] = end[0, 0] = cls_logit
  result = squad_postprocessing.postprocess_squad(
      [example],
      features,
      start,
      end,
      n_best_size=20,
      max_answer_length=3,
      version_2_with_negative=True,
      null_score_diff_threshold=threshold,
  )
  assert result.predictions == {"s": expected}
  assert result.null_odds["s"] == pytest.approx(2 * cls_logit - 8.0)
  assert "" in [e["text"] for e in result.nbest["s"]]


def test_prediction_files(tmp_path, simple_case):
  example, features, start, end, offset = simple_case
  start[0, :offset] = end[0, :offset] = -20.0
  start[0, 0] = end[0, 0] = 3.0  # null score 6, best span 8: odds -2
  result = squad_postprocessing.postprocess_squad(
      [example], features, start, end, 20, 3, version_2_with_negative=True
  )
  paths = squad_postprocessing.write_squad_predictions(str(tmp_path / "out"), result, True)
  assert sorted(os.listdir(tmp_path / "out")) == [
      "nbest_predictions.json",
      "null_odds.json",
      "predictions.json",
  ]
  with open(paths["predictions.json"], encoding="utf-8") as f:
    assert json.load(f) == {"s": "value of"}
  with open(paths["nbest_predictions.json"], encoding="utf-8") as f:
    nbest = json.load(f)["s"]
  # Scores: "value of" 8, "returned to" 6.5, null 6, then spans with -10 logits.
  assert [e["text"] for e in nbest[:3]] == ["value of", "returned to", ""]
  assert set(nbest[0]) == {"text", "probability", "start_logit", "end_logit"}
  with open(paths["null_odds.json"], encoding="utf-8") as f:
    assert json.load(f) == pytest.approx({"s": -2.0})
