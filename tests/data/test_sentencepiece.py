"""The SentencePiece tokenizer against the `sentencepiece` library's own encoder and decoder.

Tiny unigram and BPE models (400 pieces) are learned from a real corpus slice plus
non-ASCII lines; the reference for every piece, id and decoded text is
`sentencepiece.SentencePieceProcessor` loaded from the same file. The data tool's TF-free
tokenizer is checked against the in-graph one, also on text rich in runs ('00000',
'!!!!!') where the two libraries break ties between equal-score segmentations apart.
"""

import math
import os

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from recurrent_bert import model_dir as layout
from recurrent_bert.data import mlm_masking
from recurrent_bert.data import native_tokenizer
from recurrent_bert.data import sentencepiece_vocab
from recurrent_bert.data import tokenization
from recurrent_bert.data import vocab as vocab_lib
from recurrent_bert.data.dynamic_masking import DynamicMasker
from recurrent_bert.data.sentencepiece_tokenizer import SentencepieceTokenizer
from tests.data.sentencepiece_models import MARKER
from tests.data.sentencepiece_models import NON_ASCII
from tests.data.sentencepiece_models import build_model
from tests.data.sentencepiece_models import check_whole_words
from tests.data.sentencepiece_models import run_lines

EXTRA = [
    "  Leading,   repeated   and trailing spaces  ",
    "Tabs\tand\u00a0no-break spaces",
    "UPPER case WORDS and MiXeD",
    "Unseen: ☃ ♞ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "",
]


@pytest.fixture(scope="module")
def texts(corpus_file):
  with open(corpus_file, encoding="utf-8") as f:
    lines = [line.strip() for line in f if line.strip()]
  return lines[::40][:120] + NON_ASCII + EXTRA


@pytest.fixture(scope="module", params=sentencepiece_vocab.MODEL_TYPES)
def model_file(request, corpus_file, tmp_path_factory):
  return build_model(corpus_file, request.param, str(tmp_path_factory.mktemp("spm") / "spm"))


@pytest.fixture(scope="module")
def reference(model_file):
  return sentencepiece.SentencePieceProcessor(model_file=model_file)


@pytest.fixture(scope="module")
def tokenizer(model_file):
  return tokenization.make_tokenizer(model_file)


@pytest.mark.slow(seconds=3)
def test_make_tokenizer_picks_sentencepiece_by_name_or_content(model_file, tmp_path, vocab_file):
  assert isinstance(tokenization.make_tokenizer(model_file), SentencepieceTokenizer)
  renamed = tmp_path / "spm.bin"  # no .model: recognised by its content
  renamed.write_bytes(open(model_file, "rb").read())
  assert vocab_lib.vocab_kind(str(renamed)) == layout.SENTENCEPIECE
  assert tokenization.make_tokenizer(str(renamed)).kind == layout.SENTENCEPIECE
  assert vocab_lib.vocab_kind(vocab_file) == layout.WORDPIECE
  assert isinstance(tokenization.make_tokenizer(vocab_file), tokenization.BertWordpieceTokenizer)


def test_pieces_and_ids_equal_the_library_eagerly(tokenizer, reference, texts):
  ids = tokenizer.tokenize_flat(texts).to_list()
  assert ids == reference.encode(texts)
  pieces = [
      [p.decode("utf-8") for p in row] for row in tokenizer.tokenize_to_pieces(texts).to_list()
  ]
  # The library spells an unknown piece as its text; ours is the vocabulary's [UNK].
  expected = [
      [p if i != reference.unk_id() else "[UNK]" for p, i in zip(row_pieces, row_ids)]
      for row_pieces, row_ids in zip(reference.encode(texts, out_type=str), reference.encode(texts))
  ]
  assert pieces == expected
  assert any("[UNK]" in row for row in pieces)  # the text has unknown characters
  # Non-ASCII text is covered (pieces, not [UNK]) where the model saw it.
  for row in reference.encode(NON_ASCII):
    assert reference.unk_id() not in row
  assert "東" in "".join(reference.encode(NON_ASCII[2], out_type=str))


def test_ids_equal_the_library_in_tf_data_and_tf_function(tokenizer, reference, texts):
  dataset = tf.data.Dataset.from_tensor_slices(texts).batch(16).map(tokenizer.tokenize_flat)
  in_data = [row for batch in dataset for row in batch.to_list()]
  assert in_data == reference.encode(texts)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def grouped(batch):
    return tokenizer.tokenize(batch).merge_dims(1, 2)

  assert grouped(tf.constant(texts)).to_list() == reference.encode(texts)


def test_native_tokenizer_gives_the_same_ids(model_file, tokenizer, reference, texts):
  native = native_tokenizer.make_native_tokenizer(model_file)
  assert isinstance(native, native_tokenizer.NativeSentencepieceTokenizer)
  assert native.tokenize_lists(texts) == tokenizer.tokenize_flat(texts).to_list()
  assert native.tokenize_lists(texts) == reference.encode(texts)  # no ties in this text


