"""Model configuration and the presets of SPEC §5.

`ModelConfig` is the single description every model is built from. It round-trips
through JSON (`to_json` / `from_json`, also the `configs/models/*.json` files) and
validates itself on construction, naming the offending field.

Preset names are `<family>_<size>`, e.g. `bert_base`, `trans_blstm_small_2_large`,
`swishrnn_tiny`. Families: bert, bert_rab, trans_blstm_1, trans_blstm_2,
trans_blstm_small_1, trans_blstm_small_2, swishrnn, blstm. Sizes: tiny, mini, base, large.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import numbers
import os
from typing import Any, Callable, Dict, Optional, Tuple

from recurrent_bert.errors import InputError
from recurrent_bert.errors import at
from recurrent_bert.errors import refuse_duplicate_keys

# The one source of the allowed values: the layers import them from here (config stays free
# of TensorFlow, so a config is checked before TensorFlow loads).
MIXERS = ("ffn", "blstm", "parallel_blstm", "swishrnn")
ACTIVATIONS = ("gelu", "gelu_approximate", "relu")
POSITION_EMBEDDINGS = ("absolute", "none")
ATTENTION_BIASES = ("none", "relative")
SWISH_RNN_RESIDUALS = ("x1", "x2")
SWISH_RNN_GATES = ("gelu", "sigmoid")
SWISH_RNN_DIRECTIONS = ("forward", "backward", "bidirectional")
# How a BLSTM or SwishRNN runs, never what it computes (layers/blstm.py, layers/swish_rnn.py).
BLSTM_IMPLEMENTATIONS = ("auto", "keras", "scan", "fused", "block", "portable", "pallas", "cudnn")
SWISH_RNN_IMPLEMENTATIONS = ("auto", "fused", "loop", "scan", "portable", "pallas", "triton")
# Which encoder layers a task head reads (--layer_mix; layers/layer_combination.py). "Four"
# means the last min(4, L) blocks of an L-block encoder.
LAYER_MIXES = (
    "last",  # the last block's output: what every head reads by default
    "second_to_last",
    "sum_last_four",
    "concat_last_four",  # width 4H
    "mix_last_four",  # ELMo's learned scalar mix of the last four
    "mix_all",  # ... of every block
)


class ConfigError(InputError):
  """A ModelConfig field (or a config file) holds an invalid value."""


# -- the schema: what each field's JSON value must be ----------------------------------
#
# Strict, because a lenient reading changes the model silently: the string "false" is
# truthy (attention stays on), `true` is the integer 1, 128.7 truncates to 128, and an
# infinite initializer range gives NaN outputs. A field's checker returns the value in its
# canonical type (an integral 128.0 -> 128, 0 -> 0.0 for a rate) or raises _BadValue
# saying what was expected; the caller names the place.

# TensorFlow indexes embeddings and shapes with int32; nothing larger is a sensible size.
_MAX_SIZE = 2**31 - 1


class _BadValue(Exception):
  """A value does not fit its field; the message says what was expected."""


def describe_json_value(value: Any) -> str:
  """How an error message shows a (JSON) value: `the string "0.1"`, `true`, `Infinity`."""
  if isinstance(value, str):
    return f"the string {json.dumps(value, ensure_ascii=False)}"
  if value is None or isinstance(value, (bool, int, float)):
    return json.dumps(value)
  if isinstance(value, (list, tuple)):
    text = json.dumps(list(value), ensure_ascii=False, default=repr)
    return f"the list {text if len(text) <= 40 else text[:37] + '...'}"
  if isinstance(value, dict):
    return "a JSON object"
  return f"a {type(value).__name__} ({value!r})"


def _integer(value: Any) -> Optional[int]:
  """`value` as an int if it is a whole number (not a bool, not a string), else None."""
  if isinstance(value, bool):
    return None
  if isinstance(value, numbers.Integral):
    return int(value)
  if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
    return int(value)
  return None


def _positive_int(value: Any) -> int:
  number = _integer(value)
  if number is None or not 0 < number <= _MAX_SIZE:
    raise _BadValue(f"a positive integer (at most {_MAX_SIZE})")
  return number


def _optional_positive_int(what_null_means: str) -> Callable[[Any], Optional[int]]:
  def check(value: Any) -> Optional[int]:
    if value is None:
      return None
    try:
      return _positive_int(value)
    except _BadValue:
      raise _BadValue(f"a positive integer or null (= {what_null_means})") from None

  return check


def _boolean(value: Any) -> bool:
  if not isinstance(value, bool):
    raise _BadValue("true or false")
  return value


def _number_in(low: float, high: float, low_open: bool, high_open: bool):
  interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

  def check(value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or value < low
        or value > high
        or (low_open and value == low)
        or (high_open and value == high)
    ):
      raise _BadValue(f"a number in {interval}")
    return float(value)

  return check


def _one_of(allowed: Tuple[str, ...]) -> Callable[[Any], str]:
  def check(value: Any) -> str:
    if isinstance(value, str) and value in allowed:
      return value
    hint = ""
    if isinstance(value, str):
      close = difflib.get_close_matches(value, allowed, n=1)
      hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise _BadValue(f"one of {', '.join(map(repr, allowed))}{hint}")

  return check


def _step_sizes(value: Any) -> Tuple[int, ...]:
  expected = "a non-empty list of positive integers"
  if not isinstance(value, (list, tuple)) or not value:
    raise _BadValue(expected)
  steps = tuple(_integer(k) for k in value)
  if any(k is None or not 0 < k <= _MAX_SIZE for k in steps):
    raise _BadValue(expected)
  return steps


# One checker per ModelConfig field (tests/test_config.py keeps the two in step).
_FIELD_CHECKS: Dict[str, Callable[[Any], Any]] = {
    "vocab_size": _positive_int,
    "hidden_size": _positive_int,
    "num_layers": _positive_int,
    "num_heads": _positive_int,
    "intermediate_size": _positive_int,
    "max_position_embeddings": _positive_int,
    "type_vocab_size": _positive_int,
    "position_embedding": _one_of(POSITION_EMBEDDINGS),
    "attention_bias": _one_of(ATTENTION_BIASES),
    "relative_num_buckets": _positive_int,
    "relative_max_distance": _positive_int,
    "relative_bias_shared": _boolean,
    "use_attention": _boolean,
    "mixer": _one_of(MIXERS),
    "blstm_units": _optional_positive_int("hidden_size"),
    "blstm_projection": _boolean,
    "blstm_implementation": _one_of(BLSTM_IMPLEMENTATIONS),
    "swish_rnn_size": _optional_positive_int("matched to the FFN"),
    "swish_rnn_step_sizes": _step_sizes,
    "swish_rnn_residual": _one_of(SWISH_RNN_RESIDUALS),
    "swish_rnn_gate": _one_of(SWISH_RNN_GATES),
    "swish_rnn_direction": _one_of(SWISH_RNN_DIRECTIONS),
    "swish_rnn_implementation": _one_of(SWISH_RNN_IMPLEMENTATIONS),
    "hidden_act": _one_of(ACTIVATIONS),
    "dropout_rate": _number_in(0.0, 1.0, low_open=False, high_open=True),
    "attention_dropout_rate": _number_in(0.0, 1.0, low_open=False, high_open=True),
    # A LayerNorm epsilon is a tiny guard (1e-12 .. 1e-5 in practice), never above 1.
    "layer_norm_epsilon": _number_in(0.0, 1.0, low_open=True, high_open=True),
    # A truncated-normal stddev above 1 (BERT: 0.02) only blows the activations up.
    "initializer_range": _number_in(0.0, 1.0, low_open=True, high_open=False),
}


def checked_field_value(field: str, value: Any, place: str) -> Any:
  """`value` checked against ModelConfig field `field`'s schema, in its canonical type.

  For readers of other config formats (e.g. bert_config.json) that map their keys onto
  ModelConfig fields and must check types exactly as a ModelConfig JSON is checked.

  Args:
    field: a ModelConfig field name.
    value: the value as parsed from JSON (or given in Python).
    place: where the value came from, the message's prefix, e.g.
      "bert_config.json: key 'num_hidden_layers'" (errors.at).

  Returns:
    The value (an integral float as int, an int rate as float, a list as a tuple).

  Raises:
    ConfigError: `place: expected <what>, got <value>`.
  """
  try:
    return _FIELD_CHECKS[field](value)
  except _BadValue as e:
    raise ConfigError(f"{place}: expected {e}, got {describe_json_value(value)}") from None


def _unknown_key_message(key: str, known) -> str:
  close = difflib.get_close_matches(str(key), sorted(known), n=1)
  hint = f"did you mean {close[0]!r}?" if close else f"known fields: {', '.join(sorted(known))}"
  return f"unknown ModelConfig field; {hint}"


def decode_utf8(data: bytes, source: str) -> str:
  """`data` as UTF-8 text (a leading byte-order mark dropped), else a ConfigError naming
  `source` and the line of the first invalid byte."""
  try:
    return data.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise ConfigError(
        f"{source}:{line}: not valid UTF-8 (byte {data[e.start:e.start + 1]!r}); "
        "save the file as UTF-8"
    ) from None


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Hyper-parameters of one encoder.

  Attributes:
    vocab_size: V, rows of the token embedding.
    hidden_size: H.
    num_layers: L, number of blocks.
    num_heads: A, attention heads (H must divide by A).
    intermediate_size: inner size of the feed-forward block (4H in BERT).
    max_position_embeddings: P, longest sequence the model accepts.
    type_vocab_size: number of segment types.
    position_embedding: "absolute" (learned, BERT) or "none".
    attention_bias: "none" or "relative" (T5 bucketed relative attention bias).
    relative_num_buckets / relative_max_distance: T5 bucket parameters.
    relative_bias_shared: one [buckets, heads] table for all layers (T5) or one per layer.
    use_attention: False gives the BLSTM-only encoder (blocks without self-attention).
    mixer: the block's second sublayer: ffn | blstm | parallel_blstm | swishrnn.
    blstm_units: units u of each LSTM direction; None means H (full size).
    blstm_projection: project the 2u BLSTM output back to H with a dense layer. Without
      it 2u must equal H (the SMALL variant, u = H/2).
    blstm_implementation: how the BLSTM runs, never what it computes: "keras" (Keras
      LSTM, cuDNN on a TensorFlow GPU), "cudnn" (cuDNN fed by the row lengths, JAX and
      PyTorch), "portable" (keras.ops scan; JAX, PyTorch), TensorFlow's "fused" (both
      directions in one XLA loop + analytic gradient), "block" (BlockLSTMV2) and "scan"
      (tf.scan), or "auto" (the backend's cuDNN path with a GPU, else fused on
      TensorFlow and portable elsewhere). Same weights either way.
    swish_rnn_size: d', inner size of SwishRNN; None picks round(8H/3) to a multiple of 16.
    swish_rnn_step_sizes: step size k per layer, cycled across layers ((1, 2, 4) default).
    swish_rnn_residual: "x1" (default, soft max-pooling reading) or "x2" (paper's eq. 3).
    swish_rnn_gate: activation of the output gate, "gelu" or "sigmoid".
    swish_rnn_direction: "forward" (left to right), "backward" or "bidirectional"
      (half the channels each way, same parameter count).
    swish_rnn_implementation: how the recurrence runs, never what it computes:
      TensorFlow's "fused" (XLA loops + analytic gradient), "loop" and "scan" (plain
      tf.scan), "portable" (keras.ops scan + analytic gradient; JAX, PyTorch), "pallas"
      (one Pallas kernel per pass, gating fused; JAX on a CUDA GPU), "triton" (the same
      as Triton kernels; PyTorch on a CUDA GPU) or "auto" (fused on TensorFlow, pallas
      under JAX and triton under PyTorch on a GPU, portable elsewhere).
    hidden_act: "gelu" (exact erf form), "gelu_approximate" (tanh form; TF1 BERT and
      keras-hub checkpoints) or "relu".
    dropout_rate: dropout on embeddings and on every sublayer output.
    attention_dropout_rate: dropout on attention probabilities.
    layer_norm_epsilon: LayerNorm epsilon.
    initializer_range: stddev of the truncated-normal weight initializer.
  """

  vocab_size: int = 30522
  hidden_size: int = 768
  num_layers: int = 12
  num_heads: int = 12
  intermediate_size: int = 3072
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  position_embedding: str = "absolute"
  attention_bias: str = "none"
  relative_num_buckets: int = 32
  relative_max_distance: int = 128
  relative_bias_shared: bool = True
  use_attention: bool = True
  mixer: str = "ffn"
  blstm_units: Optional[int] = None
  blstm_projection: bool = True
  blstm_implementation: str = "auto"
  swish_rnn_size: Optional[int] = None
  swish_rnn_step_sizes: Tuple[int, ...] = (1, 2, 4)
  swish_rnn_residual: str = "x1"
  swish_rnn_gate: str = "gelu"
  swish_rnn_direction: str = "forward"
  swish_rnn_implementation: str = "auto"
  hidden_act: str = "gelu"
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  layer_norm_epsilon: float = 1e-12
  initializer_range: float = 0.02

  def __post_init__(self):
    # Each field in its canonical type (JSON lists become tuples: the dataclass stays
    # hashable and comparable), then the rules between fields.
    for field in dataclasses.fields(self):
      value = checked_field_value(field.name, getattr(self, field.name), f"key {field.name!r}")
      object.__setattr__(self, field.name, value)
    self._validate()

  # -- derived sizes -------------------------------------------------------------

  @property
  def head_size(self) -> int:
    return self.hidden_size // self.num_heads

  @property
  def resolved_blstm_units(self) -> int:
    return self.hidden_size if self.blstm_units is None else self.blstm_units

  @property
  def resolved_swish_rnn_size(self) -> int:
    if self.swish_rnn_size is not None:
      return self.swish_rnn_size
    return swish_rnn_size_matching_ffn(self.hidden_size)

  def swish_rnn_step_size(self, layer_index: int) -> int:
    return self.swish_rnn_step_sizes[layer_index % len(self.swish_rnn_step_sizes)]

  @property
  def uses_blstm(self) -> bool:
    return self.mixer in ("blstm", "parallel_blstm")

  # -- serialisation -------------------------------------------------------------

  def to_dict(self) -> dict:
    d = dataclasses.asdict(self)
    d["swish_rnn_step_sizes"] = list(self.swish_rnn_step_sizes)
    return d

  @classmethod
  def from_dict(cls, d: dict, source: str = "config") -> ModelConfig:
    """A config from parsed JSON, checked against the schema.

    Args:
      d: field name -> value, as parsed from JSON.
      source: the file (or other origin) the message of an error starts with.

    Raises:
      ConfigError: `source: key 'field': what is wrong`, e.g. an unknown key (with a
        did-you-mean), a value of the wrong type or out of range, a rule between fields.
    """
    if not isinstance(d, dict):
      raise ConfigError(f"{source}: expected a JSON object, got {describe_json_value(d)}")
    known = {f.name for f in dataclasses.fields(cls)}
    for key in d:
      if key not in known:
        raise ConfigError(f"{at(source, key=key)}: {_unknown_key_message(key, known)}")
    try:
      return cls(**d)
    except ConfigError as e:
      raise ConfigError(f"{source}: {e}") from None

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

  @classmethod
  def from_json(cls, text, source: str = "config") -> ModelConfig:
    """A config from JSON text (str, or bytes that must be UTF-8); errors name `source`."""
    if isinstance(text, (bytes, bytearray)):
      text = decode_utf8(bytes(text), source)
    try:
      d = json.loads(text, object_pairs_hook=refuse_duplicate_keys(source, ConfigError))
    except json.JSONDecodeError as e:
      raise ConfigError(
          f"{source}:{e.lineno}: not valid JSON ({e.msg}, column {e.colno})"
      ) from None
    return cls.from_dict(d, source=source)

  @classmethod
  def from_file(cls, path: str) -> ModelConfig:
    try:
      with open(path, "rb") as f:
        data = f.read()
    except OSError as e:
      raise ConfigError(f"cannot read model config {path}: {e.strerror}") from None
    return cls.from_json(data, source=path)

  def replace(self, **changes: Any) -> ModelConfig:
    return dataclasses.replace(self, **changes)

  def check_sequence_length(self, length: int, flag: str, model: str = "the model") -> None:
    """Refuses sequences of `length` tokens where learned positions stop short of them.

    Raises:
      ConfigError: "--flag=length exceeds <model>'s max_position_embeddings=P".
    """
    if self.position_embedding == "absolute" and length > self.max_position_embeddings:
      raise ConfigError(
          f"{flag}={length} exceeds {model}'s "
          f"max_position_embeddings={self.max_position_embeddings}"
      )

  # -- validation ----------------------------------------------------------------

  def _validate(self):
    """The rules between fields (each field alone is checked by `checked_field_value`)."""

    def check(ok, field, message):
      if not ok:
        raise ConfigError(f"key {field!r}: {getattr(self, field)!r} {message}")

    check(
        self.hidden_size % self.num_heads == 0,
        "hidden_size",
        f"must be divisible by num_heads={self.num_heads}",
    )
    check(
        self.relative_num_buckets % 4 == 0,
        "relative_num_buckets",
        "must be divisible by 4 (two directions, exact and log-spaced halves)",
    )
    check(
        self.use_attention or self.attention_bias == "none",
        "attention_bias",
        "needs use_attention=true",
    )
    check(
        self.use_attention or self.mixer == "blstm",
        "use_attention",
        "(false: the BLSTM-only encoder) requires mixer='blstm'",
    )
    if self.uses_blstm and not self.blstm_projection:
      check(
          2 * self.resolved_blstm_units == self.hidden_size,
          "blstm_units",
          f"without blstm_projection the BLSTM output 2u must equal "
          f"hidden_size={self.hidden_size}",
      )
    if self.mixer == "swishrnn" and self.swish_rnn_direction == "bidirectional":
      check(
          self.resolved_swish_rnn_size % 2 == 0,
          "swish_rnn_size",
          "must be even for a bidirectional scan",
      )


