"""The TFDS path, offline: `tfds.testing.mock_data` (random text: plumbing, not learning)."""

import types

import pytest
import tensorflow_datasets as tfds

from recurrent_bert.data.tokenization import BertWordpieceTokenizer
from recurrent_bert.errors import InputError
from recurrent_bert.tasks import pair_features
from recurrent_bert.tasks.classification import registry
from recurrent_bert.tasks.classification import tfds_reader

NUM_EXAMPLES = 4


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
  return BertWordpieceTokenizer(vocab_file, do_lower_case=True)


def test_unprepared_dataset_says_how_to_prepare_it(tmp_path):
  with pytest.raises(InputError) as error:
    tfds_reader.load_tfds_task("mrpc", "train", data_dir=str(tmp_path))
  message = str(error.value)
  assert "glue/mrpc" in message and "not prepared" in message
  assert f"tfds build glue/mrpc --data_dir={tmp_path}" in message


def test_every_task_has_a_tfds_source():
  assert set(tfds_reader.TFDS_SOURCES) == set(registry.GLUE_TASKS) | {"boolq", "multirc"}


def _fake_info(names):
  return types.SimpleNamespace(features={"label": types.SimpleNamespace(names=names)})


def test_label_ids_map_to_the_file_readers_label_names():
  mnli = tfds_reader._label_names(
      registry.get_task("mnli"), _fake_info(["entailment", "neutral", "contradiction"])
  )
  # TFDS orders MNLI's labels differently from the task's label list: matched by name.
  assert [mnli(i) for i in (0, 1, 2, -1)] == ["entailment", "neutral", "contradiction", None]
  cola = tfds_reader._label_names(
      registry.get_task("cola"), _fake_info(["unacceptable", "acceptable"])
  )
  assert [cola(0), cola(1)] == ["0", "1"]
  boolq = tfds_reader._label_names(registry.get_task("boolq"), _fake_info(["False", "True"]))
  assert [boolq(0), boolq(1)] == ["false", "true"]


def test_glue_and_superglue_through_mock_tfds(tmp_path, tokenizer):
  with tfds.testing.mock_data(num_examples=NUM_EXAMPLES):
    mnli = tfds_reader.load_tfds_task("mnli", "dev_mismatched", data_dir=str(tmp_path))
    stsb = tfds_reader.load_tfds_task("stsb", "train", data_dir=str(tmp_path))
    multirc = tfds_reader.load_tfds_task("multirc", "dev", data_dir=str(tmp_path))
  spec = registry.get_task("mnli")
  assert len(mnli.examples) == NUM_EXAMPLES
  assert mnli.source == "tfds:glue/mnli/validation_mismatched"
  for example in mnli.examples:
    assert isinstance(example.text_a, str) and isinstance(example.text_b, str)
    assert example.label in spec.label_list and isinstance(example.index, int)
  assert all(isinstance(e.label, float) for e in stsb.examples)
  for example in multirc.examples:
    assert example.label in ("0", "1")
    assert example.group == f"{example.index[0]}-{example.index[1]}"
  features = pair_features.convert_pair_examples(mnli.examples, tokenizer, 16, spec.label_list)
  assert features["input_ids"].shape == (NUM_EXAMPLES, 16)
  assert (features["label_ids"] >= 0).all()
