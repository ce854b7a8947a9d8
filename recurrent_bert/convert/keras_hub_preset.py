"""keras-hub presets of every model family: the backbone and tokenizer classes keras-hub
rebuilds, the writer of a preset directory from a model dir, and its reader.

A preset directory (`write_keras_hub_preset`):

  config.json                    `RecurrentBertBackbone`, serialized; its config holds
                                 `model_config`, the complete ModelConfig
  model.weights.h5               the backbone's weights (keras-hub's own saver)
  metadata.json                  keras-hub's, plus a "recurrent_bert" entry: vocabulary
                                 kind, do_lower_case, which pretraining heads, the source
  tokenizer.json                 a `RecurrentBertWordPieceTokenizer` or
  assets/tokenizer/<vocabulary>  `RecurrentBertSentencePieceTokenizer` and its
                                 vocabulary.txt / vocabulary.spm (with a vocabulary only)
  pretraining_heads.weights.h5   the MLM (+ NSP) head weights only, in the layout of
                                 `weights_file` (/weights/<variable path>); keras-hub
                                 ignores it (only when the model dir has trained heads)

Any process that has imported this module (which registers the classes with Keras) gets
the model back with `keras_hub.models.Backbone.from_preset(dir)` and the tokenizer with
`keras_hub.tokenizers.Tokenizer.from_preset(dir)`; `read_keras_hub_preset` reads the
whole preset, heads included, back into a `Pretrainer` (`importers.load_keras_hub_preset`).
"""

import json
import os
from typing import List, NamedTuple, Optional

import keras
import keras_hub

# keras_hub.src: the wrapper keras-hub puts on every tokenize (strings in, tf tensors out,
# on the CPU) has no public name.
from keras_hub.src.utils.tensor_utils import preprocessing_function

from recurrent_bert import model_dir as layout
from recurrent_bert import saving
from recurrent_bert import weights_file
from recurrent_bert.config import ConfigError
from recurrent_bert.config import ModelConfig
from recurrent_bert.convert.mapping import CheckpointMappingError
from recurrent_bert.convert.model_dir_source import ModelForExport
from recurrent_bert.data import vocab as vocab_lib
from recurrent_bert.errors import InputError
from recurrent_bert.errors import first_line
from recurrent_bert.models import Encoder
from recurrent_bert.models import Pretrainer
from recurrent_bert.saving.locate import PRETRAINING_HEADS

PACKAGE = "recurrent_bert"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
METADATA_FILE = "metadata.json"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_ASSET_DIR = os.path.join("assets", "tokenizer")
HEADS_FILE = "pretraining_heads.weights.h5"
# The key of our entry in metadata.json (keras-hub reads only its own keys).
METADATA_KEY = "recurrent_bert"
# The vocabulary file names of keras-hub's WordPiece and SentencePiece tokenizers (their
# `file_assets`), under TOKENIZER_ASSET_DIR.
_VOCABULARY_ASSETS = ("vocabulary.txt", "vocabulary.spm")


