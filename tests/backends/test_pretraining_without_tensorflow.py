"""`KERAS_BACKEND=jax` and `KERAS_BACKEND=torch python -m recurrent_bert.pretrain` against
TensorFlow's pretrain.

Every run is the real command in its own process, on records written by the real data
tool. The reference is the same command under TensorFlow (its custom tf.distribute loop),
started from the same weights (a Pretrainer's portable weights file given as
--init_checkpoint) on the same batches (one shard, a shuffle buffer of 1: file order in
both readers), without dropout. Run as `KERAS_BACKEND=jax pytest tests/backends` (and
`KERAS_BACKEND=torch`): each session tests its own backend's loop.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest

from recurrent_bert import weights_file
from recurrent_bert.config import ModelConfig
from recurrent_bert.data import vocab as vocab_lib
from recurrent_bert.io_utils import read_metrics_log
from recurrent_bert.models import Pretrainer
from recurrent_bert.models import build_encoder
from tests.backends.support import BACKEND
from tests.backends.support import REPO
from tests.backends.support import backend_env
from tests.backends.support import run_under_backend
from tests.backends.support import to_numpy
from tests.training.conftest import MAX_PREDICTIONS
from tests.training.conftest import SEQ_LEN
from tests.training.conftest import corpus_file  # noqa: F401
from tests.training.conftest import losses_by_step
from tests.training.conftest import no_dropout_config  # noqa: F401
from tests.training.conftest import single_shard_records  # noqa: F401
from tests.training.conftest import unmasked_records  # noqa: F401
from tests.training.conftest import vocab_file  # noqa: F401

pytestmark = pytest.mark.skipif(
    BACKEND not in ("jax", "torch"), reason="the JAX and PyTorch loops (KERAS_BACKEND=jax, torch)"
)
# The name of the session's backend in messages.
BACKEND_NAME = {"jax": "JAX", "torch": "PyTorch"}.get(BACKEND, BACKEND)

STEPS = 6


def _command(model_dir, vocab, records, config, *flags):
  return [
      sys.executable,
      "-m",
      "recurrent_bert.pretrain",
      f"--model_dir={model_dir}",
      f"--vocab_file={vocab}",
      f"--input_files={records}",
      f"--model_config={config}",
      f"--max_seq_length={SEQ_LEN}",
      f"--max_predictions_per_seq={MAX_PREDICTIONS}",
      "--train_batch_size=8",
      f"--num_train_steps={STEPS}",
      "--warmup_steps=2",
      "--learning_rate=1e-3",
      "--log_steps=1",
      "--steps_per_loop=2",
      "--save_checkpoints_steps=2",
      "--shuffle_buffer_size=1",
      "--clip_norm=0.5",
      *flags,
  ]


def _start(command, backend=BACKEND, **env):
  return subprocess.Popen(
      command,
      cwd=REPO,
      env=dict(backend_env(backend), **env),
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
  )


def _finish(process, timeout=400):
  _, stderr = process.communicate(timeout=timeout)
  return process.returncode, stderr


def _run_all(commands):
  """Starts every (command, backend, env) two at a time (2 CI cores); their outcomes."""
  outcomes = []
  for i in range(0, len(commands), 2):
    started = [_start(c, b, **e) for c, b, e in commands[i : i + 2]]
    outcomes += [_finish(p) for p in started]
  return outcomes


@pytest.fixture(scope="module")
def init_weights(tmp_path_factory, no_dropout_config, vocab_file):
  """A Pretrainer's weights file (this process's initialisation), the start of every
  run: the TensorFlow runs and this backend's begin from the same weights, heads included."""
  with open(no_dropout_config, encoding="utf-8") as f:
    config = ModelConfig.from_json(f.read())
  config = config.replace(vocab_size=vocab_lib.read_vocabulary(vocab_file).vocab_size)
  keras.utils.set_random_seed(3)
  model = Pretrainer(build_encoder(config), use_nsp=True)
  path = str(tmp_path_factory.mktemp("init") / "pretrainer.weights.h5")
  return weights_file.save_weights(model, path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, single_shard_records, vocab_file, no_dropout_config, init_weights):
  """{name: model_dir} of the compared runs, all finished."""
  root = tmp_path_factory.mktemp("runs")
  lamb = ("--optimizer=lamb", "--gradient_accumulation_steps=2", "--weight_decay=0.01")
  plans = {
      "tf_adamw": ((), "tensorflow", {}),
      "adamw": ((), BACKEND, {}),
      "tf_lamb": (lamb, "tensorflow", {}),
      "lamb": (lamb, BACKEND, {}),
  }
  if BACKEND == "jax":
    plans["two_devices"] = (("--distribution_strategy=mirrored", "--num_cpu_devices=2"), "jax", {})
  else:
    plans["compiled"] = (("--jit_compile",), "torch", {})
  dirs = {name: str(root / name) for name in plans}
  commands = [
      (
          _command(
              dirs[name],
              vocab_file,
              single_shard_records,
              no_dropout_config,
              f"--init_checkpoint={init_weights}",
              *flags,
          ),
          backend,
          env,
      )
      for name, (flags, backend, env) in plans.items()
  ]
  for name, (code, stderr) in zip(plans, _run_all(commands)):
    assert code == 0, f"{name}: {stderr[-3000:]}"
    with open(f"{dirs[name]}.stderr", "w", encoding="utf-8") as f:
      f.write(stderr)
  return dirs


