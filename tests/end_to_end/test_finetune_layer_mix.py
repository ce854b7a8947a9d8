"""finetune_glue's --layer_mix and --feature_based end to end, on the generated RTE task
of test_finetune.py (a marker word hidden in sentence 2; chance is 0.5).

References: the in-process Keras model of the written checkpoint (for the served
SavedModel, exported by the export command's library side and served in a fresh process
importing only TF and TF Text: tests/support/export_checks.py),
and the --init_checkpoint encoder's own weights (for the frozen encoder). The two
fine-tuning runs start together in one fixture.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert import model_dir as layout
from recurrent_bert import saving
from recurrent_bert import serving
from recurrent_bert.config import get_preset
from recurrent_bert.data.tokenization import BertWordpieceTokenizer
from recurrent_bert.models import build_encoder
from recurrent_bert.models import task_kinds
from recurrent_bert.tasks import sample_tasks as generated_tasks
from recurrent_bert.tasks.pair_features import PairExample
from recurrent_bert.tasks.pair_features import convert_pair_examples
from tests.support.export_checks import answers
from tests.support.export_checks import ask
from tests.support.export_checks import serve
from tests.support.export_checks import write_model_dir
from tests.support.finetune_runs import GLUE_FLAGS
from tests.support.finetune_runs import SEQ_LEN
from tests.support.finetune_runs import read_json
from tests.support.finetune_runs import run_entry
from tests.support.readme_text import finish
from tests.support.readme_text import start_module

pytestmark = pytest.mark.slow(seconds=80)

PAIRS = [("the cat sees a dog", "bird yes tree"), ("old river", "no the quick stone")]
# GLUE_FLAGS but for the model: the feature-based run starts from a saved encoder.
TRAIN_FLAGS = [f for f in GLUE_FLAGS if not f.startswith("--model_config")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """{"mix_all" | "feature_based": model_dir}, plus "task", "vocab" and "init" paths."""
  root = tmp_path_factory.mktemp("layer_mix")
  vocab = generated_tasks.write_vocab(root / "vocab.txt")
  rte = generated_tasks.write_rte_folder(root / "RTE", num_train=320, num_dev=40, num_test=4)
  config = get_preset("bert_tiny").replace(
      vocab_size=len(open(vocab, encoding="utf-8").read().split()), max_position_embeddings=64
  )
  write_model_dir(root / "init", build_encoder(config), vocab)
  paths = {"task": rte, "vocab": vocab, "init": str(root / "init")}
  flags = {
      "mix_all": [
          "--model_config=bert_tiny",
          f"--vocab_file={vocab}",
          "--layer_mix=mix_all",
          "--max_train_steps=10",
      ],
      "feature_based": [
          f"--init_checkpoint={root / 'init'}",
          "--feature_based",
          "--layer_mix=concat_last_four",
          "--learning_rate=3e-3",
          "--max_train_steps=30",
          "--eval_every_steps=0",
      ],
  }
  started = {}
  for name, extra in flags.items():
    paths[name] = str(root / name)
    started[name] = start_module(
        "recurrent_bert.finetune_glue",
        "--task=rte",
        f"--data_dir={rte}",
        f"--model_dir={paths[name]}",
        *TRAIN_FLAGS,
        *extra,
    )
  for name, process in started.items():
    result = finish(process)
    assert result.returncode == 0, (name, result.stderr[-4000:])
  return paths


def test_mix_all_records_and_trains(runs):
  info = layout.TaskInfo.read(runs["mix_all"])
  assert (info.layer_mix, info.feature_based) == ("mix_all", False)
  results = read_json(os.path.join(runs["mix_all"], "eval_results.json"))
  assert results["dev"]["num_examples"] == 40 and results["num_train_steps"] == 10
  stored = saving.open_model(runs["mix_all"])
  model, _ = stored.load_task_model()
  assert model.layer_mix == "mix_all"
  # The scalar mix was trained: its weights left their start (all 0, gamma 1).
  mix = model.layer_combination.scalar_mix
  assert np.any(np.asarray(mix.layer_weights) != 0) or float(mix.scale) != 1.0


def test_mix_all_export_serves_the_models_logits(runs, tmp_path):
  export_dir = tmp_path / "export"
  # Meanwhile: resuming with another --layer_mix is refused, naming both values.
  refused = start_module(
      "recurrent_bert.finetune_glue",
      "--task=rte",
      f"--data_dir={runs['task']}",
      f"--model_dir={runs['mix_all']}",
      "--layer_mix=sum_last_four",
  )
  signatures = serving.export_model_dir(runs["mix_all"], str(export_dir))
  assert "classify_pair" in signatures and "encode_layers" in signatures
  refused = finish(refused)
  assert refused.returncode == 2, refused.stderr[-3000:]
  line = refused.stderr.strip().splitlines()[-1]
  assert "--layer_mix=sum_last_four differs from layer_mix=mix_all" in line, line

  requests = []
  ask(
      requests,
      export_dir,
      "classify_pair",
      text=[a for a, _ in PAIRS],
      text_pair=[b for _, b in PAIRS],
  )
  served = ({}, None, requests, serve(tmp_path, requests))
  [(_, outputs)] = answers(served, "export", "classify_pair")

  stored = saving.open_model(runs["mix_all"])
  model, info = stored.load_task_model()
  directory = stored.config_dir
  tokenizer = BertWordpieceTokenizer(os.path.join(directory, layout.VOCAB_FILE))
  features = convert_pair_examples(
      [PairExample(str(i), a, b, None) for i, (a, b) in enumerate(PAIRS)],
      tokenizer,
      SEQ_LEN,
      info.label_names,
  )
  logits = model(
      {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}, training=False
  ).numpy()
  np.testing.assert_allclose(outputs["logits"], logits, atol=1e-5)


def test_feature_based_leaves_the_encoder_as_initialised_and_learns(runs):
  model_dir = runs["feature_based"]
  info = layout.TaskInfo.read(model_dir)
  assert (info.layer_mix, info.feature_based) == ("concat_last_four", True)
  init = {v.path: np.asarray(v) for v in saving.open_model(runs["init"]).load_encoder().weights}
  final = tf.train.latest_checkpoint(model_dir)
  assert final.endswith("-30")
  model = task_kinds.build_task_model(build_encoder(saving.read_model_config(model_dir)), info)
  saving.open_model(final).restore(model)
  weights = {v.path: np.asarray(v) for v in model.encoder.weights}
  assert set(weights) == set(init)
  for path, value in init.items():
    np.testing.assert_array_equal(weights[path], value, err_msg=path)
  results = read_json(os.path.join(model_dir, "eval_results.json"))
  assert results["dev"]["accuracy"] >= 0.75, results


def test_a_mix_deeper_than_the_encoder_is_refused_before_training(runs, tmp_path):
  config = tmp_path / "one_block.json"
  config.write_text(get_preset("bert_tiny").replace(num_layers=1).to_json(), encoding="utf-8")
  refused = run_entry(
      "recurrent_bert.finetune_glue",
      "--task=rte",
      f"--data_dir={runs['task']}",
      f"--model_dir={tmp_path / 'model'}",
      f"--model_config={config}",
      f"--vocab_file={runs['vocab']}",
      "--layer_mix=second_to_last",
      f"--max_seq_length={SEQ_LEN}",
      check=False,
  )
  assert refused.returncode == 2, refused.stderr[-3000:]
  line = refused.stderr.strip().splitlines()[-1]
  assert (
      line == "error: --layer_mix: layer_mix=second_to_last needs an encoder of at least 2 blocks"
  )
  assert not (tmp_path / "model" / "checkpoint").exists()
