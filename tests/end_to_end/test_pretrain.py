"""`python -m recurrent_bert.pretrain` as users run it: flagfiles, flag errors, phase 2
with XLA and bfloat16, the non-finite stop, and loading the exported encoder."""

import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert import saving
from recurrent_bert.data import tokenization
from tests.support import forkserver
from tests.training.conftest import REPO
from tests.training.conftest import SMALL_MODEL
from tests.training.conftest import corpus_file  # noqa: F401
from tests.training.conftest import losses_by_step
from tests.training.conftest import make_records
from tests.training.conftest import masked_records  # noqa: F401
from tests.training.conftest import pretrain_command
from tests.training.conftest import read_json
from tests.training.conftest import run_pretrain
from tests.training.conftest import small_config  # noqa: F401
from tests.training.conftest import subprocess_env
from tests.training.conftest import unmasked_records  # noqa: F401
from tests.training.conftest import vocab_file  # noqa: F401
from tests.training.conftest import wait_all

pytestmark = pytest.mark.slow(seconds=100)

CONFIGS = os.path.join(REPO, "configs", "pretrain")
# A rate and ETA on every line but one that covers only the first (compiling) call.
PROGRESS_LINE = re.compile(
    r"step (\d+)/(\d+) loss=\d+\.\d{3} mlm_acc=\d\.\d\d .*"
    r"lr=\d\.\de[+-]\d\d (?:[\d.]+ steps/s [\d.]+ ex/s ETA \S+|"
    r"\(first call, with compilation: [^)]*\))"
)


def read_flagfile(name):
  flags = {}
  with open(os.path.join(CONFIGS, name)) as f:
    for line in f:
      line = line.strip()
      if line.startswith("--"):
        key, _, value = line[2:].partition("=")
        flags[key] = value
  return flags


# SPEC §7, written out independently of the flagfiles:
# file -> (preset, seq len, global batch, steps, peak lr, warmup, beta2, NSP)
RECIPES = {
    "bert_base_phase1.flags": ("bert_base", 128, 256, 900000, 1e-4, 10000, 0.999, True),
    "bert_base_phase2.flags": ("bert_base", 512, 256, 100000, 1e-5, 0, 0.999, True),
    "bert_large_phase1.flags": ("bert_large", 128, 256, 900000, 1e-4, 10000, 0.999, True),
    "bert_large_phase2.flags": ("bert_large", 512, 256, 100000, 1e-5, 0, 0.999, True),
    "trans_blstm_base.flags": ("trans_blstm_2_base", 256, 256, 1000000, 1e-4, 10000, 0.999, True),
    "trans_blstm_small_base.flags": (
        "trans_blstm_small_2_base",
        256,
        256,
        1000000,
        1e-4,
        10000,
        0.999,
        True,
    ),
    "trans_blstm_1_base.flags": ("trans_blstm_1_base", 256, 256, 1000000, 1e-4, 10000, 0.999, True),
    "blstm_base.flags": ("blstm_base", 256, 256, 1000000, 1e-4, 10000, 0.999, True),
    "swishrnn_base.flags": ("swishrnn_base", 512, 1024, 300000, 3e-4, 20000, 0.98, False),
    "swishrnn_large.flags": ("swishrnn_large", 512, 4096, 300000, 2e-4, 20000, 0.98, False),
    "bert_rab_base.flags": ("bert_rab_base", 512, 1024, 300000, 3e-4, 20000, 0.98, False),
    "bert_rab_large.flags": ("bert_rab_large", 512, 4096, 300000, 2e-4, 20000, 0.98, False),
    # You et al. 2019 (LAMB), Table 1, 64K/32K mixed batch: 7037 + 1562 = 8599 updates;
    # lr and warmup as NVIDIA's LAMB recipe gives them (see the flagfiles' headers).
    "bert_large_lamb_phase1.flags": ("bert_large", 128, 65536, 7037, 6e-3, 2000, 0.999, True),
    "bert_large_lamb_phase2.flags": ("bert_large", 512, 32768, 1562, 4e-3, 200, 0.999, True),
}
LAMB_RECIPES = ("bert_large_lamb_phase1.flags", "bert_large_lamb_phase2.flags")


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_flagfiles_carry_the_papers_hyperparameters(name):
  preset, seq_len, batch, steps, lr, warmup, beta2, nsp = RECIPES[name]
  flags = read_flagfile(name)
  assert flags["model_config"] == preset
  assert int(flags["max_seq_length"]) == seq_len
  assert int(flags["train_batch_size"]) == batch
  assert int(flags["num_train_steps"]) == steps
  assert float(flags["learning_rate"]) == lr
  assert int(flags["warmup_steps"]) == warmup
  assert float(flags["adam_beta2"]) == beta2
  assert float(flags["weight_decay"]) == 0.01
  assert ("use_nsp" in flags) == nsp and ("nouse_nsp" in flags) == (not nsp)
  # max_predictions_per_seq ~ 15% of the sequence, as the data tool is told to write.
  assert abs(int(flags["max_predictions_per_seq"]) - 0.15 * seq_len) <= 0.15 * seq_len / 2
  assert flags.get("optimizer", "adamw") == ("lamb" if name in LAMB_RECIPES else "adamw")
  # The global batch splits into micro-batches on 8 replicas.
  assert batch % (int(flags.get("gradient_accumulation_steps", 1)) * 8) == 0


