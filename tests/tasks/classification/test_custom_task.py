"""Custom TSV tasks: columns found by header name, labels inferred, errors with file:line."""

import pytest

from recurrent_bert.errors import InputError
from recurrent_bert.tasks.classification import custom_task


def _write(path, lines):
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_columns_by_name_in_any_order_and_labels_sorted(tmp_path):
  _write(
      tmp_path / "train.tsv",
      ["label\tsentence2\tsentence1", "pos\tB one\tA one", 'neg\tB two\tA "two"'],
  )
  _write(tmp_path / "test.tsv", ["index\tsentence1\tsentence2", "7\tA\tB"])
  assert custom_task.infer_label_list(str(tmp_path)) == ["neg", "pos"]
  train = custom_task.read_custom(str(tmp_path), "train", ["neg", "pos"])
  first, second = train.examples
  assert (first.text_a, first.text_b, first.label) == ("A one", "B one", "pos")
  assert second.text_a == 'A "two"'  # no quoting, as in GLUE
  assert first.index == "2"  # no index column: the line number
  test = custom_task.read_custom(str(tmp_path), "test", ["neg", "pos"])
  assert test.examples[0].index == "7" and test.examples[0].label is None


def test_single_sentence_task(tmp_path):
  _write(tmp_path / "dev.tsv", ["sentence\tlabel", "hello\ta", "world\tb"])
  dev = custom_task.read_custom(str(tmp_path), "dev", ["a", "b"])
  assert [(e.text_a, e.text_b) for e in dev.examples] == [("hello", None), ("world", None)]


@pytest.mark.parametrize(
    "lines,message",
    [
        (["text\tlabel", "x\ta"], "train.tsv:1: header"),
        (["sentence\tlabel", "x\ta", "y"], "train.tsv:3: expected 2"),
        (["sentence\tlabel", "x\tc"], "train.tsv:2: label 'c'"),
    ],
)
def test_bad_files_name_file_and_line(tmp_path, lines, message):
  _write(tmp_path / "train.tsv", lines)
  with pytest.raises(InputError, match=message):
    custom_task.read_custom(str(tmp_path), "train", ["a", "b"])


def test_missing_file_and_too_few_labels(tmp_path):
  with pytest.raises(InputError, match="does not exist"):
    custom_task.read_custom(str(tmp_path), "dev", ["a", "b"])
  with pytest.raises(InputError, match="at least 2 labels"):
    custom_task.task_spec(["only"])