def _losses(model_dir):
  losses = losses_by_step(model_dir)
  assert sorted(losses) == list(range(1, STEPS + 1))
  return np.array([losses[step] for step in sorted(losses)])


@pytest.mark.parametrize("optimizer", ["adamw", "lamb"])
def test_the_backends_pretraining_gives_the_tensorflow_loops_losses(runs, optimizer):
  """AdamW; LAMB with 2 micro-batches per update (clipping active in both: the clip
  norm is below the gradient's norm)."""
  losses = _losses(runs[optimizer])
  tf_losses = _losses(runs[f"tf_{optimizer}"])
  np.testing.assert_allclose(losses, tf_losses, rtol=1e-4)
  # The weights moved by several times the tolerance (LAMB's 6 steps from PyTorch's
  # initialisation move the loss by ~6e-3, 7 tolerances).
  assert abs(losses[-1] - losses[0]) > 5 * 1e-4 * abs(losses[0])


@pytest.mark.skipif(BACKEND != "jax", reason="DataParallel is JAX's")
def test_two_devices_give_one_devices_losses(runs):
  """DataParallel over 2 XLA CPU devices (--num_cpu_devices=2 --distribution_strategy=
  mirrored) at the same global batch."""
  np.testing.assert_allclose(_losses(runs["two_devices"]), _losses(runs["adamw"]), rtol=1e-5)


@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile is PyTorch's")
def test_the_compiled_torch_step_gives_the_tensorflow_loops_losses(runs):
  """--jit_compile under PyTorch: the forward pass and loss through torch.compile
  (TorchInductor's C++ kernels on this CPU), autograd's compiled backward; the run's log
  says what it compiled, once, with no graph break."""
  np.testing.assert_allclose(_losses(runs["compiled"]), _losses(runs["tf_adamw"]), rtol=1e-4)
  with open(f"{runs['compiled']}.stderr", encoding="utf-8") as f:
    said = re.findall(r"torch.compile: (\d+) graph\(s\) compiled, (\d+) graph break", f.read())
  # Compiled once (no recompilation after the first call), the model in whole graphs.
  assert len(said) == 1 and int(said[0][0]) >= 1 and said[0][1] == "0", said


def test_a_run_writes_the_model_dir_contract(runs):
  model_dir = runs["adamw"]
  names = set(os.listdir(model_dir))
  assert {"model_config.json", "vocab.txt", "tokenizer.json", "metrics.jsonl", "encoder"} <= names
  assert {f"ckpt-{step}.state" for step in (2, 4, 6)} <= names
  export = os.path.join(model_dir, "encoder")
  with open(os.path.join(export, "export_info.json"), encoding="utf-8") as f:
    info = json.load(f)
  assert info["global_step"] == STEPS and info["backend"] == BACKEND
  assert "encoder.weights.h5" in os.listdir(export)


