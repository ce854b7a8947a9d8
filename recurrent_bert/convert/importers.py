"""Importers: a BERT checkpoint file (TF1, Hugging Face safetensors or a keras-hub preset)
into our `Pretrainer`.

Contract: each importer reads its format's files (weights, the model's config JSON, the
vocabulary and casing shipped beside them), builds a BERT-orig `Pretrainer` of the
source's sizes and fills it through the mappings of `convert.mapping`; a keras-hub preset
of our own `RecurrentBertBackbone` (`convert.keras_hub_preset`) gives a `Pretrainer` of
its ModelConfig, any family, heads included when the preset has them. What it copied and
what stayed freshly initialised is reported by our variable paths in `ImportedBert`.
`import_bert` picks the importer by source kind (`SOURCES`). Hugging Face weights are read
with `safetensors.numpy`, so no PyTorch is needed. Errors in the files raise
`CheckpointMappingError`, naming the file.
"""

import dataclasses
import json
import os
from typing import List, Mapping, Optional

from recurrent_bert.config import ConfigError
from recurrent_bert.config import ModelConfig
from recurrent_bert.config import checked_field_value
from recurrent_bert.config import decode_utf8
from recurrent_bert.config import describe_json_value
from recurrent_bert.config import get_preset
from recurrent_bert.convert.hf_names import DictReader
from recurrent_bert.convert.hf_names import hf_to_tf1_names
from recurrent_bert.convert.mapping import CheckpointMappingError
from recurrent_bert.convert.mapping import assign_pairs
from recurrent_bert.convert.mapping import keras_hub_mlm_head_pairs
from recurrent_bert.convert.mapping import load_from_keras_hub_bert
from recurrent_bert.convert.mapping import load_from_keras_hub_mlm_head
from recurrent_bert.convert.mapping import tf1_bert_pairs
from recurrent_bert.errors import at
from recurrent_bert.errors import first_line
from recurrent_bert.models.encoder import Encoder
from recurrent_bert.models.pretrainer import Pretrainer

# bert_config.json (TF1) / config.json (Hugging Face) key -> (ModelConfig field, default
# when the key is absent; None: required).
BERT_JSON_FIELDS = (
    ("vocab_size", "vocab_size", None),
    ("hidden_size", "hidden_size", None),
    ("num_hidden_layers", "num_layers", None),
    ("num_attention_heads", "num_heads", None),
    ("intermediate_size", "intermediate_size", None),
    ("max_position_embeddings", "max_position_embeddings", 512),
    ("type_vocab_size", "type_vocab_size", 2),
    ("hidden_dropout_prob", "dropout_rate", 0.1),
    ("attention_probs_dropout_prob", "attention_dropout_rate", 0.1),
    ("layer_norm_eps", "layer_norm_epsilon", 1e-12),
    ("initializer_range", "initializer_range", 0.02),
)


def config_from_bert_json(fields: Mapping, gelu_is_exact: bool, source: str) -> ModelConfig:
  """A BERT-orig ModelConfig from a bert_config.json (TF1) or config.json (HF).

  Each value is checked as strictly as a ModelConfig JSON (`config.checked_field_value`):
  128.7 or `true` for a size is refused, naming the key, never truncated to 128 or 1.

  Args:
    fields: the parsed JSON.
    gelu_is_exact: what `hidden_act: "gelu"` means: exact erf form for Hugging Face,
      the tanh approximation in google-research/bert's TF1 code.
    source: the file, for error messages.

  Raises:
    CheckpointMappingError (an InputError): `source: key 'k': what is wrong`.
  """
  if not isinstance(fields, Mapping):
    raise CheckpointMappingError(
        f"{source}: expected a JSON object, got {describe_json_value(fields)}"
    )
  missing = [key for key, _, default in BERT_JSON_FIELDS if default is None and key not in fields]
  if missing:
    raise CheckpointMappingError(f"{source}: lacks the key(s) {missing}")
  values = {}
  for key, field, default in BERT_JSON_FIELDS:
    try:
      values[field] = checked_field_value(field, fields.get(key, default), at(source, key=key))
    except ConfigError as e:
      raise CheckpointMappingError(str(e)) from None
  act = fields.get("hidden_act", "gelu")
  acts = {
      "gelu": "gelu" if gelu_is_exact else "gelu_approximate",
      "gelu_new": "gelu_approximate",
      "gelu_pytorch_tanh": "gelu_approximate",
      "gelu_fast": "gelu_approximate",
      "relu": "relu",
  }
  if not isinstance(act, str) or act not in acts:
    raise CheckpointMappingError(
        f"{at(source, key='hidden_act')}: expected one of {sorted(acts)}, "
        f"got {describe_json_value(act)}"
    )
  position = fields.get("position_embedding_type", "absolute")
  if position != "absolute":
    raise CheckpointMappingError(
        f"{at(source, key='position_embedding_type')}: only \"absolute\" position "
        f"embeddings map onto BERT-orig, got {describe_json_value(position)}"
    )
  try:
    return get_preset("bert_base").replace(hidden_act=acts[act], **values)
  except ConfigError as e:  # a rule between fields, e.g. hidden_size % num_heads
    raise CheckpointMappingError(f"{source}: {e}") from None


