"""`TaskAdapter.splits_read_by`: what each Finetuner mode reads (training/finetuning_runner.py
`Finetuner.run`: train fits on "train"; eval scores eval_splits; predict writes
predict_splits; train_and_eval does all three), written out per mode."""

import pytest

from recurrent_bert.errors import InputError
from recurrent_bert.training.task_adapter import TaskAdapter


def _adapter(eval_splits, predict_splits):
  adapter = TaskAdapter("/nonexistent", conversion_key={})
  adapter.eval_splits, adapter.predict_splits = eval_splits, predict_splits
  return adapter


@pytest.mark.parametrize(
    "mode, eval_splits, predict_splits, expected",
    [
        # train reads the labeled splits too: bad dev data stops it before training.
        ("train", ("dev",), ("test",), ["train", "dev"]),
        ("train", (), (), ["train"]),
        ("eval", ("dev_matched", "dev_mismatched"), ("test",), ["dev_matched", "dev_mismatched"]),
        ("predict", ("dev",), ("dev", "test"), ["dev", "test"]),
        # A split that is scored and predicted (SQuAD's dev, CoNLL's dev) is read once.
        ("train_and_eval", ("dev",), ("dev", "test"), ["train", "dev", "test"]),
    ],
)
def test_each_mode_reads_its_splits_once(mode, eval_splits, predict_splits, expected):
  assert _adapter(eval_splits, predict_splits).splits_read_by(mode) == expected


@pytest.mark.parametrize(
    "mode, eval_splits, predict_splits", [("eval", (), ("test",)), ("predict", ("dev",), ())]
)
def test_a_mode_with_nothing_to_read_names_itself(mode, eval_splits, predict_splits):
  with pytest.raises(InputError, match=f"--mode={mode}: no data for it"):
    _adapter(eval_splits, predict_splits).splits_read_by(mode)
