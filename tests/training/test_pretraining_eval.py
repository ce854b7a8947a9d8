"""Held-out pretraining metrics against numpy, on real records from the data tool.

The reference reads every record with plain protobuf parsing, runs the model once on all
of them (no batching, no padding), and computes the masked-LM and NSP cross-entropy and
accuracy in numpy from the logits. The evaluator must agree whatever its batch size,
padding and step cap.
"""

import glob
import json
import sys

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert import io_utils
from recurrent_bert import model_dir as model_dir_lib
from recurrent_bert.config import get_preset
from recurrent_bert.data import pretraining_dataset
from recurrent_bert.data import tokenization
from recurrent_bert.data.pretraining_dataset import PretrainingDataConfig
from recurrent_bert.models import Pretrainer
from recurrent_bert.models import build_encoder
from recurrent_bert.training.pretraining_eval import PretrainingEvaluator
from recurrent_bert.training.pretraining_eval import record_eval_results
from tests.support import forkserver
from tests.training.conftest import MAX_PREDICTIONS
from tests.training.conftest import REPO
from tests.training.conftest import SEQ_LEN
from tests.training.conftest import run_pretrain
from tests.training.conftest import subprocess_env

pytestmark = pytest.mark.slow(seconds=60)

NAMES = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
)


def read_records(pattern):
  rows = {name: [] for name in NAMES}
  for path in sorted(glob.glob(pattern)):
    for raw in tf.data.TFRecordDataset(path).as_numpy_iterator():
      feature = tf.train.Example.FromString(raw).features.feature
      for name in NAMES:
        values = feature[name]
        rows[name].append(
            list(values.float_list.value)
            if name == "masked_lm_weights"
            else list(values.int64_list.value)
        )
  return {name: np.array(values) for name, values in rows.items()}