@pytest.fixture(scope="module")
def runs_model(corpus_file, tmp_path_factory):
  """A unigram model learned with runs in its text: it holds pieces such as '00' and '000'
  that segment longer runs in several ways of equal score."""
  output = str(tmp_path_factory.mktemp("runs") / "spm")
  return build_model(corpus_file, "unigram", output, vocab_size=600, extra=run_lines(1000))


def test_data_tool_breaks_ties_as_the_in_graph_tokenizer(runs_model):
  # Unknown characters (one [UNK] per run) and user-defined symbols next to runs too.
  lines = run_lines(1500, seed=1) + ["♞♞ 00000 ♞ -999", "[MASK]00000 [CLS]999[SEP]-----"]
  expected = SentencepieceTokenizer(runs_model).tokenize_flat(lines).to_list()
  # Ties exist: two adjacent pieces that commute as strings ('00' '000') swap into another
  # segmentation of the same text, of the same total score.
  library = sentencepiece.SentencePieceProcessor(model_file=runs_model)
  score = lambda ids: math.fsum(library.get_score(i) for i in ids)
  tied_lines = 0
  for ids in expected:
    pieces = [library.id_to_piece(i) for i in ids]
    for k in range(len(ids) - 1):
      a, b = pieces[k], pieces[k + 1]
      if a != b and a + b == b + a:
        swapped = ids[:k] + [ids[k + 1], ids[k]] + ids[k + 2 :]
        assert "".join(library.id_to_piece(i) for i in swapped) == "".join(pieces)
        assert score(swapped) == score(ids)
        tied_lines += 1
        break
  assert tied_lines > 100
  native = native_tokenizer.make_native_tokenizer(runs_model)
  assert native.tokenize_lists(lines) == expected


def test_words_group_pieces_from_one_marked_piece_to_the_next(tokenizer, reference, texts):
  special = {"[PAD]", "[CLS]", "[SEP]", "[MASK]"}
  expected = []
  for pieces in reference.encode(texts, out_type=str):
    words = []
    for piece in pieces:
      if not words or piece.startswith(MARKER) or piece in special:
        words.append([])
      words[-1].append(reference.piece_to_id(piece))
    expected.append(words)
  assert tokenizer.tokenize(texts).to_list() == expected


def test_detokenize_round_trips_modulo_normalisation(tokenizer, reference, texts):
  decoded = [
      t.decode("utf-8") for t in tokenizer.detokenize(tokenizer.tokenize_flat(texts)).numpy()
  ]
  assert decoded == [reference.decode(ids) for ids in reference.encode(texts)]
  for text, ids, out in zip(texts, reference.encode(texts), decoded):
    if reference.unk_id() not in ids:  # every character covered: back to the normalised text
      assert out == reference.normalize(text).replace(MARKER, " ").lstrip(" ")
  assert decoded[texts.index(EXTRA[2])] == "upper case words and mixed"  # the model folds case
  # A dense, [PAD]-padded batch decodes alike: [PAD] is a control piece, it decodes to nothing.
  dense = tokenizer.tokenize_flat(texts[:4]).to_tensor(default_value=tokenizer.pad_id)
  assert [t.decode() for t in tokenizer.detokenize(dense).numpy()] == decoded[:4]


def test_special_symbols_have_the_fixed_ids(tokenizer, reference):
  assert tokenizer.special_ids == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
  assert [reference.id_to_piece(i) for i in range(5)] == list(vocab_lib.RESERVED_TOKENS)
  assert reference.pad_id() == 0 and reference.unk_id() == 1
  assert reference.bos_id() == -1 and reference.eos_id() == -1
  assert tokenizer.do_lower_case and tokenizer.vocab_size == reference.get_piece_size() == 400


def test_special_symbols_in_text_are_their_ids(tokenizer, reference):
  text = "Paris is the [MASK] of France. [CLS] first [SEP] second [mask]"
  ids = tokenizer.tokenize_flat([text]).to_list()[0]
  assert ids == reference.encode(text)
  assert ids.count(4) == 1 and ids.count(2) == 1 and ids.count(3) == 1
  pieces = reference.encode(text, out_type=str)
  mask = pieces.index("[MASK]")
  assert pieces[mask - 1] == MARKER  # the space before a user-defined symbol: a piece of its own
  assert "[mask]" in tokenizer.detokenize([ids]).numpy()[0].decode()  # lower case: plain text
  assert tokenizer.detokenize([ids]).numpy()[0].decode().startswith("paris is the [MASK] of")
  words = tokenizer.tokenize([text]).to_list()[0]
  assert [4] in words and [2] in words and [3] in words  # each a word of its own


