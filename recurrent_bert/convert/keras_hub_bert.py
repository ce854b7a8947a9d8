"""A BERT-orig model as keras-hub's own BERT preset, loadable without this package.

Where keras-hub's `BertBackbone` reproduces our encoder (`mapping.is_keras_hub_bert`: the
`bert` family with the tanh GELU and LayerNorm epsilon 1e-12), the model is written as
that class, not as our `RecurrentBertBackbone` (`keras_hub_preset`), so any process with
keras-hub alone loads it:

  keras_hub.models.BertBackbone.from_preset(dir)   always
  keras_hub.models.BertMaskedLM.from_preset(dir)   when the model has a trained MLM head

A preset directory (`write_keras_hub_bert_preset`):

  config.json, model.weights.h5    the BertBackbone (keras-hub's own saver)
  metadata.json                    keras-hub's, plus our "recurrent_bert" entry
  tokenizer.json, assets/tokenizer/vocabulary.txt
                                   a `BertTokenizer` (with a WordPiece vocabulary only)
  task.json, task.weights.h5,      the `BertMaskedLM` task: its MLM head, and a
  preprocessor.json                `BertMaskedLMPreprocessor` when there is a tokenizer
                                   (only with a trained MLM head)

keras-hub's BERT has no next-sentence task: an NSP head is never written. Its MLM head
fixes the exact GELU and LayerNorm epsilon 1e-5 where ours has the tanh GELU and 1e-12,
so `BertMaskedLM` gives logits within about 1e-3 of ours (the encoder's outputs are
the same). Its tokenizer is keras-hub's: the same ids as ours on ordinary text, but its
pre-tokenization differs on rare characters (NFKC case folding, U+00A0, control
characters; see `keras_hub_preset.RecurrentBertWordPieceTokenizer`).
"""

import os
from typing import List, Optional

import keras_hub

from recurrent_bert import model_dir as layout
from recurrent_bert.config import ModelConfig
from recurrent_bert.convert.keras_hub_preset import add_metadata
from recurrent_bert.convert.mapping import CheckpointMappingError
from recurrent_bert.convert.mapping import keras_hub_bert_mismatch
from recurrent_bert.convert.mapping import store_to_keras_hub_bert
from recurrent_bert.convert.mapping import store_to_keras_hub_mlm_head
from recurrent_bert.data import vocab as vocab_lib


def make_bert_backbone(config: ModelConfig):
  """A freshly initialised keras-hub `BertBackbone` of `config`'s sizes (float32).

  Args:
    config: a config for which `mapping.is_keras_hub_bert` holds.

  Returns:
    The backbone: inputs token_ids, segment_ids, padding_mask int [B, T]; outputs
    sequence_output [B, T, H] and pooled_output [B, H].
  """
  return keras_hub.models.BertBackbone(
      vocabulary_size=config.vocab_size,
      num_layers=config.num_layers,
      num_heads=config.num_heads,
      hidden_dim=config.hidden_size,
      intermediate_dim=config.intermediate_size,
      dropout=config.dropout_rate,
      max_sequence_length=config.max_position_embeddings,
      num_segments=config.type_vocab_size,
      dtype="float32",  # the stored weights, whatever the caller's mixed-precision policy
  )


def make_bert_tokenizer(vocab_file: str, do_lower_case: Optional[bool]):
  """keras-hub's `BertTokenizer` of a WordPiece vocab.txt.

  Args:
    vocab_file: the vocab.txt.
    do_lower_case: the recorded casing; None lower-cases, the package's default.

  Returns:
    (tokenizer, lowercase): strings [B] in, int32 [B, (pieces)] out; and its casing.

  Raises:
    CheckpointMappingError: the vocabulary is a SentencePiece model.
    InputError: the vocab.txt is unreadable or lacks a reserved token.
  """
  if vocab_lib.vocab_kind(vocab_file) == layout.SENTENCEPIECE:
    raise CheckpointMappingError(
        f"{vocab_file}: a SentencePiece vocabulary, and keras-hub's BERT tokenizer is "
        "WordPiece; export the family-generic keras-hub preset (--target=keras_hub) instead"
    )
  tokens = vocab_lib.load_vocab(vocab_file)
  vocab_lib.Vocabulary.from_wordpiece_tokens(tokens)  # refuses one without [CLS] ... [MASK]
  lowercase = True if do_lower_case is None else bool(do_lower_case)
  # As google-research/bert (and our tokenizer): accents go exactly when case does.
  tokenizer = keras_hub.models.BertTokenizer(
      vocabulary=list(tokens), lowercase=lowercase, strip_accents=lowercase
  )
  return tokenizer, lowercase


def write_keras_hub_bert_preset(exported, directory: str) -> List[str]:
  """Writes the preset of the module docstring into `directory` (existing and empty).

  Args:
    exported: the model dir read for export; reads `.config` (ModelConfig), `.encoder`
      (our Encoder), `.model` (a Pretrainer, its `mlm_head` read only when `.has_mlm`),
      `.has_mlm`, `.has_nsp`, `.vocab_file`, `.do_lower_case`, `.kind` and `.path`.
    directory: where to write; the caller makes the write atomic.

  Returns:
    The names written, relative to `directory`, sorted.

  Raises:
    CheckpointMappingError: keras-hub's BertBackbone cannot reproduce the model, or its
      vocabulary is SentencePiece (both checked before anything is written).
  """
  mismatch = keras_hub_bert_mismatch(exported.config)
  if mismatch:
    raise CheckpointMappingError(
        f"{exported.path}: {mismatch}; export the family-generic keras-hub preset "
        "(--target=keras_hub) instead"
    )
  tokenizer, lowercase = None, exported.do_lower_case
  if exported.vocab_file:
    tokenizer, lowercase = make_bert_tokenizer(exported.vocab_file, exported.do_lower_case)
  backbone = make_bert_backbone(exported.config)
  store_to_keras_hub_bert(exported.encoder, backbone)
  if exported.has_mlm:
    preprocessor = None
    if tokenizer is not None:
      # Longer inputs would run past the learned positions.
      preprocessor = keras_hub.models.BertMaskedLMPreprocessor(
          tokenizer, sequence_length=exported.config.max_position_embeddings
      )
    task = keras_hub.models.BertMaskedLM(backbone, preprocessor=preprocessor)
    store_to_keras_hub_mlm_head(exported.model, task)
    task.save_to_preset(directory)  # the backbone and tokenizer too
  else:
    backbone.save_to_preset(directory)
    if tokenizer is not None:
      tokenizer.save_to_preset(directory)
  add_metadata(
      directory,
      vocabulary_kind=layout.WORDPIECE if tokenizer is not None else None,
      do_lower_case=lowercase,
      has_mlm=exported.has_mlm,
      # keras-hub's BERT has no next-sentence task: an NSP head is never written.
      has_nsp=False,
      source_has_nsp=exported.has_nsp,
      source=exported.kind,
  )
  return sorted(
      os.path.relpath(os.path.join(root, name), directory)
      for root, _, names in os.walk(directory)
      for name in names
  )
