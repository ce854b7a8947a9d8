"""Multiple choice through TFDS, offline: HellaSwag from a small dataset written here in
TFDS's own format (prepared data, as `tfds build` leaves it) and read by the installed
builder, so the records read back can be checked one by one (`tfds.testing.mock_data`
gives random labels and ending counts, nearly all refused)."""

import numpy as np
import pytest
import tensorflow_datasets as tfds

from recurrent_bert.errors import InputError
from recurrent_bert.tasks.multiple_choice import adapter as multiple_choice
from recurrent_bert.tasks.multiple_choice import tfds_reader
from recurrent_bert.tasks.multiple_choice.swag import ChoiceExample


class _Choices(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Writes a prepared `hellaswag` dataset of HellaSwag's features and version, which the
  installed HellaSwag builder then reads (unregistered: that builder stays registered)."""

  name = "hellaswag"
  VERSION = tfds.core.Version("1.1.0")
  RECORDS = {
      "validation": [
          ("the cat", ["sleeps", "flies", "swims", "reads"], 0),
          ("a dog", ["barks", "meows", "moos", "quacks"], 3),
          ("bad", ["x", "y", "z", "w"], 7),  # label out of range
      ],
      "train": [("a", ["x", "y", "z", "w"], 0), ("b", ["x", "y"], 1)],
      "test": [("unlabeled", ["a", "b", "c", "d"], -1)],
  }

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        features=tfds.features.FeaturesDict(
            {
                "context": tfds.features.Text(),
                "endings": tfds.features.Sequence(tfds.features.Text()),
                "activity_label": tfds.features.Text(),
                "label": np.int32,
                "split_type": tfds.features.Text(),
                "source_id": tfds.features.Text(),
            }
        ),
    )

  def _split_generators(self, dl_manager):
    return {split: self._generate_examples(split) for split in self.RECORDS}

  def _generate_examples(self, split):
    for i, (context, endings, label) in enumerate(self.RECORDS[split]):
      yield i, {
          "context": context,
          "endings": endings,
          "activity_label": "",
          "label": label,
          "split_type": "indomain",
          "source_id": "",
      }


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
  data_dir = str(tmp_path_factory.mktemp("tfds"))
  _Choices(data_dir=data_dir).download_and_prepare()
  return data_dir


def _content(examples):
  return sorted((e.context, e.endings, e.label) for e in examples)


def test_prepared_hellaswag_records_become_choice_examples(prepared):
  # TFDS stores records in an order of its own (shuffled by key): compared as sets.
  with pytest.raises(InputError, match=r"^tfds:hellaswag/validation: record [123]: label 7 "):
    tfds_reader.load_tfds_choices("hellaswag", "dev", data_dir=prepared)
  data = tfds_reader.load_tfds_choices("hellaswag", "dev", data_dir=prepared, skip_bad_rows=True)
  assert _content(data.examples) == [
      ("a dog", ("barks", "meows", "moos", "quacks"), 3),
      ("the cat", ("sleeps", "flies", "swims", "reads"), 0),
  ]
  # guid = the record's 0-based number: with the skipped record's, 0, 1 and 2.
  skipped_record = int(data.skipped[0].split("record ")[1].split(":")[0])
  assert sorted([*(e.guid for e in data.examples), str(skipped_record - 1)]) == ["0", "1", "2"]
  assert len(data.skipped) == 1
  # Two records with 2 and 4 endings: whichever comes second is refused.
  with pytest.raises(InputError, match=r"record 2: [24] endings; every record needs the same"):
    tfds_reader.load_tfds_choices("hellaswag", "train", data_dir=prepared)
  test = tfds_reader.load_tfds_choices("hellaswag", "test", data_dir=prepared)
  assert test.examples == [ChoiceExample("0", "unlabeled", ("a", "b", "c", "d"), None)]


def test_unprepared_or_unknown_choice_sets(tmp_path):
  with pytest.raises(InputError, match="tfds build hellaswag"):
    tfds_reader.load_tfds_choices("hellaswag", "train", data_dir=str(tmp_path))
  with pytest.raises(InputError, match="no TFDS source for 'swag'"):
    tfds_reader.load_tfds_choices("swag", "train", data_dir=str(tmp_path))


def test_choice_source_reads_hellaswag_from_tfds_only(prepared):
  source = multiple_choice.choice_source("hellaswag", use_tfds=True, tfds_data_dir=prepared)
  assert source.eval_splits == ("dev",) and source.predict_splits == ("dev", "test")
  assert source.read_split("test").examples[0].context == "unlabeled"
  with pytest.raises(InputError, match="no SWAG builder"):
    multiple_choice.choice_source("swag", use_tfds=True)
  with pytest.raises(InputError, match="hellaswag is read from TFDS"):
    multiple_choice.choice_source("hellaswag", data_dir=prepared)
