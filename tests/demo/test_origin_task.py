"""recurrent_bert.demo.origin_task: documents with their source, the splits, the task."""

import pytest

from recurrent_bert.demo import origin_task
from recurrent_bert.errors import InputError


def _documents(num_sources=3, per_source=10, sentences=6):
  return [
      origin_task.Document(
          f"src{s}",
          [f"Sentence {i} of document {d} in source {s} is here." for i in range(sentences)],
      )
      for s in range(num_sources)
      for d in range(per_source)
  ]


def test_split_documents_is_stratified_disjoint_and_seeded():
  documents = _documents()
  splits = origin_task.split_documents(documents, 0.1, seed=3)
  for split in ("dev", "test"):
    assert sorted(d.source for d in splits[split]) == ["src0", "src1", "src2"]
  all_keys = [tuple(d.sentences) for s in splits.values() for d in s]
  assert len(all_keys) == len(set(all_keys)) == len(documents)
  again = origin_task.split_documents(documents, 0.1, seed=3)
  assert [d.sentences for d in again["dev"]] == [d.sentences for d in splits["dev"]]


def test_split_documents_refuses_a_tiny_corpus():
  with pytest.raises(InputError, match="too few"):
    origin_task.split_documents(_documents(1, 2), 0.1, seed=0)


def test_passages_group_consecutive_sentences():
  sentences = [" ".join(["word"] * 8)] * 7
  out = origin_task.passages(sentences, min_words=20, max_words=40)
  assert [len(p.split()) for p in out] == [24, 24, 8]  # 3 + 3 sentences, then the rest


def test_task_is_balanced_and_needs_two_sources(tmp_path):
  splits = origin_task.split_documents(_documents(3, 12, 12), 0.1, seed=0)
  classes = origin_task.choose_classes(splits, 2)
  assert len(classes) == 2
  counts = origin_task.write_task(str(tmp_path), splits, classes, 40, 10, seed=0)
  assert counts["train"]["examples"] == 40 and counts["train"]["per_class"] == 20
  rows = origin_task.read_tsv(str(tmp_path / "dev.tsv"))
  assert {r["label"] for r in rows} == set(classes)
  one_source = origin_task.split_documents(_documents(1, 12), 0.1, seed=0)
  with pytest.raises(InputError, match="two sources"):
    origin_task.choose_classes(one_source, 6)


def test_file_documents_label_each_file(tmp_path):
  (tmp_path / "a.txt").write_text("One a.\nTwo a.\n\nThree a.\nFour a.\n")
  (tmp_path / "b.txt").write_text("One b.\nTwo b.\n")
  documents = origin_task.file_documents([str(tmp_path / "a.txt"), str(tmp_path / "b.txt")])
  assert [(d.source, len(d.sentences)) for d in documents] == [("a", 2), ("a", 2), ("b", 2)]


def test_accuracy_on_test_joins_predictions_and_held_out_labels(tmp_path):
  (tmp_path / "p.tsv").write_text("index\tprediction\tprobability\nt-0\ta\t0.9\nt-1\tb\t0.6\n")
  (tmp_path / "l.tsv").write_text("index\tlabel\nt-0\ta\nt-1\ta\n")
  assert origin_task.accuracy_on_test(str(tmp_path / "p.tsv"), str(tmp_path / "l.tsv")) == (0.5, 2)
