"""Issue 15 on the SuperGLUE readers (BoolQ, MultiRC JSONL): repeated ids, repeated keys and
non-UTF-8 lines refused with file:line, or skipped and counted with skip_bad_rows.

Expected examples are built from the records the test wrote (the module docstring of
superglue.py: BoolQ one pair per line, MultiRC one pair per answer).
"""

import json

from hypothesis import given
from hypothesis import strategies as st
import pytest

from recurrent_bert.errors import InputError
from recurrent_bert.tasks.classification import superglue
from tests.support import mutations


def write(tmp_path, task, content):
  folder = tmp_path / task
  folder.mkdir(parents=True, exist_ok=True)
  path = folder / "train.jsonl"
  if isinstance(content, bytes):
    path.write_bytes(content)
  else:
    path.write_text(content, encoding="utf-8", newline="")
  return str(folder), str(path)


def jsonl(*records):
  return "".join(
      (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in records
  )


def boolq(idx, question="q", label=True):
  return {"question": question, "passage": "p", "idx": idx, "label": label}


def multirc(idx, question_idxs=(0,), answer_idxs=(0, 1)):
  return {
      "idx": idx,
      "passage": {
          "text": f"paragraph {idx}",
          "questions": [
              {
                  "question": f"q{q}",
                  "idx": q,
                  "answers": [{"text": f"a{a}", "idx": a, "label": a % 2} for a in answer_idxs],
              }
              for q in question_idxs
          ],
      },
  }


@pytest.mark.parametrize(
    "task, records, line, message",
    [
        ("boolq", [boolq(3), boolq(4), boolq(3)], 3, "idx 3 repeats line 1"),
        ("multirc", [multirc(0), multirc(0)], 2, "idx 0 repeats line 1"),
        # The same question idx twice in a paragraph used to merge two exact-match groups.
        ("multirc", [multirc(0, question_idxs=(5, 5))], 1, "question idx 5 appears twice"),
        ("multirc", [multirc(0, answer_idxs=(1, 1))], 1, "answer idx 1 appears twice"),
        (
            "boolq",
            [boolq(1), '{"question": "q", "passage": "p", "idx": 2, "idx": 3, "label": true}'],
            2,
            "key 'idx': given twice in one object",
        ),
        (
            "boolq",
            [boolq(1), '{"question": "q", "passage": "p", "idx": NaN, "label": true}'],
            2,
            "field 'idx' should be an integer",
        ),
    ],
)
def test_repeated_ids_and_keys_name_file_and_line(tmp_path, task, records, line, message):
  folder, path = write(tmp_path, task, jsonl(*records))
  with pytest.raises(InputError) as error:
    superglue.read_superglue(folder, task, "train")
  assert str(error.value).startswith(f"{path}:{line}: "), str(error.value)
  assert message in str(error.value)


def test_non_utf8_line_is_refused_or_skipped(tmp_path):
  content = jsonl(boolq(1)).encode() + b'{"question": "caf\xe9"}\n' + jsonl(boolq(2)).encode()
  folder, path = write(tmp_path, "boolq", content)
  with pytest.raises(InputError, match=f"^{path}:2: not valid UTF-8"):
    superglue.read_superglue(folder, "boolq", "train")
  data = superglue.read_superglue(folder, "boolq", "train", skip_bad_rows=True)
  assert [e.index for e in data.examples] == [1, 2]
  assert [m.split(": ")[0] for m in data.skipped] == [f"{path}:2"]


def test_skip_bad_rows_skips_a_whole_multirc_paragraph(tmp_path):
  bad = multirc(1, question_idxs=(0, 0))
  folder, path = write(tmp_path, "multirc", jsonl(multirc(0), bad, multirc(0), multirc(2)))
  data = superglue.read_superglue(folder, "multirc", "train", skip_bad_rows=True)
  assert [e.index for e in data.examples] == [(0, 0, 0), (0, 0, 1), (2, 0, 0), (2, 0, 1)]
  assert [m.split(": ")[0] for m in data.skipped] == [f"{path}:2", f"{path}:3"]
  folder, path = write(tmp_path, "boolq", jsonl(boolq(1), boolq(1)))
  superglue.read_superglue(folder, "boolq", "train", skip_bad_rows=True)  # one left: fine
  folder, path = write(tmp_path, "boolq", jsonl("{", "[]"))
  with pytest.raises(InputError, match=f"^{path}: no usable example: all 2 rows are bad"):
    superglue.read_superglue(folder, "boolq", "train", skip_bad_rows=True)


def _without_answers_of_question_2():
  record = multirc(1, question_idxs=(0, 1, 2))
  record["passage"]["questions"][2]["answers"] = []
  return record


@pytest.mark.parametrize(
    "bad, field",
    [
        # Each used to drop its examples silently (18 -> 12 and 18 -> 15 in issue 31's run).
        (_without_answers_of_question_2(), "passage.questions[2].answers"),
        (multirc(1, question_idxs=()), "passage.questions"),
    ],
)
def test_multirc_empty_questions_or_answers_are_bad_lines(tmp_path, bad, field):
  folder, path = write(tmp_path, "multirc", jsonl(multirc(0), bad, multirc(2)))
  with pytest.raises(InputError) as error:
    superglue.read_superglue(folder, "multirc", "train")
  assert str(error.value) == f"{path}:2: field {field!r} is empty; it needs at least one item"
  data = superglue.read_superglue(folder, "multirc", "train", skip_bad_rows=True)
  assert [e.index for e in data.examples] == [(0, 0, 0), (0, 0, 1), (2, 0, 0), (2, 0, 1)]
  assert data.skipped == [str(error.value)]


# ---- The property: a valid file, one mutation, the invariant of issue 15. ----

WORDS = st.text(alphabet='abc "é東\\', min_size=1, max_size=6)
BAD_JSON_NUMBERS = ("NaN", "Infinity", "-Infinity", "1e400", "1.5", '"1"', "true", "null")


def expected_examples(task, record):
  if task == "boolq":
    return [
        (
            record["question"],
            record["passage"],
            "true" if record["label"] else "false",
            record["idx"],
        )
    ]
  passage = record["passage"]
  return [
      (
          passage["text"],
          f"{q['question']} {a['text']}",
          str(a["label"]),
          (record["idx"], q["idx"], a["idx"]),
      )
      for q in passage["questions"]
      for a in q["answers"]
  ]


@st.composite
def superglue_file(draw):
  task = draw(st.sampled_from(["boolq", "multirc"]))
  records = []
  for i in range(draw(st.integers(2, 4))):
    if task == "boolq":
      records.append(boolq(i * 3, draw(WORDS), draw(st.booleans())))
    else:
      record = multirc(i * 3, question_idxs=(0, 1), answer_idxs=(0, 1))
      record["passage"]["text"] = draw(WORDS)
      records.append(record)
  return task, records


MUTATIONS = [
    "bad_number",
    "duplicate_line",
    "repeated_key",
    "truncated",
    "non_utf8",
    "crlf",
    "blank_line",
    "no_final_newline",
]


@mutations.fuzz_settings()
@given(superglue_file(), st.sampled_from(MUTATIONS), st.data())
def test_property_superglue_jsonl_mutations(tmp_path, file, mutation, data):
  task, records = file
  k = data.draw(st.integers(0, len(records) - 1), label="record")
  line = k + 1
  lines = [json.dumps(r, ensure_ascii=False) for r in records]
  content = jsonl(*lines).encode()
  expected = [e for r in records for e in expected_examples(task, r)]
  refused_at = None
  if mutation == "bad_number":
    bad = data.draw(st.sampled_from(BAD_JSON_NUMBERS))
    new = lines[k].replace(f'"idx": {records[k]["idx"]}', f'"idx": {bad}', 1)
    content = mutations.replace_line(content, line - 1, new.encode())
    refused_at = line
  elif mutation == "duplicate_line":
    content = mutations.insert_line(content, line, lines[k].encode())
    refused_at = line + 1
  elif mutation == "repeated_key":
    content = mutations.replace_line(
        content, line - 1, lines[k].replace("{", '{"idx": 99, ', 1).encode()
    )
    refused_at = line
  elif mutation == "truncated":
    cut = data.draw(st.integers(1, len(lines[k]) - 1))
    content = mutations.replace_line(content, line - 1, lines[k][:cut].encode())
    refused_at = line
  elif mutation == "non_utf8":
    bad = data.draw(st.sampled_from(mutations.NON_UTF8))
    content = mutations.replace_line(content, line - 1, lines[k].encode() + bad)
    refused_at = line
  elif mutation == "crlf":
    content = mutations.to_crlf(content)
  elif mutation == "blank_line":
    content = mutations.insert_line(content, line - 1, b"   ")
  elif mutation == "no_final_newline":
    content = content.rstrip(b"\n")
  folder, path = write(tmp_path, task, content)

  def read():
    return [
        (e.text_a, e.text_b, e.label, e.index)
        for e in superglue.read_superglue(folder, task, "train").examples
    ]

  mutations.check_outcome(
      "superglue jsonl",
      read,
      path,
      expected=None if refused_at else expected,
      line=refused_at,
  )
