"""SQuAD JSON the reader must refuse (issue 15), naming file:line, or skip with
skip_bad_rows: blank answers, unlabeled questions of a labeled file, answer_start outside
the context or not at its text, duplicate ids; and one bad file through finetune_squad.

Expected lines are found independently: the mutated object gets a "MARK" key first, and
json.dump(indent=2) puts its "{" on the line above that key.
"""

import json
import os
import re
import sys

from hypothesis import given
from hypothesis import strategies as st
import pytest

from recurrent_bert.errors import InputError
from recurrent_bert.tasks.span import squad
from tests.data.conftest import RESERVED
from tests.data.conftest import write_vocab
from tests.support import forkserver
from tests.support import mutations

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTEXTS = [
    "The cat sat on the mat in 1990.",
    "Zürich is a city; its lake is blue.",
    "A third paragraph, about nothing at all.",
]
# Question -> (paragraph, answer texts); the answers are at their first occurrence.
QUESTIONS = {
    "q1": (0, ["cat", "The cat"]),
    "q2": (0, ["1990"]),
    "q3": (1, ["Zürich"]),
    "q4": (1, ["blue"]),
    "q5": (2, ["nothing"]),
}
TF_NOISE = re.compile(r"WARNING: All log messages before absl::InitializeLog|[IWE]\d{4} ")
BLANK_TEXTS = ("", " ", "\t\n", "\u2028", "\x00", "\ufeff", "\u200b \x0b")


def valid_document():
  paragraphs = [{"context": context, "qas": []} for context in CONTEXTS]
  for qas_id, (p, texts) in QUESTIONS.items():
    context = CONTEXTS[p]
    paragraphs[p]["qas"].append(
        {
            "id": qas_id,
            "question": f"question {qas_id}?",
            "answers": [{"text": t, "answer_start": context.index(t)} for t in texts],
        }
    )
  return {"version": "1.1", "data": [{"title": "T", "paragraphs": paragraphs}]}


def reference_examples(document, skipped_ids=()):
  """The examples a valid v1.1 document holds, built directly from it."""
  return [
      squad.SquadExample(
          qa["id"],
          qa["question"],
          paragraph["context"],
          tuple(squad.SquadAnswer(a["text"], a["answer_start"]) for a in qa["answers"]),
          False,
          article.get("title", ""),
      )
      for article in document["data"]
      for paragraph in article["paragraphs"]
      for qa in paragraph["qas"]
      if qa["id"] not in skipped_ids
  ]


def write(path, document):
  with open(path, "w", encoding="utf-8") as f:
    json.dump(document, f, indent=2, ensure_ascii=False)
  return str(path)


def marked_line(path):
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, start=1):
      if '"MARK"' in line:
        return number - 1
  raise AssertionError("no MARK")


def mark(obj):
  marked = {"MARK": 1, **obj}
  obj.clear()
  obj.update(marked)


def qa_of(document, qas_id):
  return next(
      qa for p in document["data"][0]["paragraphs"] for qa in p["qas"] if qa["id"] == qas_id
  )


def read_train(path, skip_bad_rows=False):
  return squad.read_squad(path, "1.1", require_answers=True, skip_bad_rows=skip_bad_rows)


# --- The fuzz campaign's examples. ---------------------------------------------------------


@pytest.mark.parametrize("blank", BLANK_TEXTS)
def test_blank_answer_is_refused_at_its_line(tmp_path, blank):
  document = valid_document()
  answer = qa_of(document, "q2")["answers"][0]
  answer["text"] = blank
  mark(answer)
  path = write(tmp_path / "train.json", document)
  with pytest.raises(InputError) as error:
    read_train(path)
  assert str(error.value).startswith(
      f"{path}:{marked_line(path)}: data[0].paragraphs[0].qas[1].answers[0]: answer text"
  )
  assert "blank" in str(error.value)


def test_file_whose_answers_are_all_empty_is_refused_for_training(tmp_path):
  document = valid_document()
  for p in document["data"][0]["paragraphs"]:
    for qa in p["qas"]:
      qa["answers"] = []
  mark(document["data"][0]["paragraphs"][0]["qas"][0])
  path = write(tmp_path / "train.json", document)
  with pytest.raises(InputError, match=rf"^{path}:{marked_line(path)}: .*qas\[0\]: no answer"):
    read_train(path)
  # As a predict file it is unlabeled: read, for predictions only.
  examples = squad.read_squad(path, "1.1").examples
  assert [e.answers for e in examples] == [()] * len(QUESTIONS)


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_question_without_answers_key_in_a_labeled_file_is_refused(tmp_path, version):
  document = valid_document()
  qa = qa_of(document, "q3")
  del qa["answers"]
  mark(qa)
  path = write(tmp_path / "dev.json", document)
  expected = (
      rf"^{path}:{marked_line(path)}: data\[0\]\.paragraphs\[1\]\.qas\[0\]: missing field 'answers'"
  )
  with pytest.raises(InputError, match=expected):
    squad.read_squad(path, version)  # a dev file: labeled, since other questions have answers