def test_every_flagfile_parses_and_validates():
  """absl --only_check_args: every flag exists and passes its validators (no TF work)."""
  names = sorted(n for n in os.listdir(CONFIGS) if n.endswith(".flags"))
  assert set(RECIPES) < set(names)
  processes = [
      subprocess.Popen(
          [
              sys.executable,
              "-m",
              "recurrent_bert.pretrain",
              f"--flagfile=configs/pretrain/{n}",
              "--only_check_args",
          ],
          cwd=REPO,
          env=subprocess_env(),
          stdout=subprocess.PIPE,
          stderr=subprocess.PIPE,
          text=True,
      )
      for n in names
  ]
  for name, (returncode, stderr) in zip(names, wait_all(processes, timeout=120)):
    assert returncode == 0, f"{name}: {stderr[-2000:]}"


TINY_FLAGFILES = ("tiny_bert.flags", "tiny_trans_blstm.flags", "tiny_swishrnn.flags")


def test_tiny_flagfiles_run_end_to_end(tmp_path, masked_records, unmasked_records, vocab_file):
  """Each tiny recipe as given, on test data (seq 64) for 6 steps; concurrently."""
  processes = []
  for flagfile in TINY_FLAGFILES:
    records = unmasked_records if "swishrnn" in flagfile else masked_records
    processes.append(
        forkserver.start(
            [
                sys.executable,
                "-m",
                "recurrent_bert.pretrain",
                f"--flagfile=configs/pretrain/{flagfile}",
                f"--input_files={records}",
                f"--vocab_file={vocab_file}",
                f"--model_dir={tmp_path / flagfile}",
                "--max_seq_length=64",
                "--max_predictions_per_seq=10",
                "--num_train_steps=6",
                "--warmup_steps=2",
                "--log_steps=3",
            ],
            REPO,
            subprocess_env(),
        )
    )
  for flagfile, (returncode, stderr) in zip(TINY_FLAGFILES, wait_all(processes, 400)):
    assert returncode == 0, f"{flagfile}: {stderr[-3000:]}"
    lines = [m.group(0) for m in PROGRESS_LINE.finditer(stderr)]
    assert [line.split()[1] for line in lines] == ["3/6", "6/6"], flagfile
    assert os.path.exists(tmp_path / flagfile / "encoder" / "encoder.index")
    assert os.listdir(tmp_path / flagfile / "train")  # TensorBoard events


def test_bad_flags_fail_before_any_work(tmp_path, masked_records, vocab_file):
  cases = {
      "--input_files": ["--input_files=/nonexistent/*.tfrecord"],
      "--max_seq_length=128": ["--max_seq_length=128", "--max_predictions_per_seq=20"],
      "--model_config": ["--model_config=bert_huge"],
      "--warmup_steps": ["--warmup_steps=50", "--num_train_steps=50"],
      "--dynamic_masking": ["--dynamic_masking"],  # the records are masked already
      "--init_checkpoint": [f"--init_checkpoint={tmp_path / 'nothing_here'}"],
  }
  processes = [
      forkserver.start(
          pretrain_command(tmp_path / str(i), vocab_file, masked_records, *flags),
          REPO,
          subprocess_env(),
      )
      for i, flags in enumerate(cases.values())
  ]
  for i, (flag, (returncode, stderr)) in enumerate(zip(cases, wait_all(processes, timeout=200))):
    assert returncode != 0, flag
    assert flag in stderr, (flag, stderr[-2000:])
    assert "Traceback" not in stderr, stderr[-2000:]
    model_dir = tmp_path / str(i)
    assert not (model_dir / "checkpoint").exists()


@pytest.fixture(scope="module")
def phase1_dir(tmp_path_factory, masked_records, vocab_file, small_config):
  """4 steps of the small bert at seq 64 (checkpoints at 2 and 4, encoder exported)."""
  model_dir = tmp_path_factory.mktemp("phase1")
  run_pretrain(
      model_dir,
      vocab_file,
      masked_records,
      f"--model_config={small_config}",
      "--num_train_steps=4",
      "--save_checkpoints_steps=2",
      "--steps_per_loop=2",
  )
  return model_dir