def swish_rnn_size_matching_ffn(hidden_size: int) -> int:
  """SPEC §4: d' = round(2·H·4H / 3H) = round(8H/3), to the nearest multiple of 16.

  Three H×d' matrices then hold as many weights as the FFN's two H×4H matrices.
  """
  return int(round(8 * hidden_size / 3 / 16)) * 16


# -- presets -----------------------------------------------------------------------

SIZES = {
    "tiny": dict(num_layers=2, hidden_size=128, num_heads=2),
    "mini": dict(num_layers=4, hidden_size=256, num_heads=4),
    "base": dict(num_layers=12, hidden_size=768, num_heads=12),
    "large": dict(num_layers=24, hidden_size=1024, num_heads=16),
}

# The SwishRNN paper's inner sizes; other sizes use `swish_rnn_size_matching_ffn`.
_PAPER_SWISH_RNN_SIZES = {"base": 2048, "large": 2752}

FAMILIES = {
    "bert": dict(),
    "bert_rab": dict(attention_bias="relative"),
    "trans_blstm_1": dict(mixer="blstm"),
    "trans_blstm_2": dict(mixer="parallel_blstm"),
    "trans_blstm_small_1": dict(mixer="blstm", blstm_projection=False),
    "trans_blstm_small_2": dict(mixer="parallel_blstm", blstm_projection=False),
    "swishrnn": dict(mixer="swishrnn", attention_bias="relative"),
    "blstm": dict(mixer="blstm", use_attention=False),
}


