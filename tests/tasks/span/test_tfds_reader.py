"""SQuAD through TFDS, offline: `tfds.testing.mock_data` (random text: plumbing, not learning)."""

import numpy as np
import pytest
import tensorflow_datasets as tfds

from recurrent_bert.data.tokenization import BertWordpieceTokenizer
from recurrent_bert.errors import InputError
from recurrent_bert.tasks.span import squad
from recurrent_bert.tasks.span import squad_postprocessing
from recurrent_bert.tasks.span import squad_windows
from recurrent_bert.tasks.span import tfds_reader

NUM_EXAMPLES = 4


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
  return BertWordpieceTokenizer(vocab_file, do_lower_case=True)


def test_squad_through_mock_tfds(tmp_path, tokenizer):
  with tfds.testing.mock_data(num_examples=NUM_EXAMPLES):
    data = tfds_reader.load_tfds_squad("2.0", "dev", data_dir=str(tmp_path))
  assert len(data.examples) == NUM_EXAMPLES
  assert all(isinstance(e, squad.SquadExample) for e in data.examples)
  # Mock answers are random strings, not at their answer_start: all reported, none used.
  assert data.skipped and all(not e.answers for e in data.examples)
  features = squad_windows.squad_features(data.examples, tokenizer, 32, 8, 8)
  logits = np.zeros(features["input_ids"].shape, np.float32)
  result = squad_postprocessing.postprocess_squad(
      data.examples, features, logits, logits, version_2_with_negative=True
  )
  assert set(result.predictions) == {e.qas_id for e in data.examples}
  with pytest.raises(InputError, match="version"):
    tfds_reader.load_tfds_squad("3.0", "dev")
