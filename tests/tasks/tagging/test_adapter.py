"""TaggingAdapter without a model: reading (word-tag files, a label list inferred, an
unlabeled predict file), scores of given logits, and the CoNLL prediction files, against
hand-written expectations."""

import numpy as np
import pytest

from recurrent_bert.data.tokenization import BertWordpieceTokenizer
from recurrent_bert.errors import InputError
from recurrent_bert.tasks.tagging import adapter as token_tagging
from recurrent_bert.tasks.tagging import conll
from tests.data.conftest import RESERVED
from tests.data.conftest import write_vocab

TRAIN = "-DOCSTART-\tO\n\njohn\tB-PER\nsees\tO\n\nparis\tB-LOC\n\n-DOCSTART-\tO\n\nsees\tO\n"
TEST = "-DOCSTART-\n\nparis\nsees\njohn\n\n-DOCSTART-\n\njohn\n"


@pytest.fixture
def adapter(tmp_path):
  vocab = write_vocab(tmp_path / "vocab.txt", RESERVED + ["john", "sees", "paris"])
  files = {}
  for split, text in (("train", TRAIN), ("dev", TRAIN), ("test", TEST)):
    files[split] = str(tmp_path / f"{split}.txt")
    with open(files[split], "w", encoding="utf-8") as f:
      f.write(text)
  options = dict(file_format="word_tag")
  labels = conll.infer_label_list(
      token_tagging.tagging_reader(files, None, **options)("train").examples
  )
  return token_tagging.TaggingAdapter(
      token_tagging.tagging_reader(files, labels, **options),
      BertWordpieceTokenizer(vocab),
      str(tmp_path / "cache"),
      labels,
      token_tagging.TaggingSettings(max_seq_length=8),
      predict_splits=("dev", "test"),
  )


def logits_for(adapter, split, tags_per_sentence):
  """Logits [N, T, K] whose argmax at each word's scored piece is the given tag."""
  features = adapter.features(split)
  logits = np.zeros((*features["input_ids"].shape, len(adapter.label_list)), np.float32)
  for row, position in zip(*np.nonzero(features["word_index"] >= 0)):
    sentence = tags_per_sentence[features["example_index"][row]]
    tag = sentence[features["word_index"][row, position]]
    logits[row, position, adapter.label_list.index(tag)] = 1.0
  return {"logits": logits}


def test_scores_and_prediction_files(adapter, tmp_path):
  assert adapter.label_list == ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
  assert adapter.info.kind == "tagger" and adapter.info.main_metric == "f1"
  adapter.prepare(["train", "dev", "test"])
  # dev: john right, paris tagged O (a missed LOC): 1 of 2 chunks found, none wrong.
  outputs = logits_for(adapter, "dev", [["B-PER", "O"], ["O"], ["O"]])
  scores = adapter.evaluate("dev", outputs)
  assert scores["precision"] == 100.0 and scores["recall"] == 50.0
  assert scores["f1"] == pytest.approx(200 / 3) and scores["accuracy"] == 75.0
  assert scores["num_sentences"] == 3
  (path,) = adapter.write_predictions("dev", outputs, str(tmp_path / "out"))
  with open(path, encoding="utf-8") as f:
    assert f.read() == (
        "-DOCSTART- O O\n\njohn B-PER B-PER\nsees O O\n\nparis B-LOC O\n\n"
        "-DOCSTART- O O\n\nsees O O\n\n"
    )
  # The predict file has no tags: "word predicted".
  outputs = logits_for(adapter, "test", [["B-LOC", "O", "B-PER"], ["B-PER"]])
  (path,) = adapter.write_predictions("test", outputs, str(tmp_path / "out"))
  assert path.endswith("test_predictions.txt")
  with open(path, encoding="utf-8") as f:
    assert f.read() == (
        "-DOCSTART- O\n\nparis B-LOC\nsees O\njohn B-PER\n\n-DOCSTART- O\n\njohn B-PER\n\n"
    )


def test_no_docstart_lines_for_tfds_sentences(adapter, tmp_path):
  adapter.docstart_lines = False  # TFDS: every sentence its own document
  adapter.prepare(["dev"])
  outputs = logits_for(adapter, "dev", [["O", "O"], ["O"], ["O"]])
  (path,) = adapter.write_predictions("dev", outputs, str(tmp_path / "out"))
  with open(path, encoding="utf-8") as f:
    assert "DOCSTART" not in f.read()


@pytest.mark.parametrize(
    "text, expected",
    [
        (TEST, ()),  # words only: read unlabeled
        ("-DOCSTART-\tO\n\njohn\tB-PER\nsees\tO\n", ("B-PER", "O")),  # labeled: gold kept
    ],
)
def test_the_test_file_is_labeled_when_its_lines_hold_tags(tmp_path, text, expected):
  path = tmp_path / "test.txt"
  path.write_text(text, encoding="utf-8")
  read = token_tagging.tagging_reader({"test": str(path)}, ["O", "B-PER"], file_format="word_tag")
  assert read("test").examples[0].tags == expected


def test_a_bad_tag_in_a_labeled_test_file_is_refused_not_dropped(tmp_path):
  path = tmp_path / "test.txt"
  path.write_text("john\tB-PER\nsees\tB-XYZ\n", encoding="utf-8")
  read = token_tagging.tagging_reader({"test": str(path)}, ["O", "B-PER"], file_format="word_tag")
  with pytest.raises(InputError, match=rf"{path}:2:"):
    read("test")