def _preset(family: str, size: str) -> ModelConfig:
  fields = dict(SIZES[size])
  hidden = fields["hidden_size"]
  fields["intermediate_size"] = 4 * hidden
  fields.update(FAMILIES[family])
  if family.startswith("trans_blstm_small"):
    fields["blstm_units"] = hidden // 2
  if family == "swishrnn":
    fields["swish_rnn_size"] = _PAPER_SWISH_RNN_SIZES.get(size, swish_rnn_size_matching_ffn(hidden))
  return ModelConfig(**fields)


PRESETS = {f"{family}_{size}": _preset(family, size) for family in FAMILIES for size in SIZES}


def get_preset(name: str) -> ModelConfig:
  """Returns the preset `name`, e.g. "bert_base"; the error lists valid names."""
  try:
    return PRESETS[name]
  except KeyError:
    raise ConfigError(
        f"unknown preset {name!r}; choose one of: {', '.join(sorted(PRESETS))}"
    ) from None


def resolve_config(preset_or_path: str) -> ModelConfig:
  """A preset name or a path to a ModelConfig JSON file."""
  if preset_or_path in PRESETS:
    return PRESETS[preset_or_path]
  if preset_or_path.endswith(".json") or os.path.sep in preset_or_path:
    return ModelConfig.from_file(preset_or_path)
  return get_preset(preset_or_path)
