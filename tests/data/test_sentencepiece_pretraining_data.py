"""Pretraining data with a SentencePiece model: records, whole-word and dynamic masking,
and what a pretraining model_dir records. The reference for ids is the `sentencepiece`
library's encoding of the corpus sentences."""

import json
import os
import sys

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from recurrent_bert import model_dir as layout
from recurrent_bert import saving
from recurrent_bert.data import pretraining_corpus
from recurrent_bert.data import pretraining_data
from recurrent_bert.data import pretraining_options
from recurrent_bert.data import sentencepiece_vocab
from recurrent_bert.data import vocab as vocab_lib
from recurrent_bert.data.dynamic_masking import DynamicMasker
from recurrent_bert.data.mlm_masking import MaskingConfig
from tests.data.sentencepiece_models import build_model
from tests.data.sentencepiece_models import check_whole_words
from tests.end_to_end.test_commands_bad_input import assert_one_line_error
from tests.support import forkserver
from tests.training.conftest import REPO
from tests.training.conftest import make_records
from tests.training.conftest import run_pretrain
from tests.training.conftest import small_config  # noqa: F401
from tests.training.conftest import subprocess_env

pytestmark = pytest.mark.slow(seconds=35)

SEQ, PRED = 64, 10
SPEC = {  # written out here, independent of schema.py
    "input_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
    "input_mask": tf.io.FixedLenFeature([SEQ], tf.int64),
    "segment_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
    "masked_lm_positions": tf.io.FixedLenFeature([PRED], tf.int64),
    "masked_lm_ids": tf.io.FixedLenFeature([PRED], tf.int64),
    "masked_lm_weights": tf.io.FixedLenFeature([PRED], tf.float32),
    "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
}
UNMASKED_SPEC = {k: v for k, v in SPEC.items() if not k.startswith("masked_lm")}


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory, corpus_file):
  """The first ~60 KB of the corpus slice, whole documents."""
  with open(corpus_file, encoding="utf-8") as f:
    documents = f.read().split("\n\n")
  kept, size = [], 0
  while size < 60_000:
    kept.append(documents[len(kept)])
    size += len(kept[-1])
  path = tmp_path_factory.mktemp("small") / "corpus.txt"
  path.write_text("\n\n".join(kept) + "\n", encoding="utf-8")
  return str(path)


@pytest.fixture(scope="module", params=sentencepiece_vocab.MODEL_TYPES)
def model_file(request, corpus_file, tmp_path_factory):
  return build_model(corpus_file, request.param, str(tmp_path_factory.mktemp("spm") / "spm"))


def generate(directory, corpus, model, **overrides):
  settings = dict(
      max_seq_length=SEQ,
      masking=MaskingConfig(max_predictions_per_seq=PRED),
      dupe_factor=1,
      chunk_bytes=30_000,
      show_progress=False,
  )
  settings.update(overrides)
  options = pretraining_options.GeneratorOptions(
      input_files=[corpus],
      vocab_file=model,
      output_files=[str(directory / "shard.tfrecord")],
      stats_file=str(directory / "stats.json"),
      **settings,
  )
  stats = pretraining_data.create_pretraining_data(options)
  records = []
  for raw in tf.data.TFRecordDataset(options.output_files):
    spec = UNMASKED_SPEC if options.dynamic_masking else SPEC
    records.append({k: v.numpy() for k, v in tf.io.parse_single_example(raw, spec).items()})
  return records, stats


def document_streams(corpus, model):
  """Per document, the library's ids of its sentences, concatenated, as ",id,id,...," text."""
  processor = sentencepiece.SentencePieceProcessor(model_file=model)
  streams = []
  for document in pretraining_corpus.iter_documents([corpus]):
    ids = [i for sentence in processor.encode(document.sentences) for i in sentence]
    streams.append("," + ",".join(map(str, ids)) + ",")
  return streams


def test_records_hold_the_library_encoding_of_the_sentences(tmp_path, small_corpus, model_file):
  records, stats = generate(tmp_path, small_corpus, model_file, dynamic_masking=True)
  assert stats["instances"] == len(records) > 100
  assert stats["options"]["vocab_kind"] == layout.SENTENCEPIECE
  streams = document_streams(small_corpus, model_file)
  vocabulary = vocab_lib.read_vocabulary(model_file)
  for record in records[:60]:
    size = int(record["input_mask"].sum())
    ids = record["input_ids"][:size].tolist()
    assert ids[0] == vocabulary.cls_id and ids[-1] == vocabulary.sep_id
    first_sep = ids.index(vocabulary.sep_id)
    # Each segment is consecutive sentences of one document (truncation cuts the ends).
    for segment in (ids[1:first_sep], ids[first_sep + 1 : -1]):
      assert segment
      needle = "," + ",".join(map(str, segment)) + ","
      assert any(needle in stream for stream in streams), segment


