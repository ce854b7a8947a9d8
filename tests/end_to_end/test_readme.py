"""README.md's walkthrough runs as written, and leaves model dirs that work everywhere.

The walkthrough block (raw text -> vocabulary -> records -> pretraining -> fine-tuning
-> export -> serving) is read from README.md and run by bash as it stands, with two kinds
of change only, both documented: RUN points at a temp dir, and tiny sizes are appended
to command lines as flags (a later flag overrides an earlier one). The model dirs it
leaves behind then serve the hand-off tests: every kind of directory the package writes
is accepted wherever a model is expected, with the same weights, vocabulary and casing;
and `ram://` model dirs work for pretraining, fine-tuning and export. The other commands
of README and docs/ are checked in test_readme_commands.py (a file of its own, so that the two
test workers share the work).
"""

import json
import os
import shlex
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.support import forkserver
from tests.support.readme_text import REPO
from tests.support.readme_text import TINY_FLAGS
from tests.support.readme_text import check_walkthrough
from tests.support.readme_text import doc_section
from tests.support.readme_text import env
from tests.support.readme_text import run_module
from tests.support.readme_text import run_walkthrough
from tests.support.readme_text import shell_blocks

pytestmark = pytest.mark.slow(seconds=230)

# The section of docs/export.md whose block exports the walkthrough's model and reads it back.
SHARING = "Sharing trained models: keras-hub presets, Hugging Face, google-research/bert"


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory):
  """(RUN dir, completed bash process) of README's walkthrough."""
  root = tmp_path_factory.mktemp("walkthrough")
  run_dir = root / "run"
  result = run_walkthrough(REPO, run_dir, root / "cache")
  return run_dir, result


def test_walkthrough_runs_as_written_and_serves(walkthrough):
  check_walkthrough(*walkthrough)


def test_model_dirs_of_every_kind_resolve_to_the_same_model(walkthrough):
  """Pretraining model_dir, its encoder/ export and its checkpoint prefix give the same
  weights, vocabulary and casing; a fine-tuning dir gives its best/ checkpoint's."""
  import tensorflow as tf

  from recurrent_bert import saving

  run_dir, _ = walkthrough
  pretraining = str(run_dir / "models" / "tiny_bert")
  prefix = tf.train.latest_checkpoint(pretraining)
  inputs = {
      "input_ids": tf.constant([[2, 7, 9, 11, 3]]),
      "input_mask": tf.ones([1, 5], tf.int32),
      "segment_ids": tf.zeros([1, 5], tf.int32),
  }
  outputs, vocabularies = [], []
  for path in (pretraining, os.path.join(pretraining, "encoder"), prefix):
    source = saving.open_model(path)
    with open(source.vocab_file, encoding="utf-8") as f:
      vocabularies.append((f.read(), source.do_lower_case))
    outputs.append(saving.open_model(path).load_encoder()(inputs)["pooled_output"].numpy())
  assert vocabularies[0] == vocabularies[1] == vocabularies[2]
  assert vocabularies[0][1] is True
  # The run ends with the export of the last checkpoint's weights: all three agree.
  np.testing.assert_array_equal(outputs[0], outputs[1])
  np.testing.assert_array_equal(outputs[0], outputs[2])

  rte = str(run_dir / "finetune" / "rte")
  source = saving.open_model(rte)
  assert source.kind == "fine-tuning model_dir"
  assert os.path.dirname(source.weights).endswith("best")
  model, _ = source.load_task_model()
  np.testing.assert_array_equal(
      source.load_encoder()(inputs)["pooled_output"], model.encoder(inputs)["pooled_output"]
  )


def test_sharing_block_exports_the_pretrained_model_and_reads_it_back(walkthrough):
  """docs/export.md's sharing block, run as written after the walkthrough: the three
  targets, keras-hub's own loaders, and the Hugging Face export imported back to the same
  encoder."""
  import tensorflow as tf

  from recurrent_bert.convert.model_dir_source import read_model_dir

  run_dir, _ = walkthrough
  blocks = [
      block
      for block in shell_blocks(doc_section("docs/export.md", SHARING))
      if "--direction=export" in block
  ]
  assert len(blocks) == 1
  result = subprocess.run(
      ["bash", "-c", "set -euo pipefail\n" + blocks[0]],
      cwd=REPO,
      capture_output=True,
      text=True,
      timeout=900,
      env=env(RUN=str(run_dir)),
  )
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
  assert "RecurrentBertBackbone" in result.stdout
  shared = run_dir / "shared"
  for name in ("keras_hub/config.json", "hf/model.safetensors", "tf1/bert_model.ckpt.index"):
    assert (shared / name).exists(), name
  inputs = {
      "input_ids": tf.constant([[2, 7, 9, 11, 3]]),
      "input_mask": tf.ones([1, 5], tf.int32),
      "segment_ids": tf.zeros([1, 5], tf.int32),
      "masked_lm_positions": tf.constant([[1, 3]]),
  }
  original = read_model_dir(str(run_dir / "models" / "tiny_bert"))
  round_trip = read_model_dir(str(shared / "from_hf"))
  assert (round_trip.has_mlm, round_trip.has_nsp) == (original.has_mlm, original.has_nsp)
  assert original.has_mlm and original.has_nsp
  encoder_inputs = {k: v for k, v in inputs.items() if k != "masked_lm_positions"}
  want = {**original.encoder(encoder_inputs), **original.model(inputs)}
  got = {**round_trip.encoder(encoder_inputs), **round_trip.model(inputs)}
  for name in ("sequence_output", "pooled_output", "mlm_logits", "nsp_logits"):
    np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=1e-5, err_msg=name)