def _read_json(path: str, what: str) -> dict:
  """The JSON object in `path` (UTF-8); CheckpointMappingError naming the file otherwise."""
  try:
    with open(path, "rb") as f:
      data = f.read()
  except OSError as e:
    raise CheckpointMappingError(f"cannot read {what} {path!r}: {e.strerror}") from None
  try:
    text = decode_utf8(data, path)
  except ConfigError as e:
    raise CheckpointMappingError(str(e)) from None
  try:
    parsed = json.loads(text)
  except json.JSONDecodeError as e:
    raise CheckpointMappingError(
        f"{path}:{e.lineno}: not valid JSON ({e.msg}, column {e.colno})"
    ) from None
  if not isinstance(parsed, dict):
    raise CheckpointMappingError(
        f"{path}: expected a JSON object, got {describe_json_value(parsed)}"
    )
  return parsed


def _config_before_weights(config_file: str, missing: str, gelu_is_exact: bool) -> ModelConfig:
  """The checkpoint's config, read before its weights so that a mistake in it is found
  without reading them.

  Args:
    config_file: the bert_config.json / config.json.
    missing: the message when `config_file` does not exist.
    gelu_is_exact: as `config_from_bert_json`.

  Raises:
    CheckpointMappingError: the config's refusal, saying that the checkpoint was not
      checked yet (it may be bad too: fixing the config is not known to be enough).
  """
  try:
    if not os.path.isfile(config_file):
      raise CheckpointMappingError(missing)
    return config_from_bert_json(
        _read_json(config_file, "bert_config_file"), gelu_is_exact=gelu_is_exact, source=config_file
    )
  except CheckpointMappingError as e:
    raise CheckpointMappingError(f"{e}; the checkpoint was not checked yet") from None


def _casing(value, place: str) -> Optional[bool]:
  """A recorded casing (`do_lower_case` / `lowercase`): true, false or absent (None)."""
  if value is not None and not isinstance(value, bool):
    raise CheckpointMappingError(
        f"{place}: expected true or false, got {describe_json_value(value)}"
    )
  return value


@dataclasses.dataclass
class ImportedBert:
  """A BERT checkpoint loaded into our models.

  Attributes:
    model: a `Pretrainer` (encoder + MLM head, + NSP head when the source has one).
    vocab_file: the source's vocabulary, when it ships one.
    do_lower_case: the source's casing when it records it, else None.
    copied: our variable paths that received a source weight.
    new: our variable paths the source has no weight for (freshly initialised).
    source: description of where the weights came from.
  """

  model: object
  vocab_file: Optional[str]
  do_lower_case: Optional[bool]
  copied: List[str]
  new: List[str]
  source: str


def _load_bert(
    config: ModelConfig,
    reader,
    has_mlm: bool,
    has_nsp: bool,
    source: str,
    vocab_file: Optional[str],
    do_lower_case: Optional[bool],
) -> ImportedBert:
  """Builds a Pretrainer for `config` and fills it from a TF1-named reader."""
  model = Pretrainer(Encoder(config), use_nsp=has_nsp)
  pairs = tf1_bert_pairs(model if has_mlm else model.encoder, reader, source)
  assign_pairs(pairs)
  copied_ids = {id(v) for v, _ in pairs}
  return ImportedBert(
      model=model,
      vocab_file=vocab_file,
      do_lower_case=do_lower_case,
      copied=[v.path for v in model.weights if id(v) in copied_ids],
      new=[v.path for v in model.weights if id(v) not in copied_ids],
      source=source,
  )


def _existing(path: Optional[str]) -> Optional[str]:
  return path if path and os.path.isfile(path) else None


def _check_given(path: Optional[str], flag: str) -> None:
  if path and not os.path.isfile(path):
    raise CheckpointMappingError(f"{flag}={path!r} does not exist")