def test_kill_9_then_rerun_gives_the_uninterrupted_losses(
    runs, tmp_path, single_shard_records, vocab_file, no_dropout_config, init_weights
):
  model_dir = str(tmp_path / "killed")
  command = _command(
      model_dir,
      vocab_file,
      single_shard_records,
      no_dropout_config,
      f"--init_checkpoint={init_weights}",
  )
  killer = [sys.executable, os.path.join(REPO, "tests", "training", "kill_after_step.py")]
  code, stderr = _finish(_start(killer + command[3:], KILL_AFTER_STEP="3"))
  assert code == -9, stderr[-3000:]
  assert sorted(os.listdir(model_dir)).count("ckpt-2.state") == 1
  code, stderr = _finish(_start(command))
  assert code == 0, stderr[-3000:]
  assert "resumed from" in stderr and "ckpt-2.state" in stderr
  np.testing.assert_allclose(_losses(model_dir), _losses(runs["adamw"]), rtol=1e-6)


def test_dynamic_masking_and_evaluation_run_where_tensorflow_cannot_be_imported(
    tmp_path, unmasked_records, vocab_file, no_dropout_config
):
  """The GPU machines have JAX and PyTorch and no TensorFlow: a shadow `tensorflow` package that
  fails to import stands first on the path. Unmasked records are masked while read, the
  held-out records evaluated, the export written; in bfloat16, as on a GPU."""
  shadow = tmp_path / "without_tensorflow" / "tensorflow"
  shadow.mkdir(parents=True)
  (shadow / "__init__.py").write_text("raise ImportError('no TensorFlow in this test')\n")
  model_dir = tmp_path / "no_tf"
  command = _command(
      model_dir,
      vocab_file,
      unmasked_records,
      no_dropout_config,
      "--dynamic_masking",
      "--nouse_nsp",
      f"--eval_input_files={unmasked_records}",
      "--eval_every_steps=3",
      "--max_eval_steps=2",
      "--mixed_precision=mixed_bfloat16",
  )
  path = os.pathsep.join([str(shadow.parent), REPO])
  code, stderr = _finish(_start(command, PYTHONPATH=path))
  assert code == 0, stderr[-3000:]
  assert "no TensorBoard events are written" in stderr
  with open(model_dir / "eval_results.json", encoding="utf-8") as f:
    results = json.load(f)
  assert results["global_step"] == STEPS and results["eval"]["num_examples"] == 2 * 8
  assert 0 < results["eval"]["mlm_loss"] < 20
  assert "mlm_loss_per_word" in results["eval"]
  rows = read_metrics_log(str(model_dir))
  assert [step for step, row in rows.items() if "eval/mlm_loss" in row] == [3, 6]
  assert (model_dir / "encoder" / "encoder.weights.h5").exists()


_REFUSED = {
    "jax": [
        (
            ("--distribution_strategy=tpu", "--tpu=local"),
            "--distribution_strategy=tpu is TensorFlow's; under KERAS_BACKEND=jax use "
            "--distribution_strategy=mirrored",
        ),
    ],
    "torch": [
        (
            ("--distribution_strategy=mirrored",),
            "--distribution_strategy=mirrored: under KERAS_BACKEND=torch the package trains "
            "on one device",
        ),
    ],
}.get(BACKEND, []) + [
    (
        ("--mixed_precision=mixed_float16",),
        f"under {BACKEND_NAME} use --mixed_precision=mixed_bfloat16",
    ),
    (("--model_config=bert_tiny",), "holds checkpoints of another model"),
]


@pytest.mark.parametrize("flags, expected", _REFUSED, ids=["strategy", "float16", "another_model"])
def test_what_the_backend_cannot_do_is_one_line_and_exit_2(
    runs, single_shard_records, vocab_file, no_dropout_config, flags, expected
):
  """The last case resumes the finished AdamW run's dir with another model: refused
  before anything in it is rewritten."""
  model_dir = runs["adamw"]
  before = {name: os.path.getmtime(os.path.join(model_dir, name)) for name in os.listdir(model_dir)}
  command = _command(model_dir, vocab_file, single_shard_records, no_dropout_config, *flags)
  command += ["--num_train_steps=12"]  # past the run's end: it would train if let through
  code, stderr = _finish(_start(command))
  lines = [line for line in stderr.splitlines() if line.strip()]
  assert code == 2, stderr[-3000:]
  assert expected in lines[-1] and "Traceback" not in stderr, stderr[-3000:]
  after = {name: os.path.getmtime(os.path.join(model_dir, name)) for name in os.listdir(model_dir)}
  assert after == before