def test_duplicate_question_id_is_refused_at_the_second(tmp_path):
  document = valid_document()
  qa = qa_of(document, "q4")
  qa["id"] = "q1"
  mark(qa)
  path = write(tmp_path / "train.json", document)
  with pytest.raises(InputError) as error:
    read_train(path)
  assert str(error.value) == (
      f"{path}:{marked_line(path)}: data[0].paragraphs[1].qas[1]: duplicate question id "
      "'q1' (first at data[0].paragraphs[0].qas[0])"
  )


@pytest.mark.parametrize("start", [-1, len(CONTEXTS[0]), 10**9])
def test_answer_start_outside_the_context_is_refused(tmp_path, start):
  document = valid_document()
  answer = qa_of(document, "q1")["answers"][1]
  answer["answer_start"] = start
  mark(answer)
  path = write(tmp_path / "train.json", document)
  with pytest.raises(InputError) as error:
    read_train(path)
  assert str(error.value) == (
      f"{path}:{marked_line(path)}: data[0].paragraphs[0].qas[0].answers[1]: answer_start "
      f"{start} is outside the context (0..{len(CONTEXTS[0]) - 1})"
  )


def test_answer_start_not_at_the_text_is_refused(tmp_path):
  document = valid_document()
  answer = qa_of(document, "q5")["answers"][0]
  answer["answer_start"] += 1
  mark(answer)
  path = write(tmp_path / "train.json", document)
  with pytest.raises(InputError, match=rf"^{path}:{marked_line(path)}: .*is not at answer_start"):
    read_train(path)


def test_v2_possible_question_needs_an_answer_and_v1_refuses_is_impossible(tmp_path):
  document = valid_document()
  qa = qa_of(document, "q2")
  qa["answers"], qa["is_impossible"] = [], False
  mark(qa)
  path = write(tmp_path / "train.json", document)
  with pytest.raises(InputError, match=rf"^{path}:{marked_line(path)}: .*unless it is_impossible"):
    squad.read_squad(path, "2.0", require_answers=True)
  qa["is_impossible"] = True
  path = write(tmp_path / "train.json", document)
  examples = squad.read_squad(path, "2.0", require_answers=True).examples
  assert [e.qas_id for e in examples if e.is_impossible] == ["q2"]
  with pytest.raises(InputError, match=rf"^{path}:{marked_line(path)}: .*v2.0 field"):
    read_train(path)


def test_skip_bad_rows_skips_and_counts_the_bad_questions(tmp_path):
  document = valid_document()
  qa_of(document, "q2")["answers"][0]["text"] = " "
  qa_of(document, "q4")["id"] = "q1"
  del qa_of(document, "q5")["answers"]
  path = write(tmp_path / "train.json", document)
  data = read_train(path, skip_bad_rows=True)
  assert data.examples == reference_examples(valid_document(), skipped_ids=("q2", "q4", "q5"))
  assert len(data.skipped) == 3
  assert all(message.startswith(f"{path}:") for message in data.skipped)
  # Nothing left: still refused, naming the file.
  for p in document["data"][0]["paragraphs"]:
    for qa in p["qas"]:
      qa["answers"] = []
  path = write(tmp_path / "train.json", document)
  with pytest.raises(InputError, match=rf"^{path}: no questions \(all 5 .*skipped"):
    read_train(path, skip_bad_rows=True)


# --- Property: mutated files. ----------------------------------------------------------------

_QUESTION_MUTATIONS = ("blank", "start out", "start off", "no answers key", "empty", "duplicate")


def _mutate_question(document, kind, qas_id, draw):
  """Breaks question `qas_id` in one way; returns the marked object (its line is named)."""
  qa = qa_of(document, qas_id)
  answer = qa["answers"][0]
  context = next(p["context"] for p in document["data"][0]["paragraphs"] if qa in p["qas"])
  if kind == "blank":
    answer["text"] = draw(st.sampled_from(BLANK_TEXTS))
    return answer
  if kind == "start out":
    answer["answer_start"] = draw(st.sampled_from([-5, -1, len(context), 10**6]))
    return answer
  if kind == "start off":
    answer["answer_start"] += draw(st.sampled_from([-1, 1, 2]))
    return answer
  if kind == "no answers key":
    del qa["answers"]
    return qa
  if kind == "empty":
    qa["answers"] = []
    return qa
  qa["id"] = "q1"  # the first question's id, on a later question
  return qa