def test_tokenizer_serves_from_a_saved_model(tokenizer, reference, texts, tmp_path):
  module = tf.Module()
  module.tokenizer = tokenizer
  module.encode = tf.function(
      lambda t: tokenizer.tokenize_flat(t).to_tensor(-1),
      input_signature=[tf.TensorSpec([None], tf.string)],
  )
  tf.saved_model.save(module, str(tmp_path / "saved"))
  os.rename(tokenizer.vocab_file, tokenizer.vocab_file + ".gone")  # the model is in the graph
  try:
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    out = loaded.encode(tf.constant(texts[-12:])).numpy()
  finally:
    os.rename(tokenizer.vocab_file + ".gone", tokenizer.vocab_file)
  assert [[i for i in row if i >= 0] for row in out.tolist()] == reference.encode(texts[-12:])


def test_whole_word_masking_never_masks_part_of_a_word(tokenizer, reference, texts):
  vocabulary = vocab_lib.read_vocabulary(tokenizer.vocab_file)
  length = 48
  rows, lengths = [], []
  for ids in reference.encode(texts):
    if len(ids) > 4:
      row = [vocabulary.cls_id] + ids[: length - 2] + [vocabulary.sep_id]
      rows.append(row + [vocabulary.pad_id] * (length - len(row)))
      lengths.append(len(row))
  ids = np.array(rows, np.int64)
  input_mask = (np.arange(length)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
  config = mlm_masking.MaskingConfig(
      max_predictions_per_seq=12, masked_lm_prob=0.25, whole_word_mask=True
  )
  vocab = list(vocabulary.tokens)
  # Dynamic masking (in-graph).
  masker = DynamicMasker(config, vocabulary)
  for seed in range(3):
    out = masker({"input_ids": tf.constant(ids), "input_mask": tf.constant(input_mask)}, [seed, 7])
    check_whole_words(
        ids,
        input_mask,
        out["masked_lm_positions"].numpy(),
        out["masked_lm_weights"].numpy(),
        vocab,
        vocabulary.cls_id,
        vocabulary.sep_id,
    )
  # The record writer's numpy twin, with the native tokenizer's word starts.
  native = native_tokenizer.make_native_tokenizer(tokenizer.vocab_file)
  for seed in range(3):
    out = mlm_masking.mask_batch(
        ids,
        input_mask,
        native.is_word_start[ids],
        np.random.default_rng(seed),
        config,
        vocab_size=vocabulary.vocab_size,
        mask_id=vocabulary.mask_id,
        cls_id=vocabulary.cls_id,
        sep_id=vocabulary.sep_id,
    )
    check_whole_words(
        ids,
        input_mask,
        out["masked_lm_positions"],
        out["masked_lm_weights"],
        vocab,
        vocabulary.cls_id,
        vocabulary.sep_id,
    )


def test_a_file_that_is_no_model_is_refused_naming_it(tmp_path):
  junk = tmp_path / "junk.model"
  junk.write_bytes(b"\n\x05hello not a model")
  with pytest.raises(vocab_lib.InputError, match="junk.model.*not a SentencePiece model"):
    tokenization.make_tokenizer(str(junk))


def test_offsets_are_the_library_byte_offsets_in_the_original_text(tokenizer, reference, texts):
  ids, starts, ends = tokenizer.tokenize_with_offsets(texts)
  for text, row_ids, row_starts, row_ends in zip(
      texts, ids.to_list(), starts.to_list(), ends.to_list()
  ):
    pieces = reference.encode(text, return_type="proto").pieces
    assert row_ids == [p.id for p in pieces]
    assert row_starts == [p.begin for p in pieces] and row_ends == [p.end for p in pieces]
    raw = text.encode("utf-8")
    surfaces = [raw[a:b].decode("utf-8") for a, b in zip(row_starts, row_ends)]
    assert surfaces == [p.surface for p in pieces]  # whole characters of the original text


def test_a_model_without_the_reserved_symbols_is_refused_naming_them(corpus_file, tmp_path):
  lines = list(sentencepiece_vocab.iter_lines([corpus_file]))[:3000]
  model = tmp_path / "t5_like.model"
  with open(model, "wb") as f:
    sentencepiece.SentencePieceTrainer.Train(
        sentence_iterator=iter(lines), model_writer=f, vocab_size=300, minloglevel=2
    )  # the defaults: <unk>=0 <s>=1 </s>=2, no pad, no [CLS] [SEP] [MASK]
  with pytest.raises(
      vocab_lib.InputError, match=r"t5_like\.model.*pad.*\[CLS\], \[SEP\], \[MASK\]"
  ):
    tokenization.make_tokenizer(str(model))


def test_tokenizes_after_keras_reseeds(model_file, reference, texts):
  # tf.random.set_seed (Keras' set_random_seed, which every command calls) clears the eager
  # kernel cache, and with it tensorflow-text's unnamed model resource; ours is named.
  import keras

  tokenizer = SentencepieceTokenizer(model_file)
  before = tokenizer.tokenize_flat(texts[:3]).to_list()
  keras.utils.set_random_seed(7)
  after = tokenizer.tokenize_flat(texts[:3]).to_list()
  assert before == after == [reference.encode(t) for t in texts[:3]]