def test_a_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(
    runs, tmp_path, single_shard_records, vocab_file, no_dropout_config
):
  """The finished AdamW run (step 6) continued at a learning rate of 1e30 without clipping."""
  model_dir = tmp_path / "nan"
  shutil.copytree(runs["adamw"], model_dir)
  export_before = (model_dir / "encoder" / "export_info.json").read_text()
  command = _command(model_dir, vocab_file, single_shard_records, no_dropout_config)
  command += ["--num_train_steps=12", "--learning_rate=1e30", "--clip_norm=0"]
  code, stderr = _finish(_start(command))
  assert code == 1, stderr[-3000:]
  message = re.search(r"error: loss is (nan|inf|-inf) at step (\d+)", stderr)
  assert message and int(message.group(2)) > STEPS, stderr[-3000:]
  bad_step = int(message.group(2))
  last_good = (bad_step - 1) // 2 * 2  # checkpoints every 2 steps, only before the bad loss
  assert f"ckpt-{last_good}.state" in stderr
  saved = sorted(int(n[5:-6]) for n in os.listdir(model_dir) if n.endswith(".state"))
  assert saved[-1] == last_good
  assert (model_dir / "encoder" / "export_info.json").read_text() == export_before


def test_a_backend_that_is_not_installed_is_one_line_and_exit_2(
    tmp_path, single_shard_records, vocab_file, no_dropout_config
):
  shadow = tmp_path / f"without_{BACKEND}" / BACKEND
  shadow.mkdir(parents=True)
  (shadow / "__init__.py").write_text(f"raise ImportError('no {BACKEND_NAME} in this test')\n")
  command = _command(tmp_path / "run", vocab_file, single_shard_records, no_dropout_config)
  code, stderr = _finish(_start(command, PYTHONPATH=os.pathsep.join([str(shadow.parent), REPO])))
  assert code == 2 and "Traceback" not in stderr, stderr[-3000:]
  assert stderr.strip().splitlines()[-1] == (
      f"error: KERAS_BACKEND={BACKEND}: its library is not installed (no {BACKEND_NAME} in "
      "this test)"
  )
  assert not (tmp_path / "run").exists()


def test_tensorflows_export_serves_the_runs_encoder(runs, tmp_path):
  """`recurrent_bert.export` (TensorFlow) of this backend's run: the SavedModel's
  encode_ids gives this backend's encoder outputs on the same ids."""
  from recurrent_bert import saving

  export_dir = str(tmp_path / "export")
  command = [
      sys.executable,
      "-m",
      "recurrent_bert.export",
      f"--model_dir={runs['adamw']}",
      f"--export_dir={export_dir}",
  ]
  code, stderr = _finish(_start(command, "tensorflow"))
  assert code == 0, stderr[-3000:]
  rng = np.random.default_rng(0)
  ids = rng.integers(5, 100, (2, 12)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 8:] = 0
  segments = (np.arange(12) >= 6).astype(np.int32)[None].repeat(2, 0)
  served = run_under_backend(
      f"""
      import tensorflow as tf, tensorflow_text  # noqa
      model = tf.saved_model.load({export_dir!r})
      out = model.signatures["encode_ids"](
          input_ids=tf.constant(inputs["ids"]), input_mask=tf.constant(inputs["mask"]),
          segment_ids=tf.constant(inputs["segments"]))
      outputs.update({{k: v.numpy() for k, v in out.items()}})
      """,
      ids=ids,
      mask=mask,
      segments=segments,
  )
  encoder = saving.open_model(runs["adamw"]).load_encoder()
  ours = encoder({"input_ids": ids, "input_mask": mask, "segment_ids": segments}, training=False)
  np.testing.assert_allclose(served["pooled_output"], to_numpy(ours["pooled_output"]), atol=1e-4)
  real = mask.astype(bool)
  np.testing.assert_allclose(
      served["sequence_output"][real], to_numpy(ours["sequence_output"])[real], atol=1e-4
  )