@mutations.fuzz_settings()
@given(data=st.data())
def test_mutated_squad_files_are_refused_or_read_right(tmp_path_factory, data):
  path = str(tmp_path_factory.getbasetemp() / "mutated-train.json")
  skip = data.draw(st.booleans(), label="skip_bad_rows")
  document = valid_document()
  kind = data.draw(
      st.sampled_from(_QUESTION_MUTATIONS + ("odd context", "crlf", "non-utf8", "garbage line")),
      label="mutation",
  )
  read = lambda: (lambda d: (d.examples, len(d.skipped)))(read_train(path, skip))
  if kind in _QUESTION_MUTATIONS:
    # "duplicate" breaks the later of the two; any other question can be broken.
    qas_id = data.draw(
        st.sampled_from(["q2", "q3", "q4", "q5"] if kind == "duplicate" else list(QUESTIONS))
    )
    mark(_mutate_question(document, kind, qas_id, data.draw))
    write(path, document)
    expected = None
    if skip:
      expected = (reference_examples(valid_document(), skipped_ids=(qas_id,)), 1)
    mutations.check_outcome(
        "squad json", read, path, expected, line=None if skip else marked_line(path)
    )
    return
  if kind == "odd context":
    # An odd character inside a context, answers moved to stay on their text: valid.
    paragraph = data.draw(st.sampled_from(document["data"][0]["paragraphs"]))
    position = data.draw(st.integers(0, len(paragraph["context"])))
    odd = data.draw(st.sampled_from(mutations.ODD_CHARACTERS))
    context = paragraph["context"]
    paragraph["context"] = context[:position] + odd + context[position:]
    for qa in paragraph["qas"]:
      for answer in qa["answers"]:
        start, end = answer["answer_start"], answer["answer_start"] + len(answer["text"])
        if start >= position:
          answer["answer_start"] += 1
        elif end > position:  # the character lands inside the answer
          answer["text"] = paragraph["context"][start : end + 1]
    write(path, document)
    mutations.check_outcome("squad json", read, path, (reference_examples(document), 0))
    return
  write(path, document)
  with open(path, "rb") as f:
    raw = f.read()
  line = None
  if kind == "crlf":
    raw, expected = mutations.to_crlf(raw), (reference_examples(document), 0)
  else:
    index = data.draw(mutations.line_index(raw))
    expected = None
    if kind == "non-utf8":
      bad = data.draw(st.sampled_from(mutations.NON_UTF8))
      old = mutations.lines_of(raw)[index]
      raw, line = mutations.replace_line(raw, index, old.rstrip(b"\r\n") + bad), index + 1
    else:
      raw = mutations.insert_line(raw, index, b"],")
  with open(path, "wb") as f:
    f.write(raw)
  mutations.check_outcome("squad json", read, path, expected, line=line)


# --- The command. --------------------------------------------------------------------------


@pytest.mark.slow(seconds=10)
def test_finetune_squad_refuses_a_bad_file_in_one_line_before_building_a_model(tmp_path):
  document = valid_document()
  answer = qa_of(document, "q3")["answers"][0]
  answer["text"] = ""
  mark(answer)
  train = write(tmp_path / "train.json", document)
  vocab = write_vocab(tmp_path / "vocab.txt", RESERVED + ["the", "cat", "sat"])
  model_dir = tmp_path / "model"
  result = forkserver.run(
      [
          sys.executable,
          "-m",
          "recurrent_bert.finetune_squad",
          f"--train_file={train}",
          "--mode=train",
          "--model_config=bert_tiny",
          f"--vocab_file={vocab}",
          f"--model_dir={model_dir}",
          "--max_seq_length=32",
          "--max_query_length=8",
      ],
      REPO,
      dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO),
      timeout=300,
  )
  assert result.returncode == 2, result.stderr[-3000:]
  # TensorFlow's C++ start-up lines (no GPU ...) are not ours; everything else is.
  lines = [line for line in result.stderr.splitlines() if line.strip() and not TF_NOISE.match(line)]
  assert lines == [
      f"error: {train}:{marked_line(train)}: data[0].paragraphs[1].qas[0].answers[0]: "
      "answer text '' is blank: it needs a word"
  ], result.stderr[-3000:]
  assert not (model_dir / "checkpoints").exists() and not list(model_dir.glob("**/*.index"))