def test_whole_word_masking_in_the_records_and_at_read_time(tmp_path, small_corpus, model_file):
  vocabulary = vocab_lib.read_vocabulary(model_file)
  config = MaskingConfig(max_predictions_per_seq=PRED, masked_lm_prob=0.2, whole_word_mask=True)
  records, _ = generate(tmp_path / "masked", small_corpus, model_file, masking=config)
  original = np.stack([r["input_ids"] for r in records])
  positions = np.stack([r["masked_lm_positions"] for r in records])
  weights = np.stack([r["masked_lm_weights"] for r in records])
  real = weights > 0
  rows = np.nonzero(real)[0]
  original[rows, positions[real]] = np.stack([r["masked_lm_ids"] for r in records])[real]
  input_mask = np.stack([r["input_mask"] for r in records])
  ids = list(vocabulary.tokens)
  check_whole_words(
      original, input_mask, positions, weights, ids, vocabulary.cls_id, vocabulary.sep_id
  )

  (tmp_path / "unmasked").mkdir()
  records, _ = generate(tmp_path / "unmasked", small_corpus, model_file, dynamic_masking=True)
  features = {k: np.stack([r[k] for r in records]) for k in ("input_ids", "input_mask")}
  masker = DynamicMasker(config, vocabulary)
  dataset = masker.mask_dataset(tf.data.Dataset.from_tensor_slices(features).batch(64), seed=5)
  for batch in dataset.take(4):
    rows = batch["input_mask"].shape[0]
    unmasked = batch["input_ids"].numpy().copy()
    positions, weights = batch["masked_lm_positions"].numpy(), batch["masked_lm_weights"].numpy()
    real = weights > 0
    unmasked[np.nonzero(real)[0], positions[real]] = batch["masked_lm_ids"].numpy()[real]
    assert rows == len(unmasked)
    check_whole_words(
        unmasked,
        batch["input_mask"].numpy(),
        positions,
        weights,
        ids,
        vocabulary.cls_id,
        vocabulary.sep_id,
    )


def test_model_dir_records_the_sentencepiece_model_and_its_kind(tmp_path, model_file, vocab_file):
  saving.write_tokenizer_files(str(tmp_path / "sp"), model_file, do_lower_case=False)
  info = layout.read_tokenizer_info(str(tmp_path / "sp"))
  # The model folds case whatever the flag said: its own casing is recorded.
  assert info == layout.TokenizerInfo("sentencepiece", True, "sentencepiece.model")
  with open(model_file, "rb") as a, open(tmp_path / "sp" / "sentencepiece.model", "rb") as b:
    assert a.read() == b.read()
  assert not os.path.exists(tmp_path / "sp" / "vocab.txt")
  saving.write_tokenizer_files(str(tmp_path / "wp"), vocab_file, do_lower_case=False)
  assert layout.read_tokenizer_info(str(tmp_path / "wp")) == layout.TokenizerInfo(
      "wordpiece", False, "vocab.txt"
  )


def test_tools_and_pretrain_with_dynamic_masking_take_a_model(
    tmp_path, small_corpus, corpus_file, small_config
):
  model = build_model(corpus_file, "unigram", str(tmp_path / "spm"))
  # The tool with two (TensorFlow-free, forked) workers.
  records = make_records(
      tmp_path / "records",
      small_corpus,
      model,
      "--dupe_factor=1",
      "--dynamic_masking",
      "--nouse_nsp",
      "--num_workers=2",
      "--do_whole_word_mask",
  )
  with open(tmp_path / "records" / "stats.json", encoding="utf-8") as f:
    assert json.load(f)["options"]["vocab_kind"] == "sentencepiece"
  run_pretrain(
      tmp_path / "run",
      model,
      records,
      "--dynamic_masking",
      "--do_whole_word_mask",
      f"--model_config={small_config}",
      "--num_train_steps=2",
      "--warmup_steps=1",
      "--steps_per_loop=2",
      "--save_checkpoints_steps=2",
      "--nouse_nsp",
  )
  for directory in (tmp_path / "run", tmp_path / "run" / "encoder"):
    info = layout.read_tokenizer_info(str(directory))
    assert info is not None and info.type == "sentencepiece", directory
    assert os.path.isfile(directory / info.vocab_file)
  source = saving.open_model(str(tmp_path / "run"))
  assert source.vocab_file.endswith("sentencepiece.model")


def test_a_file_that_is_no_model_fails_the_tool_in_one_line(tmp_path, small_corpus):
  junk = tmp_path / "junk.model"
  junk.write_bytes(b"\n\x07not a model at all")
  result = forkserver.run(
      [
          sys.executable,
          "-m",
          "recurrent_bert.tools.create_pretraining_data",
          f"--input_files={small_corpus}",
          f"--vocab_file={junk}",
          f"--output_dir={tmp_path / 'out'}",
      ],
      REPO,
      subprocess_env(),
      timeout=120,
  )
  assert_one_line_error(result, "junk.model", "not a SentencePiece model")
  assert not os.path.exists(tmp_path / "out")