@pytest.mark.parametrize(
    "path, says",
    [
        ("export/rte", "SavedModel export"),
        ("tasks", "directory without checkpoints"),
        ("nowhere", "not a file or directory"),
    ],
)
def test_a_path_that_is_no_model_says_what_it_is(walkthrough, path, says):
  from recurrent_bert import saving

  run_dir, _ = walkthrough
  with pytest.raises(saving.ModelNotFoundError, match=says):
    saving.open_model(str(run_dir / path))


def test_eval_reads_back_the_training_settings(walkthrough):
  run_dir, _ = walkthrough
  common = [
      "recurrent_bert.finetune_glue",
      "--task=rte",
      f"--data_dir={run_dir}/tasks/rte",
      f"--model_dir={run_dir}/finetune/rte",
      "--mode=eval",
  ]
  refused = run_module(*common, "--max_seq_length=128")
  assert refused.returncode == 2
  assert refused.stderr.strip().splitlines()[-1] == (
      "error: --max_seq_length=128 differs from max_seq_length=64 recorded in "
      f"{run_dir}/finetune/rte/task_info.json when the model was trained; drop the flag "
      "(the recorded value is used) or give a new --model_dir"
  )
  assert "Traceback" not in refused.stderr
  evaluated = run_module(*common, "--eval_batch_size=8")
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  results = json.loads((run_dir / "finetune" / "rte" / "eval_results.json").read_text())
  # Features rebuilt at the recorded length, not the flag default (128).
  meta = json.loads(
      (run_dir / "finetune" / "rte" / "features" / "rte_dev.tfrecord.json").read_text()
  )
  assert meta["features"]["input_ids"]["shape"] == [64]
  assert results["dev"]["num_examples"] == 16


# A driver in a fresh process: ram:// lives in one process's memory, so the command runs
# in-process (its main through cli.run) and the checks run after it in the same process.
RAM_DRIVER = textwrap.dedent("""
    import json, os, sys
    import tensorflow as tf
    from recurrent_bert import cli

    def copy_tree(source, target):
      if not tf.io.gfile.isdir(source):
        tf.io.gfile.makedirs(os.path.dirname(target))
        tf.io.gfile.copy(source, target, overwrite=True)
        return
      for root, _, files in tf.io.gfile.walk(source):
        relative = os.path.relpath(root, source)
        for name in files:
          out = os.path.join(target, name if relative == "." else os.path.join(relative, name))
          tf.io.gfile.makedirs(os.path.dirname(out))
          tf.io.gfile.copy(os.path.join(root, name), out, overwrite=True)

    command, copies, argv = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
    for source, target in copies:
      copy_tree(source, target)
    module = __import__(command, fromlist=["main"])
    sys.argv = [command] + argv
    try:
      cli.run(module.main)
    except SystemExit as e:
      if e.code not in (0, None):
        raise
    from recurrent_bert import serving
    model_dir = [a.split("=", 1)[1] for a in argv if a.startswith("--model_dir=")][0]
    signatures = serving.export_model_dir(model_dir, "ram://export")
    served = tf.saved_model.load("ram://export")
    out = served.signatures["serving_default"](
        **{name: tf.constant(["the cat walks home"]) for name in
           served.signatures["serving_default"].structured_input_signature[1]})
    print(json.dumps({"files": sorted(tf.io.gfile.listdir(model_dir)),
                      "signatures": sorted(signatures),
                      "outputs": sorted(out)}))
""")


def _ram_run(command, copies, *argv):
  result = forkserver.run(
      [sys.executable, "-c", RAM_DRIVER, command, json.dumps(copies), *argv],
      REPO,
      env(),
      timeout=600,
  )
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-5000:]
  return json.loads(result.stdout.strip().splitlines()[-1])


def test_pretraining_and_export_on_ram_filesystem(walkthrough):
  run_dir, _ = walkthrough
  report = _ram_run(
      "recurrent_bert.pretrain",
      [
          [str(run_dir / "tiny_data"), "ram://data"],
          [str(run_dir / "vocab.txt"), "ram://vocab/vocab.txt"],
      ],
      f"--flagfile={REPO}/configs/pretrain/tiny_bert.flags",
      "--run_dir=ram://",
      "--vocab_file=ram://vocab/vocab.txt",
      "--input_files=ram://data/*.tfrecord",
      "--model_dir=ram://pretrain",
      *shlex.split(TINY_FLAGS["recurrent_bert.pretrain"]),
  )
  for name in (
      "checkpoint",
      "encoder",
      "metrics.jsonl",
      "model_config.json",
      "tokenizer.json",
      "train",
      "vocab.txt",
  ):
    assert name in report["files"], report
  assert "encode" in report["signatures"] and "pooled_output" in report["outputs"]


def test_finetuning_and_export_on_ram_filesystem(walkthrough):
  run_dir, _ = walkthrough
  report = _ram_run(
      "recurrent_bert.finetune_glue",
      [
          [str(run_dir / "models" / "tiny_bert"), "ram://pretrained"],
          [str(run_dir / "tasks" / "rte"), "ram://tasks/rte"],
      ],
      "--task=rte",
      "--data_dir=ram://tasks/rte",
      "--init_checkpoint=ram://pretrained",
      "--model_dir=ram://finetune",
      "--max_seq_length=32",
      "--learning_rate=1e-3",
      *shlex.split(TINY_FLAGS["recurrent_bert.finetune_glue"]),
  )
  for name in (
      "best",
      "eval_results.json",
      "features",
      "predictions",
      "task_info.json",
      "tokenizer.json",
      "vocab.txt",
  ):
    assert name in report["files"], report
  assert "classify_pair" in report["signatures"]
  assert {"label", "probabilities"} <= set(report["outputs"])