def log_softmax(logits):
  shifted = logits - logits.max(-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def numpy_metrics(model, records, limit=None):
  """MLM/NSP loss and accuracy of the first `limit` records, from one forward pass."""
  records = {name: values[:limit] for name, values in records.items()}
  inputs = {
      name: tf.constant(records[name], tf.int32)
      for name in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")
  }
  outputs = model(inputs, training=False)
  mlm = log_softmax(np.asarray(outputs["mlm_logits"], np.float64))
  ids, weights = records["masked_lm_ids"], records["masked_lm_weights"]
  picked = np.take_along_axis(mlm, ids[..., None], axis=-1)[..., 0]
  mlm_loss = -(weights * picked).sum() / weights.sum()
  mlm_accuracy = (weights * (mlm.argmax(-1) == ids)).sum() / weights.sum()
  nsp = log_softmax(np.asarray(outputs["nsp_logits"], np.float64))
  labels = records["next_sentence_labels"][:, 0]
  nsp_loss = -nsp[np.arange(len(labels)), labels].mean()
  nsp_accuracy = (nsp.argmax(-1) == labels).mean()
  return {
      "mlm_loss": mlm_loss,
      "mlm_accuracy": mlm_accuracy,
      "nsp_loss": nsp_loss,
      "nsp_accuracy": nsp_accuracy,
      "num_examples": float(len(labels)),
      "num_predictions": float(weights.sum()),
  }


@pytest.fixture(scope="module")
def model(vocab_file):
  vocab_size = len(tokenization.load_vocab(vocab_file))
  config = get_preset("bert_tiny").replace(
      vocab_size=vocab_size, num_layers=1, max_position_embeddings=SEQ_LEN
  )
  return Pretrainer(build_encoder(config), use_nsp=True)


@pytest.mark.parametrize("batch_size,max_eval_steps", [(7, 0), (5, 3)])
def test_eval_metrics_equal_numpy_over_every_record(
    masked_records, model, batch_size, max_eval_steps
):
  records = read_records(masked_records)
  num_records = len(records["input_ids"])
  assert num_records % 7  # the last batch is padded
  config = PretrainingDataConfig(sorted(glob.glob(masked_records)), SEQ_LEN, MAX_PREDICTIONS)
  evaluator = PretrainingEvaluator(
      tf.distribute.get_strategy(), model, config, batch_size, max_eval_steps=max_eval_steps
  )
  results = evaluator.evaluate()
  limit = batch_size * max_eval_steps if max_eval_steps else None
  expected = numpy_metrics(model, records, limit)
  for name, value in expected.items():
    np.testing.assert_allclose(results[name], value, rtol=2e-5, err_msg=name)
  np.testing.assert_allclose(results["mlm_perplexity"], np.exp(expected["mlm_loss"]), rtol=2e-5)
  np.testing.assert_allclose(
      results["loss"], expected["mlm_loss"] + expected["nsp_loss"], rtol=2e-5
  )


def test_eval_steps_cover_every_pipeline_share():
  # Record i goes to pipeline i mod n; each pipeline reads global/n per step.
  for num_records in range(1, 60):
    for pipelines, global_batch in ((1, 4), (2, 4), (2, 6), (4, 8), (3, 9)):
      steps = pretraining_dataset.eval_steps(num_records, global_batch, pipelines)
      largest_share = -(-num_records // pipelines)
      assert steps * (global_batch // pipelines) >= largest_share
      assert steps <= -(-num_records // global_batch) + 1


def test_padding_rows_weigh_nothing_and_shapes_stay_static(masked_records):
  config = PretrainingDataConfig(sorted(glob.glob(masked_records)), SEQ_LEN, MAX_PREDICTIONS)
  num_records = pretraining_dataset.count_records(config)
  batches = list(pretraining_dataset.make_eval_dataset(config, 16, -(-num_records // 16) + 1))
  assert all(b["input_ids"].shape == (16, SEQ_LEN) for b in batches)
  weights = np.concatenate([b["example_weights"].numpy() for b in batches])
  assert weights.sum() == num_records and (weights[:num_records] == 1).all()
  padded = np.concatenate([b["masked_lm_weights"].numpy() for b in batches])[num_records:]
  assert (padded == 0).all() and len(padded) == len(weights) - num_records


def test_eval_rows_merge_with_their_step_and_survive_a_resume(tmp_path):
  lines = [{"step": s, "loss": 10.0 - s} for s in (1, 2, 3, 4)]
  (tmp_path / "metrics.jsonl").write_text(
      "".join(f'{{"step": {r["step"]}, "loss": {r["loss"]}}}\n' for r in lines)
  )
  written = record_eval_results(str(tmp_path), 2, "ckpt-2", {"mlm_loss": 1.5, "loss": 2.0})
  assert written["eval"] == {"mlm_loss": 1.5, "loss": 2.0}
  assert written["main_metric_value"] == 1.5 and written["global_step"] == 2
  log = io_utils.read_metrics_log(str(tmp_path))
  assert log[2] == {"step": 2, "loss": 8.0, "eval/mlm_loss": 1.5, "eval/loss": 2.0}
  assert log[3] == {"step": 3, "loss": 7.0}
  # A run resumed from ckpt-2 replays steps 3-4: they go, step 2's two rows stay.
  assert io_utils.truncate_metrics_log(str(tmp_path), 2) == 2
  rows = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert [sorted(json.loads(r)) for r in rows] == [
      ["loss", "step"],
      ["loss", "step"],
      ["eval/loss", "eval/mlm_loss", "step"],
  ]
  assert model_dir_lib.read_json(str(tmp_path / "eval_results.json"))["checkpoint"] == "ckpt-2"


def test_mode_eval_under_mirrored_reproduces_what_training_logged(
    tmp_path, masked_records, single_shard_records, vocab_file, small_config
):
  """train_and_eval logs held-out metrics after steps 4 and 8; `--mode=eval` on the finished
  model dir, over two replicas with another batch size, computes the same numbers. (The
  small bert: the eval step's code is the same at any size; the mirrored process traces
  less.)"""
  model_dir = tmp_path / "run"
  run_pretrain(
      model_dir,
      vocab_file,
      masked_records,
      f"--model_config={small_config}",
      "--num_train_steps=8",
      f"--eval_input_files={single_shard_records}",
      "--eval_every_steps=4",
      "--eval_batch_size=6",
  )
  log = io_utils.read_metrics_log(str(model_dir))
  assert [step for step, row in log.items() if "eval/mlm_loss" in row] == [4, 8]
  logged = {key[len("eval/") :]: value for key, value in log[8].items() if key.startswith("eval/")}
  assert all(np.isfinite(list(logged.values())))
  assert {"mlm_loss", "mlm_accuracy", "mlm_perplexity", "nsp_loss", "nsp_accuracy", "loss"} <= set(
      logged
  )
  results = model_dir_lib.read_eval_results(str(model_dir))
  assert results["global_step"] == 8 and results["checkpoint"].endswith("ckpt-8")
  assert results["eval"] == logged

  result = forkserver.run(
      [
          sys.executable,
          "-m",
          "recurrent_bert.pretrain",
          "--mode=eval",
          f"--model_dir={model_dir}",
          f"--eval_input_files={single_shard_records}",
          f"--max_seq_length={SEQ_LEN}",
          f"--max_predictions_per_seq={MAX_PREDICTIONS}",
          "--eval_batch_size=4",
          "--distribution_strategy=mirrored",
          "--num_cpu_devices=2",
      ],
      cwd=REPO,
      env=subprocess_env(),
      timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  printed = json.loads(result.stdout.strip().splitlines()[-1])
  assert printed["global_step"] == 8
  for name, value in logged.items():
    np.testing.assert_allclose(printed["eval"][name], value, rtol=1e-5, err_msg=name)


def test_eval_modes_refuse_missing_inputs_in_one_line(tmp_path, masked_records, vocab_file):
  result = run_pretrain(
      tmp_path / "a", vocab_file, masked_records, "--mode=train_and_eval", check=False
  )
  assert result.returncode == 2 and "--eval_input_files" in result.stderr
  assert "Traceback" not in result.stderr
  result = run_pretrain(
      tmp_path / "b",
      vocab_file,
      masked_records,
      "--mode=eval",
      f"--eval_input_files={masked_records}",
      check=False,
  )
  assert result.returncode == 2 and "no checkpoint" in result.stderr
  assert "Traceback" not in result.stderr
