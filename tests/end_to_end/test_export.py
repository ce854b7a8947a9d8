"""Text-in SavedModels of model dirs, served in a fresh process that imports only TF and
TF Text: pretraining model dirs (through `serving.export_model_dir` and the command line)
and a pair classifier's fine-tuning model_dir. The in-memory export of every head and
SQuAD v2.0 are in test_export_tasks.py; tests/support/export_checks.py has what both share.
"""

import json
import os
import sys

import numpy as np
import pytest

from recurrent_bert import model_dir as layout
from recurrent_bert import saving
from recurrent_bert import serving
from recurrent_bert.data.tokenization import BertWordpieceTokenizer
from recurrent_bert.models import Classifier
from tests.support import forkserver
from tests.support.export_checks import LABELS
from tests.support.export_checks import MAX_LEN
from tests.support.export_checks import PAIRS
from tests.support.export_checks import REPO
from tests.support.export_checks import TEXTS
from tests.support.export_checks import VOCAB
from tests.support.export_checks import answers
from tests.support.export_checks import ask
from tests.support.export_checks import ask_encoder
from tests.support.export_checks import check_encode
from tests.support.export_checks import check_encode_ids
from tests.support.export_checks import check_packing
from tests.support.export_checks import classifier_probabilities
from tests.support.export_checks import encoder
from tests.support.export_checks import reference_inputs
from tests.support.export_checks import serve
from tests.support.export_checks import write_finetuning_dir
from tests.support.export_checks import write_model_dir
from tests.support.export_checks import write_vocab

pytestmark = pytest.mark.slow(seconds=60)

ENCODER_PRESETS = ("trans_blstm_2_tiny", "swishrnn_tiny")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  """Exports three SavedModels once and serves every request in one fresh process.

  - trans_blstm_2_tiny: from a model dir, through `serving.export_model_dir`;
  - swishrnn_tiny: from a model dir, through the command line (run concurrently);
  - pair: a fine-tuning dir of a 3-class pair task (random head on a random bert_tiny).

  Returns (models, tokenizer, requests, results): results[f"{i}/{output}"] answers
  requests[i].
  """
  root = tmp_path_factory.mktemp("export")
  vocab_file = write_vocab(root)
  tokenizer = BertWordpieceTokenizer(vocab_file, do_lower_case=True)
  models = {preset: encoder(preset) for preset in ENCODER_PRESETS}
  export_dirs = {preset: root / f"{preset}_saved_model" for preset in ENCODER_PRESETS}

  write_model_dir(root / "swishrnn_tiny", models["swishrnn_tiny"], vocab_file)
  command_line = forkserver.start(  # the command line, as users run it
      [
          sys.executable,
          "-m",
          "recurrent_bert.export",
          f"--model_dir={root / 'swishrnn_tiny'}",
          f"--export_dir={export_dirs['swishrnn_tiny']}",
          f"--max_seq_length={MAX_LEN}",
      ],
      REPO,
      dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
  )

  write_model_dir(root / "trans_blstm_2_tiny", models["trans_blstm_2_tiny"], vocab_file)
  serving.export_model_dir(
      str(root / "trans_blstm_2_tiny"),
      str(export_dirs["trans_blstm_2_tiny"]),
      max_seq_length=MAX_LEN,
  )

  models["classifier"] = Classifier(encoder("bert_tiny"), len(LABELS))
  pair_info = layout.TaskInfo(
      task="mnli", kind="classifier", label_names=LABELS, max_seq_length=MAX_LEN, text_pair=True
  )
  write_finetuning_dir(root / "pair", models["classifier"], pair_info, vocab_file)
  models["pair_signatures"] = serving.export_model_dir(
      str(root / "pair"), str(root / "pair_saved_model")
  )

  stdout, stderr = command_line.communicate(timeout=600)
  assert command_line.returncode == 0, stderr[-3000:]
  models["cli_stdout"] = stdout

  requests = []
  for export_dir in export_dirs.values():
    ask_encoder(requests, export_dir, tokenizer)
  ask(requests, root / "pair_saved_model", "serving_default", text=TEXTS, text_pair=PAIRS)
  return models, tokenizer, requests, serve(root, requests)


@pytest.mark.parametrize("preset", ENCODER_PRESETS)
def test_encode_matches_keras_model(served, preset):
  check_encode(served, preset)


@pytest.mark.parametrize("preset", ENCODER_PRESETS)
def test_encode_ids_matches_keras_model(served, preset):
  check_encode_ids(served, preset)


def test_cli_prints_signatures(served):
  stdout = served[0]["cli_stdout"]
  for name in ("encode", "encode_pair", "encode_ids"):
    assert f"  {name}(" in stdout
  assert "  serving_default(text string[None]) = encode\n" in stdout
  assert "sequence_output float32[None, None, 128]" in stdout


def test_recorded_threshold_reader(tmp_path):
  assert serving.recorded_null_score_diff_threshold(str(tmp_path)) is None
  path = tmp_path / layout.BEST_METRICS_FILE
  path.write_text(json.dumps({"eval_splits": ["dev"], "dev": {"f1": 80.0}}))
  assert serving.recorded_null_score_diff_threshold(str(tmp_path)) is None  # v1.1
  path.write_text(json.dumps({"eval_splits": ["dev"], "dev": {"best_f1_threshold": -1.5}}))
  assert serving.recorded_null_score_diff_threshold(str(tmp_path)) == -1.5


def test_pair_task_default_signature_takes_both_texts(served):
  models, tokenizer, _, _ = served
  [(request, outputs)] = answers(served, "pair_saved_model", "serving_default")
  assert set(request["inputs"]) == {"text", "text_pair"}
  reference = reference_inputs(tokenizer, TEXTS, PAIRS)
  check_packing(outputs, reference)
  probabilities, _ = classifier_probabilities(models["classifier"], reference)
  np.testing.assert_allclose(outputs["probabilities"], probabilities, atol=1e-5)
  assert models["pair_signatures"]["serving_default"].startswith(
      "(text string[None], text_pair string[None]) ->"
  )


def test_max_seq_length_beyond_positions_fails_before_loading(tmp_path):
  model_encoder = encoder("bert_tiny")
  saving.export_encoder(model_encoder, str(tmp_path))
  (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
  with pytest.raises(serving.ExportError, match="--max_seq_length=65 exceeds"):
    serving.export_model_dir(str(tmp_path), str(tmp_path / "out"), max_seq_length=65)
  assert not (tmp_path / "out").exists()