def test_phase2_longer_sequences_from_phase1_with_xla_and_bfloat16(
    tmp_path, tmp_path_factory, phase1_dir, corpus_file, vocab_file, small_config
):
  records_128 = make_records(
      tmp_path_factory.mktemp("seq128"),
      corpus_file,
      vocab_file,
      "--dupe_factor=1",
      seq_len=128,
      max_predictions=20,
  )
  # A vanishing learning rate: phase 2's weights must then still be phase 1's.
  result = run_pretrain(
      tmp_path,
      vocab_file,
      records_128,
      f"--model_config={small_config}",
      "--max_seq_length=128",
      "--max_predictions_per_seq=20",
      f"--init_checkpoint={phase1_dir}",
      "--jit_compile",
      "--mixed_precision=mixed_bfloat16",
      "--seed=5",
      "--num_train_steps=4",
      "--learning_rate=1e-12",
      "--weight_decay=0",
  )
  assert "initialised weights from" in result.stderr and "ckpt-4" in result.stderr
  losses = losses_by_step(tmp_path)
  assert sorted(losses) == [1, 2, 3, 4] and all(math.isfinite(x) for x in losses.values())
  phase1 = tf.train.load_checkpoint(os.path.join(phase1_dir, "encoder", "encoder"))
  phase2 = tf.train.load_checkpoint(os.path.join(tmp_path, "encoder", "encoder"))
  names = [n for n in phase1.get_variable_to_shape_map() if "VARIABLE_VALUE" in n]
  assert len(names) > 20
  for name in names:
    np.testing.assert_allclose(
        phase2.get_tensor(name), phase1.get_tensor(name), atol=1e-6, err_msg=name
    )


def test_load_encoder_from_export_model_dir_and_checkpoint(phase1_dir, vocab_file):
  vocab_size = len(tokenization.load_vocab(vocab_file))
  export_dir = os.path.join(phase1_dir, "encoder")
  assert sorted(os.listdir(export_dir)) == sorted(
      [
          "encoder.index",
          "encoder.data-00000-of-00001",
          "encoder.weights.h5",
          "model_config.json",
          "vocab.txt",
          "tokenizer.json",
          "export_info.json",
      ]
  )
  assert read_json(os.path.join(export_dir, "export_info.json"))["global_step"] == 4
  raw = tf.train.load_checkpoint(os.path.join(phase1_dir, "ckpt-4"))
  token_key = "model/embeddings.Stoken_embedding.Sembeddings/.ATTRIBUTES/VARIABLE_VALUE"
  for path in (str(phase1_dir), export_dir, os.path.join(phase1_dir, "ckpt-4")):
    encoder = saving.open_model(path).load_encoder()
    assert encoder.config.vocab_size == vocab_size
    np.testing.assert_array_equal(encoder.token_embeddings.numpy(), raw.get_tensor(token_key))
  outputs = encoder(
      {name: tf.ones([2, 16], tf.int32) for name in ("input_ids", "input_mask", "segment_ids")}
  )
  assert outputs["sequence_output"].shape == (2, 16, SMALL_MODEL["hidden_size"])
  # An older checkpoint is a different encoder.
  older = saving.open_model(os.path.join(phase1_dir, "ckpt-2")).load_encoder()
  assert not np.array_equal(older.token_embeddings.numpy(), raw.get_tensor(token_key))
  with pytest.raises(saving.ModelNotFoundError):
    saving.open_model(os.path.join(phase1_dir, "train")).load_encoder()


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(
    tmp_path, phase1_dir, masked_records, vocab_file, small_config
):
  model_dir = tmp_path / "run"
  shutil.copytree(phase1_dir, model_dir)
  shutil.rmtree(model_dir / "encoder")
  result = run_pretrain(
      model_dir,
      vocab_file,
      masked_records,
      f"--model_config={small_config}",
      "--num_train_steps=8",
      "--save_checkpoints_steps=2",
      "--steps_per_loop=2",
      "--learning_rate=1e30",
      "--clip_norm=0",
      check=False,
  )
  assert result.returncode == 1, result.stderr[-3000:]
  message = re.search(r"error: loss is (nan|inf|-inf) at step (\d+)", result.stderr)
  assert message, result.stderr[-3000:]
  bad_step = int(message.group(2))
  last_good = (bad_step - 1) // 2 * 2  # checkpoints every 2 steps, only before bad loss
  assert f"ckpt-{last_good}" in result.stderr
  assert tf.train.latest_checkpoint(str(model_dir)).endswith(f"ckpt-{last_good}")
  assert not (model_dir / "encoder").exists()