def load_tf1_bert(
    checkpoint_prefix: str, bert_config_file: Optional[str] = None, vocab_file: Optional[str] = None
) -> ImportedBert:
  """Imports a google-research/bert checkpoint (e.g. `.../bert_model.ckpt`).

  `bert_config.json` and `vocab.txt` are looked up beside the checkpoint (the release
  layout) unless given. Its `hidden_act: "gelu"` is the tanh approximation of the TF1
  code. The MLM and NSP heads are imported when the checkpoint has them.
  """
  import tensorflow as tf

  _check_given(bert_config_file, "bert_config_file")
  _check_given(vocab_file, "vocab_file")
  directory = os.path.dirname(checkpoint_prefix)
  config = _config_before_weights(
      bert_config_file or os.path.join(directory, "bert_config.json"),
      f"no bert_config.json beside {checkpoint_prefix!r}; pass --bert_config_file",
      gelu_is_exact=False,
  )
  try:
    reader = tf.train.load_checkpoint(checkpoint_prefix)
  # OpError: any reader failure (NotFound, DataLoss, and the bare OpError of a truncated
  # index file, "file is too short to be an sstable").
  except (tf.errors.OpError, ValueError) as e:
    raise CheckpointMappingError(
        f"cannot read TF1 checkpoint {checkpoint_prefix!r}: {first_line(e)}"
    ) from None
  names = reader.get_variable_to_shape_map()
  return _load_bert(
      config,
      reader,
      has_mlm="cls/predictions/output_bias" in names,
      has_nsp="cls/seq_relationship/output_weights" in names,
      source=checkpoint_prefix,
      vocab_file=vocab_file or _existing(os.path.join(directory, "vocab.txt")),
      do_lower_case=None,
  )


def load_hf_bert(
    path: str, bert_config_file: Optional[str] = None, vocab_file: Optional[str] = None
) -> ImportedBert:
  """Imports a Hugging Face BERT safetensors checkpoint.

  Args:
    path: a `.safetensors` file, or a directory holding `model.safetensors`.
    bert_config_file: the model's `config.json`; default: beside the weights.
    vocab_file: default: `vocab.txt` beside the weights, if any.
  The casing comes from `tokenizer_config.json` (`do_lower_case`) when present.
  """
  from safetensors.numpy import load_file

  _check_given(bert_config_file, "bert_config_file")
  _check_given(vocab_file, "vocab_file")
  weights_file = os.path.join(path, "model.safetensors") if os.path.isdir(path) else path
  if not os.path.isfile(weights_file):
    raise CheckpointMappingError(f"no safetensors file at {weights_file!r}")
  directory = os.path.dirname(weights_file)
  config = _config_before_weights(
      bert_config_file or os.path.join(directory, "config.json"),
      f"no config.json beside {weights_file!r}; pass --bert_config_file",
      gelu_is_exact=True,
  )
  try:
    tensors = load_file(weights_file)
  except Exception as e:  # safetensors raises its own SafetensorError
    raise CheckpointMappingError(f"cannot read safetensors file {weights_file!r}: {e}") from None
  renamed = hf_to_tf1_names(tensors)
  tokenizer_config = os.path.join(directory, "tokenizer_config.json")
  do_lower_case = (
      _casing(
          _read_json(tokenizer_config, "tokenizer config").get("do_lower_case"),
          at(tokenizer_config, key="do_lower_case"),
      )
      if os.path.isfile(tokenizer_config)
      else None
  )
  return _load_bert(
      config,
      DictReader(renamed),
      has_mlm="cls/predictions/output_bias" in renamed,
      has_nsp="cls/seq_relationship/output_weights" in renamed,
      source=weights_file,
      vocab_file=vocab_file or _existing(os.path.join(directory, "vocab.txt")),
      do_lower_case=do_lower_case,
  )


# config.json's `registered_name` of keras-hub's BERT backbone.
_KERAS_HUB_BERT = "keras_hub>BertBackbone"
# task.json's `registered_name` of keras-hub's BERT with its MLM head, and the head's file.
_KERAS_HUB_BERT_MASKED_LM = "keras_hub>BertMaskedLM"
_KERAS_HUB_TASK_FILES = ("task.json", "task.weights.h5")


def _keras_hub_masked_lm(preset_dir: str):
  """The preset's `BertMaskedLM` with its weights (no preprocessor), or None when the
  preset holds no such task."""
  import keras_hub

  task_json, task_weights = (os.path.join(preset_dir, name) for name in _KERAS_HUB_TASK_FILES)
  if not (os.path.isfile(task_json) and os.path.isfile(task_weights)):
    return None
  if _read_json(task_json, "keras-hub task config").get("registered_name") != (
      _KERAS_HUB_BERT_MASKED_LM
  ):
    return None
  return keras_hub.models.BertMaskedLM.from_preset(preset_dir, preprocessor=None)


