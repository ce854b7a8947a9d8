"""Held-out MLM loss per word against numpy, for WordPiece and SentencePiece records.

Records made with whole-word masking by the real data tool; the reference reads them
with plain protobuf parsing, runs the model once on all of them, and divides Σ w·CE by
the masked positions whose original token starts a word, read from the token strings
(WordPiece: not "##..."; SentencePiece: "▁..." or a special symbol), not from
`Vocabulary.word_starts`. Then the pretrain command: it reports the metric from
--vocab_file, and `--mode=eval` over two replicas, with the vocabulary recorded in the
model dir, repeats its numbers.
"""

import json
import sys

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert import model_dir as model_dir_lib
from recurrent_bert.config import get_preset
from recurrent_bert.data import vocab as vocab_lib
from recurrent_bert.data.pretraining_dataset import PretrainingDataConfig
from recurrent_bert.models import Pretrainer
from recurrent_bert.models import build_encoder
from recurrent_bert.training.pretraining_eval import PretrainingEvaluator
from tests.data import sentencepiece_models
from tests.support import forkserver
from tests.training.conftest import MAX_PREDICTIONS
from tests.training.conftest import REPO
from tests.training.conftest import SEQ_LEN
from tests.training.conftest import make_records
from tests.training.conftest import run_pretrain
from tests.training.conftest import subprocess_env
from tests.training.test_pretraining_eval import log_softmax
from tests.training.test_pretraining_eval import read_records


def starts_word_by_string(vocab_file):
  """Per id, whether the token starts a word, from the token strings alone."""
  if vocab_file.endswith(".model"):
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=vocab_file)
    pieces = [processor.IdToPiece(i) for i in range(processor.GetPieceSize())]
    # [UNK] continues its word, as whole-word masking groups it.
    special = {"[PAD]", "[CLS]", "[SEP]", "[MASK]", "<s>", "</s>"}
    return np.array([p.startswith("\u2581") or p in special for p in pieces])
  with open(vocab_file, encoding="utf-8") as f:
    tokens = [line.strip() for line in f]
  return np.array([not (t.startswith("##") and len(t) > 2) for t in tokens])


@pytest.fixture(scope="module", params=["wordpiece", "unigram"])
def vocab_and_records(request, tmp_path_factory, corpus_file, vocab_file):
  if request.param == "unigram":
    vocab_file = sentencepiece_models.build_model(
        corpus_file, "unigram", str(tmp_path_factory.mktemp("sp") / "unigram")
    )
  records = make_records(
      tmp_path_factory.mktemp(f"wwm_{request.param}"),
      corpus_file,
      vocab_file,
      "--do_whole_word_mask",
      "--dupe_factor=1",
      "--num_output_shards=1",
  )
  return vocab_file, records


@pytest.mark.slow(seconds=14)
def test_loss_per_word_equals_numpy(vocab_and_records):
  vocab_file, pattern = vocab_and_records
  records = read_records(pattern)
  batch_size, steps = 7, 5
  limit = batch_size * steps
  assert len(records["input_ids"]) > limit
  vocabulary = vocab_lib.read_vocabulary(vocab_file)
  config = get_preset("bert_tiny").replace(
      vocab_size=vocabulary.vocab_size, num_layers=1, max_position_embeddings=SEQ_LEN
  )
  model = Pretrainer(build_encoder(config), use_nsp=True)
  evaluator = PretrainingEvaluator(
      tf.distribute.get_strategy(),
      model,
      PretrainingDataConfig(sorted(tf.io.gfile.glob(pattern)), SEQ_LEN, MAX_PREDICTIONS),
      batch_size,
      max_eval_steps=steps,
      word_starts=vocabulary.word_starts,
  )
  results = evaluator.evaluate()

  rows = {name: values[:limit] for name, values in records.items()}
  outputs = model(
      {
          name: tf.constant(rows[name], tf.int32)
          for name in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")
      },
      training=False,
  )
  logp = log_softmax(np.asarray(outputs["mlm_logits"], np.float64))
  ids, weights = rows["masked_lm_ids"], rows["masked_lm_weights"]
  loss_sum = -(weights * np.take_along_axis(logp, ids[..., None], axis=-1)[..., 0]).sum()
  words = (weights * starts_word_by_string(vocab_file)[ids]).sum()
  # Pieces outnumber words (some words are cut), and every masked piece belongs to a
  # counted word: whole-word masking masks a word from its first piece on.
  assert 0 < words < weights.sum()
  np.testing.assert_allclose(results["mlm_words"], words)
  np.testing.assert_allclose(results["mlm_loss_per_word"], loss_sum / words, rtol=2e-5)
  np.testing.assert_allclose(results["mlm_loss"], loss_sum / weights.sum(), rtol=2e-5)


def test_evaluator_without_word_starts_reports_per_piece_only(vocab_and_records):
  vocab_file, pattern = vocab_and_records
  config = get_preset("bert_tiny").replace(
      vocab_size=vocab_lib.read_vocabulary(vocab_file).vocab_size,
      num_layers=1,
      max_position_embeddings=SEQ_LEN,
  )
  evaluator = PretrainingEvaluator(
      tf.distribute.get_strategy(),
      Pretrainer(build_encoder(config), use_nsp=True),
      PretrainingDataConfig(sorted(tf.io.gfile.glob(pattern)), SEQ_LEN, MAX_PREDICTIONS),
      8,
      max_eval_steps=1,
  )
  results = evaluator.evaluate()
  assert "mlm_loss_per_word" not in results and "mlm_words" not in results


@pytest.mark.slow(seconds=26)
def test_pretrain_reports_it_and_mirrored_eval_repeats_it(
    tmp_path, vocab_and_records, small_config
):
  vocab_file, pattern = vocab_and_records
  if not vocab_file.endswith(".model"):
    pytest.skip("one command run is enough: the SentencePiece one")
  model_dir = tmp_path / "run"
  run_pretrain(
      model_dir,
      vocab_file,
      pattern,
      f"--model_config={small_config}",
      "--num_train_steps=4",
      f"--eval_input_files={pattern}",
      "--eval_batch_size=6",
      "--max_eval_steps=3",
  )
  logged = model_dir_lib.read_eval_results(str(model_dir))["eval"]
  assert np.isfinite(logged["mlm_loss_per_word"]) and logged["mlm_words"] > 0
  assert logged["mlm_loss_per_word"] > logged["mlm_loss"]
  result = forkserver.run(
      [
          sys.executable,
          "-m",
          "recurrent_bert.pretrain",
          "--mode=eval",
          f"--model_dir={model_dir}",
          f"--eval_input_files={pattern}",
          f"--max_seq_length={SEQ_LEN}",
          f"--max_predictions_per_seq={MAX_PREDICTIONS}",
          "--eval_batch_size=6",
          "--max_eval_steps=3",
          "--distribution_strategy=mirrored",
          "--num_cpu_devices=2",
      ],
      cwd=REPO,
      env=subprocess_env(),
      timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  printed = json.loads(result.stdout.strip().splitlines()[-1])["eval"]
  for name in ("mlm_loss_per_word", "mlm_words", "mlm_loss"):
    np.testing.assert_allclose(printed[name], logged[name], rtol=1e-5, err_msg=name)