@keras.saving.register_keras_serializable(package=PACKAGE)
class RecurrentBertBackbone(keras_hub.models.Backbone):
  """Our `Encoder` (any family) as a keras-hub backbone, with keras-hub's input names.

  Inputs (dict, int32, right-padded):
    token_ids:    [B, T] token ids.
    segment_ids:  [B, T] segment (token type) ids.
    padding_mask: [B, T] 1 for real tokens, 0 for padding.
  Outputs (dict):
    sequence_output: [B, T, H].
    pooled_output:   [B, H].

  Args:
    model_config: a `ModelConfig`, or its dict (`to_dict`), as `get_config` stores it.
  Attributes:
    encoder: the wrapped `Encoder`; its variable paths are those of a standalone one.
    model_config: the `ModelConfig`.
  """

  def __init__(self, model_config, dtype=None, **kwargs):
    if not isinstance(model_config, ModelConfig):
      model_config = ModelConfig.from_dict(dict(model_config), source="model_config")
    self.encoder = Encoder(model_config, name="encoder")
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
    padding_mask = keras.Input((None,), dtype="int32", name="padding_mask")
    encoded = self.encoder(
        {"input_ids": token_ids, "input_mask": padding_mask, "segment_ids": segment_ids}
    )
    super().__init__(
        inputs={"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask},
        outputs={
            "sequence_output": encoded["sequence_output"],
            "pooled_output": encoded["pooled_output"],
        },
        dtype=dtype,
        **kwargs,
    )
    self.model_config = model_config
    # keras-hub's tasks tie their output layer to `backbone.token_embedding`.
    self.token_embedding = self.encoder.embeddings.token_embedding

  def get_config(self):
    config = super().get_config()
    config["model_config"] = self.model_config.to_dict()
    return config


# config.json's `registered_name` for RecurrentBertBackbone ("recurrent_bert>...").
BACKBONE_NAME = keras.saving.get_registered_name(RecurrentBertBackbone)


def _words_to_ids(tokenizer, words, flat_ids):
  """[batch, (words)] strings and their flat word-piece ids -> int [batch, (pieces)], dense
  when the tokenizer has a sequence_length, as keras-hub's own tokenizers return them."""
  tokens = words.with_flat_values(flat_ids).merge_dims(-2, -1)
  if tokenizer.sequence_length:
    shape = tokens.shape.as_list()
    shape[-1] = tokenizer.sequence_length
    tokens = tokens.to_tensor(shape=shape)
  return tokens


@keras.saving.register_keras_serializable(package=PACKAGE)
class RecurrentBertWordPieceTokenizer(keras_hub.tokenizers.WordPieceTokenizer):
  """keras-hub's WordPiece tokenizer splitting words exactly as ours does.

  keras-hub's own pre-tokenization differs from BERT's in details (case folding, which is
  NFKC too, instead of lower-casing; U+00A0 not a space; control characters splitting
  words instead of vanishing), so `tokenize` runs our `tokenization.basic_tokenize`, then
  the same tensorflow-text FastWordpiece: the ids are `BertWordpieceTokenizer`'s. As in
  google-research BERT, accents are stripped exactly when lower-casing
  (`strip_accents` follows `lowercase`). Always on the TensorFlow path (keras-hub's pure
  Python one has its own word rules).

  Input: strings [B] (or one string). Output: int32 [B, (pieces)] (dense [B, S] with a
  `sequence_length`).
  """

  backbone_cls = RecurrentBertBackbone

  def __init__(self, vocabulary=None, lowercase=True, **kwargs):
    for token, name in (
        (vocab_lib.CLS_TOKEN, "cls_token"),
        (vocab_lib.SEP_TOKEN, "sep_token"),
        (vocab_lib.PAD_TOKEN, "pad_token"),
        (vocab_lib.MASK_TOKEN, "mask_token"),
        (vocab_lib.CLS_TOKEN, "start_token"),
        (vocab_lib.SEP_TOKEN, "end_token"),
    ):
      self._add_special_token(token, name)
    kwargs["strip_accents"] = lowercase
    super().__init__(vocabulary=vocabulary, lowercase=lowercase, **kwargs)

  def tokenize(self, inputs):
    self._check_vocabulary()
    return self._tokenize_tf(inputs)

  @preprocessing_function
  def _tokenize_tf(self, inputs):
    import tensorflow as tf

    self._maybe_initialized_tf()
    inputs = tf.convert_to_tensor(inputs, tf.string)
    unbatched = inputs.shape.rank == 0
    # In-graph (TensorFlow) text: imported here, so writing a preset needs no TensorFlow.
    from recurrent_bert.data.tokenization import basic_tokenize

    words = basic_tokenize(inputs[None] if unbatched else inputs, self.lowercase)
    tokens = _words_to_ids(self, words, self._fast_word_piece.tokenize(words.flat_values))
    return tokens[0] if unbatched else tokens


@keras.saving.register_keras_serializable(package=PACKAGE)
class RecurrentBertSentencePieceTokenizer(keras_hub.tokenizers.SentencePieceTokenizer):
  """keras-hub's SentencePiece tokenizer of our models' SentencePiece `.model`.

  The model's own normaliser does all normalisation (lower-casing too, when it was trained
  so), as in `SentencepieceTokenizer`: nothing is done outside it. Always on the
  TensorFlow path: the tensorflow-text build our tokenizer runs, which ranks a unigram
  model's equal-score segmentations its own way (the `sentencepiece` package may not).

  Input: strings [B]. Output: int32 [B, (pieces)].
  """

  backbone_cls = RecurrentBertBackbone

  def tokenize(self, inputs):
    self._check_vocabulary()
    return self._tokenize_tf(inputs)


def make_preset_tokenizer(vocab_file: str, do_lower_case: Optional[bool]):
  """(keras-hub tokenizer, vocabulary kind, casing) for a vocabulary file.

  A WordPiece vocabulary with an unrecorded casing (None) lower-cases, the package's
  default (`tokenization.make_tokenizer`); a SentencePiece model's casing is its own.
  """
  if vocab_lib.vocab_kind(vocab_file) == layout.SENTENCEPIECE:
    proto = vocab_lib.read_bytes(vocab_file)
    folds_case = vocab_lib.Vocabulary.from_sentencepiece(proto, where=vocab_file).folds_case
    return RecurrentBertSentencePieceTokenizer(proto=proto), layout.SENTENCEPIECE, folds_case
  tokens = vocab_lib.load_vocab(vocab_file)
  vocab_lib.Vocabulary.from_wordpiece_tokens(tokens)  # refuses one without [CLS] ... [MASK]
  lowercase = True if do_lower_case is None else bool(do_lower_case)
  tokenizer = RecurrentBertWordPieceTokenizer(vocabulary=list(tokens), lowercase=lowercase)
  return tokenizer, layout.WORDPIECE, do_lower_case


def _is_head(path: str) -> bool:
  """A Pretrainer variable of the MLM or NSP head (the MLM head's tied table is the
  encoder's, not its own)."""
  return path.split("/", 1)[0] in PRETRAINING_HEADS


def write_keras_hub_preset(exported: ModelForExport, directory: str) -> List[str]:
  """Writes the preset of the module docstring into `directory` (existing and empty).

  Args:
    exported: `model_dir_source.read_model_dir(...)`.
    directory: where to write; the caller makes the write atomic.

  Returns:
    The names written, relative to `directory`.
  """
  backbone = RecurrentBertBackbone(exported.config)
  ours = weights_file.variables_by_path(exported.encoder)
  for path, variable in weights_file.variables_by_path(backbone.encoder).items():
    variable.assign(ours[path])
  backbone.save_to_preset(directory)
  written = [CONFIG_FILE, WEIGHTS_FILE, METADATA_FILE]
  kind, do_lower_case = None, exported.do_lower_case
  if exported.vocab_file:
    tokenizer, kind, do_lower_case = make_preset_tokenizer(
        exported.vocab_file, exported.do_lower_case
    )
    tokenizer.save_to_preset(directory)
    written += [TOKENIZER_FILE] + [
        os.path.join(TOKENIZER_ASSET_DIR, asset) for asset in tokenizer.file_assets
    ]
  if exported.has_mlm:
    weights_file.save_weights(exported.model, os.path.join(directory, HEADS_FILE), _is_head)
    written.append(HEADS_FILE)
  add_metadata(
      directory,
      vocabulary_kind=kind,
      do_lower_case=do_lower_case,
      has_mlm=exported.has_mlm,
      has_nsp=exported.has_nsp,
      heads_file=HEADS_FILE if exported.has_mlm else None,
      source=exported.kind,
  )
  return written


def add_metadata(directory: str, **entry) -> None:
  """Adds our entry (METADATA_KEY: `entry`) to the metadata.json keras-hub wrote in
  `directory`; keras-hub reads only its own keys."""
  metadata_path = os.path.join(directory, METADATA_FILE)
  with open(metadata_path, encoding="utf-8") as f:
    metadata = json.load(f)
  metadata[METADATA_KEY] = entry
  with open(metadata_path, "w", encoding="utf-8") as f:
    json.dump(metadata, f, indent=4)


class PresetContents(NamedTuple):
  """What `read_keras_hub_preset` found: the fields of `importers.ImportedBert`."""

  model: Pretrainer
  vocab_file: Optional[str]
  do_lower_case: Optional[bool]
  copied: List[str]
  new: List[str]


def _json_object(path: str) -> dict:
  try:
    with open(path, encoding="utf-8") as f:
      parsed = json.load(f)
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise CheckpointMappingError(f"{path}: cannot read it as JSON ({first_line(e)})") from None
  if not isinstance(parsed, dict):
    raise CheckpointMappingError(f"{path}: expected a JSON object")
  return parsed


def _recorded_tokenizer(preset_dir: str):
  """(vocab file, do_lower_case) of the preset's tokenizer: (None, None) without one."""
  metadata_path = os.path.join(preset_dir, METADATA_FILE)
  ours = _json_object(metadata_path).get(METADATA_KEY, {}) if os.path.isfile(metadata_path) else {}
  do_lower_case = ours.get("do_lower_case") if isinstance(ours, dict) else None
  if do_lower_case is not None and not isinstance(do_lower_case, bool):
    raise CheckpointMappingError(
        f"{metadata_path}: key '{METADATA_KEY}.do_lower_case': expected true, false or null"
    )
  for asset in _VOCABULARY_ASSETS:
    path = os.path.join(preset_dir, TOKENIZER_ASSET_DIR, asset)
    if os.path.isfile(path):
      return path, do_lower_case
  return None, do_lower_case


def read_keras_hub_preset(preset_dir: str) -> PresetContents:
  """A `RecurrentBertBackbone` preset (of `write_keras_hub_preset`) as a `Pretrainer`.

  The encoder is the one keras-hub's `Backbone.from_preset` loads (so its weights are
  `copied`); the heads come from the heads file when there is one (`copied`; with the NSP
  head only if the file holds it), else they are freshly initialised (`new`, NSP
  included).

  Raises:
    CheckpointMappingError: a file missing or unreadable, or weights that do not fit the
      config, in one line naming the file.
  """
  config_path = os.path.join(preset_dir, CONFIG_FILE)
  fields = _json_object(config_path).get("config")
  model_config = fields.get("model_config") if isinstance(fields, dict) else None
  try:
    ModelConfig.from_dict(model_config, source=f"{config_path}: config.model_config")
  except ConfigError as e:
    raise CheckpointMappingError(str(e)) from None
  weights_path = os.path.join(preset_dir, WEIGHTS_FILE)
  if not os.path.isfile(weights_path):
    raise CheckpointMappingError(f"{weights_path}: no such file; the preset is incomplete")
  try:
    backbone = keras_hub.models.Backbone.from_preset(preset_dir)
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise CheckpointMappingError(
        f"{weights_path}: keras-hub cannot load the preset: {first_line(e)}"
    ) from None
  heads_path = os.path.join(preset_dir, HEADS_FILE)
  has_heads = os.path.isfile(heads_path)
  try:
    stored = saving.open_model(heads_path) if has_heads else None
    model = Pretrainer(backbone.encoder, use_nsp=stored is None or "nsp_head" in stored.heads)
    if stored is not None:
      stored.restore_heads(model)
  except InputError as e:
    raise CheckpointMappingError(str(e)) from None
  fresh = (
      set()
      if has_heads
      else {id(v) for p, v in weights_file.variables_by_path(model).items() if _is_head(p)}
  )
  vocab_file, do_lower_case = _recorded_tokenizer(preset_dir)
  return PresetContents(
      model=model,
      vocab_file=vocab_file,
      do_lower_case=do_lower_case,
      copied=[v.path for v in model.weights if id(v) not in fresh],
      new=[v.path for v in model.weights if id(v) in fresh],
  )