def load_keras_hub_preset(preset_dir: str, vocab_file: Optional[str] = None) -> ImportedBert:
  """Imports a local keras-hub preset: a BertBackbone (from `backbone.save_to_preset(dir)`)
  or our RecurrentBertBackbone (`keras_hub_preset.write_keras_hub_preset`).

  A BertBackbone brings the MLM head when the preset also holds a `BertMaskedLM` task
  (`keras_hub_bert.write_keras_hub_bert_preset` writes one), never an NSP head: heads it
  lacks stay freshly initialised (listed in `new`).
  Ours brings its heads when the preset holds them (`keras_hub_preset.read_keras_hub_preset`).
  The vocabulary and casing come from the preset's tokenizer when it has one.

  Raises:
    CheckpointMappingError: a file missing or unreadable, or a preset of another
      keras-hub class, naming the file.
  """
  import keras_hub

  from recurrent_bert.convert import keras_hub_preset

  _check_given(vocab_file, "vocab_file")
  config_file = os.path.join(preset_dir, keras_hub_preset.CONFIG_FILE)
  if not os.path.isfile(config_file):
    raise CheckpointMappingError(
        f"{preset_dir!r} is not a keras-hub preset directory (no config.json)"
    )
  registered = _read_json(config_file, "keras-hub config").get("registered_name")
  if registered == keras_hub_preset.BACKBONE_NAME:
    contents = keras_hub_preset.read_keras_hub_preset(preset_dir)
    return ImportedBert(
        model=contents.model,
        vocab_file=vocab_file or contents.vocab_file,
        do_lower_case=contents.do_lower_case,
        copied=contents.copied,
        new=contents.new,
        source=preset_dir,
    )
  if registered != _KERAS_HUB_BERT:
    raise CheckpointMappingError(
        f"{at(config_file, key='registered_name')}: a preset of {registered!r}; only "
        f"{_KERAS_HUB_BERT!r} and {keras_hub_preset.BACKBONE_NAME!r} presets import"
    )
  weights = os.path.join(preset_dir, keras_hub_preset.WEIGHTS_FILE)
  if not os.path.isfile(weights):
    raise CheckpointMappingError(f"{weights}: no such file; the preset is incomplete")
  hub_task = _keras_hub_masked_lm(preset_dir)
  if hub_task is None:
    hub = keras_hub.models.BertBackbone.from_preset(preset_dir)
  else:
    hub = hub_task.backbone
  # keras-hub's BERT uses the tanh GELU and LayerNorm epsilon 1e-12.
  config = get_preset("bert_base").replace(
      vocab_size=hub.vocabulary_size,
      hidden_size=hub.hidden_dim,
      num_layers=hub.num_layers,
      num_heads=hub.num_heads,
      intermediate_size=hub.intermediate_dim,
      max_position_embeddings=hub.max_sequence_length,
      type_vocab_size=hub.num_segments,
      hidden_act="gelu_approximate",
  )
  model = Pretrainer(Encoder(config), use_nsp=True)
  load_from_keras_hub_bert(model.encoder, hub)
  copied_ids = {id(v) for v in model.encoder.weights}
  if hub_task is not None:
    copied_ids |= {id(ours) for ours, _ in keras_hub_mlm_head_pairs(model, hub_task)}
    load_from_keras_hub_mlm_head(model, hub_task)
  do_lower_case = None
  tokenizer_json = os.path.join(preset_dir, "tokenizer.json")
  if os.path.isfile(tokenizer_json):
    tokenizer_config = _read_json(tokenizer_json, "tokenizer config").get("config", {})
    if not isinstance(tokenizer_config, dict):
      raise CheckpointMappingError(
          f"{at(tokenizer_json, key='config')}: expected a JSON object, "
          f"got {describe_json_value(tokenizer_config)}"
      )
    do_lower_case = _casing(
        tokenizer_config.get("lowercase"), at(tokenizer_json, key="config.lowercase")
    )
  preset_vocab = os.path.join(preset_dir, "assets", "tokenizer", "vocabulary.txt")
  return ImportedBert(
      model=model,
      vocab_file=vocab_file or _existing(preset_vocab),
      do_lower_case=do_lower_case,
      copied=[v.path for v in model.weights if id(v) in copied_ids],
      new=[v.path for v in model.weights if id(v) not in copied_ids],
      source=preset_dir,
  )


SOURCES = ("tf1", "hf", "keras_hub")


def import_bert(
    source: str, path: str, bert_config_file: Optional[str] = None, vocab_file: Optional[str] = None
) -> ImportedBert:
  """Imports a BERT checkpoint of kind `source` (one of SOURCES) from `path`."""
  if source == "tf1":
    return load_tf1_bert(path, bert_config_file, vocab_file)
  if source == "hf":
    return load_hf_bert(path, bert_config_file, vocab_file)
  if source == "keras_hub":
    if bert_config_file:
      raise CheckpointMappingError(
          "--bert_config_file does not apply to keras_hub presets (their config.json is read)"
      )
    return load_keras_hub_preset(path, vocab_file)
  raise CheckpointMappingError(f"source={source!r} is not one of {SOURCES}")
