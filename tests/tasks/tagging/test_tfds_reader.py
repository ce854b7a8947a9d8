"""TFDS conll2003, offline: `tfds.testing.mock_data` serving records written here through
the installed builder's real features (ClassLabel ids of TFDS's IOB2 tag names)."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from recurrent_bert.errors import InputError
from recurrent_bert.tasks.tagging import conll
from recurrent_bert.tasks.tagging import tfds_reader
from recurrent_bert.tasks.tagging.conll import TaggedSentence

# TFDS's ner label names, in id order (its CoNLL-2003 builder's NER_TAGS).
NER = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]

SENTENCES = {
    "dev": [
        (["EU", "rejects", "German", "call"], ["B-ORG", "O", "B-MISC", "O"]),
        (["Peter", "Blackburn"], ["B-PER", "I-PER"]),
        ([], []),  # TFDS's builder writes an empty record after a file's last blank line
        (["BRUSSELS"], ["B-LOC"]),
    ],
    "train": [(["Hapoel", "Haifa"], ["B-ORG", "I-ORG"])],
}


def as_dataset(self, split, **kwargs):
  del kwargs
  records = [
      {
          "tokens": np.array(words, dtype=object),
          "pos": np.zeros(len(words), np.int64),
          "chunks": np.zeros(len(words), np.int64),
          "ner": np.array([NER.index(t) for t in tags], np.int64),
      }
      for words, tags in SENTENCES[str(split)]
  ]
  return tf.data.Dataset.from_generator(
      lambda: iter(records),
      output_types=self.info.features.dtype,
      output_shapes=self.info.features.shape,
  )


def load(tmp_path, split, **kwargs):
  with tfds.testing.mock_data(as_dataset_fn=as_dataset):
    return tfds_reader.load_tfds_conll2003(split, data_dir=str(tmp_path), **kwargs)


def test_builder_is_installed_with_the_expected_tags():
  assert "conll2003" in tfds.list_builders()
  assert tuple(NER) == conll.CONLL2003_TAGS


def test_sentences_come_as_the_file_readers_make_them(tmp_path):
  data = load(tmp_path, "dev", label_list=conll.CONLL2003_TAGS)
  source = "tfds:conll2003/dev"
  assert data.source == source and data.skipped == []
  # Each sentence is its own document: TFDS keeps no document boundaries.
  assert data.examples == [
      TaggedSentence(
          ("EU", "rejects", "German", "call"), ("B-ORG", "O", "B-MISC", "O"), 0, f"{source}:1"
      ),
      TaggedSentence(("Peter", "Blackburn"), ("B-PER", "I-PER"), 1, f"{source}:2"),
      TaggedSentence(("BRUSSELS",), ("B-LOC",), 3, f"{source}:4"),
  ]
  assert [s.words for s in load(tmp_path, "train").examples] == [("Hapoel", "Haifa")]


def test_tags_outside_the_label_list(tmp_path):
  no_misc = [t for t in conll.CONLL2003_TAGS if not t.endswith("MISC")]
  with pytest.raises(InputError, match=r"^tfds:conll2003/dev: record 1: tag 'B-MISC' is not in"):
    load(tmp_path, "dev", label_list=no_misc)
  data = load(tmp_path, "dev", label_list=no_misc, skip_bad_rows=True)
  assert [s.words for s in data.examples] == [("Peter", "Blackburn"), ("BRUSSELS",)]
  assert len(data.skipped) == 1 and data.skipped[0].startswith("tfds:conll2003/dev: record 1:")


def test_unknown_split_and_unprepared_data(tmp_path):
  with pytest.raises(InputError, match="unknown split 'validation'; use one of train, dev, test"):
    tfds_reader.load_tfds_conll2003("validation", data_dir=str(tmp_path))
  with pytest.raises(InputError) as error:
    tfds_reader.load_tfds_conll2003("test", data_dir=str(tmp_path))
  assert "conll2003" in str(error.value) and "not prepared" in str(error.value)
  assert f"tfds build conll2003 --data_dir={tmp_path}" in str(error.value)
