"""training/pretraining_runner.py: pretraining called from Python, against the command.

The reference is `python -m recurrent_bert.pretrain` itself: the same run made from
Python (settings object, data config, strategy) must write the same model_dir and log the
same losses, step by step. The settings' defaults are the command's flag defaults.
"""

import dataclasses
import glob
import math

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.config import ModelConfig
from recurrent_bert.data import vocab as vocab_lib
from recurrent_bert.data.pretraining_records import PretrainingDataConfig
from recurrent_bert.errors import InputError
from recurrent_bert.training import distribution
from recurrent_bert.training.finetuning_runner import FinetuneSettings
from recurrent_bert.training.pretraining_runner import PretrainSettings
from recurrent_bert.training.pretraining_runner import run_pretraining
from tests.support import forkserver
from tests.training.conftest import MAX_PREDICTIONS
from tests.training.conftest import REPO
from tests.training.conftest import SEQ_LEN
from tests.training.conftest import corpus_file  # noqa: F401
from tests.training.conftest import losses_by_step
from tests.training.conftest import masked_records  # noqa: F401
from tests.training.conftest import pretrain_command
from tests.training.conftest import small_config  # noqa: F401
from tests.training.conftest import subprocess_env
from tests.training.conftest import vocab_file  # noqa: F401


@pytest.mark.slow(seconds=23)
def test_the_runner_from_python_trains_as_the_command_does(
    tmp_path, masked_records, vocab_file, small_config
):
  command_dir = tmp_path / "command"
  command = forkserver.start(
      pretrain_command(
          command_dir,
          vocab_file,
          masked_records,
          f"--model_config={small_config}",
          "--num_train_steps=4",
      ),
      REPO,
      subprocess_env(),
  )
  # The same run from Python: pretrain_command's tiny defaults as settings.
  vocab_size = len(vocab_lib.load_vocab(vocab_file))
  with open(small_config, encoding="utf-8") as f:
    config = ModelConfig.from_json(f.read()).replace(vocab_size=vocab_size)
  settings = PretrainSettings(
      model_dir=str(tmp_path / "runner"),
      vocab_file=vocab_file,
      train_batch_size=8,
      num_train_steps=4,
      warmup_steps=2,
      learning_rate=1e-3,
      log_steps=1,
      steps_per_loop=4,
      save_checkpoints_steps=4,
  )
  data = PretrainingDataConfig(
      input_files=sorted(glob.glob(masked_records)),
      max_seq_length=SEQ_LEN,
      max_predictions_per_seq=MAX_PREDICTIONS,
      seed=settings.seed,
      shuffle_buffer_size=100,
      vocab_size=config.vocab_size,
      type_vocab_size=config.type_vocab_size,
  )
  final = run_pretraining(distribution.get_distribution_strategy("default"), config, settings, data)
  stdout, stderr = command.communicate(timeout=300)
  assert command.returncode == 0, stderr[-3000:]

  want, got = losses_by_step(command_dir), losses_by_step(tmp_path / "runner")
  assert sorted(got) == sorted(want) == [1, 2, 3, 4]
  np.testing.assert_allclose([got[s] for s in sorted(got)], [want[s] for s in sorted(want)], 1e-5)
  assert math.isfinite(final["loss"])
  for name in ("model_config.json", "tokenizer.json", "vocab.txt", "encoder/encoder.weights.h5"):
    assert (tmp_path / "runner" / name).is_file(), name
    assert (command_dir / name).is_file(), name
  # The exported encoders hold the same weights.
  ours = tf.train.load_checkpoint(str(tmp_path / "runner" / "encoder" / "encoder"))
  theirs = tf.train.load_checkpoint(str(command_dir / "encoder" / "encoder"))
  names = [n for n in theirs.get_variable_to_shape_map() if "VARIABLE_VALUE" in n]
  assert names
  for name in names:
    np.testing.assert_allclose(ours.get_tensor(name), theirs.get_tensor(name), atol=1e-5)


@pytest.mark.parametrize(
    "settings, command",
    [
        (PretrainSettings, "recurrent_bert.pretrain"),
        # finetune_squad's flags set SQuAD's own learning rate, 5e-5 (BERT §4.2).
        (FinetuneSettings, "recurrent_bert.finetune_glue"),
    ],
)
def test_settings_default_to_the_commands_flag_defaults(settings, command):
  """The settings' defaults are the command's without flags (tests/flags' snapshot)."""
  from tests.flags.flag_snapshot import SNAPSHOT

  flag_defaults = SNAPSHOT[command]
  for field in dataclasses.fields(settings):
    if field.name in ("model_dir", "mode"):
      continue  # required; pretrain's --mode default depends on --eval_input_files
    assert field.default == flag_defaults[field.name], field.name


def test_a_mode_without_its_records_is_refused(tmp_path):
  settings = PretrainSettings(model_dir=str(tmp_path), mode="train_and_eval")
  strategy = distribution.get_distribution_strategy("default")
  config = ModelConfig()
  with pytest.raises(InputError, match="train_and_eval needs held-out records"):
    run_pretraining(strategy, config, settings, data_config=object(), eval_data_config=None)
  with pytest.raises(InputError, match="is not one of"):
    PretrainSettings(model_dir=str(tmp_path), mode="fit")
  with pytest.raises(InputError, match="no checkpoint"):
    run_pretraining(
        strategy,
        config,
        dataclasses.replace(settings, mode="eval"),
        data_config=None,
        eval_data_config=object(),
    )
