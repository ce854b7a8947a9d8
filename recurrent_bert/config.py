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
import json
import os
from typing import Any, Optional, Tuple

from recurrent_bert.errors import InputError

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
BLSTM_IMPLEMENTATIONS = ("auto", "keras", "scan", "fused", "block")
SWISH_RNN_IMPLEMENTATIONS = ("auto", "fused", "loop", "scan")


class ConfigError(InputError):
  """A ModelConfig field (or a config file) holds an invalid value."""


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
      LSTM, cuDNN on GPU), "fused" (both directions in one XLA loop + analytic
      gradient), "block" (TensorFlow's BlockLSTMV2 kernel), "scan" (tf.scan) or "auto"
      (keras with a GPU, else fused). Same weights either way.
    swish_rnn_size: d', inner size of SwishRNN; None picks round(8H/3) to a multiple of 16.
    swish_rnn_step_sizes: step size k per layer, cycled across layers ((1, 2, 4) default).
    swish_rnn_residual: "x1" (default, soft max-pooling reading) or "x2" (paper's eq. 3).
    swish_rnn_gate: activation of the output gate, "gelu" or "sigmoid".
    swish_rnn_direction: "forward" (left to right), "backward" or "bidirectional"
      (half the channels each way, same parameter count).
    swish_rnn_implementation: how the recurrence runs, never what it computes: "fused"
      (XLA loops + analytic gradient), "loop", "scan" (plain tf.scan) or "auto".
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
    # JSON gives lists; keep the dataclass hashable and comparable.
    object.__setattr__(self, "swish_rnn_step_sizes", tuple(self.swish_rnn_step_sizes))
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
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
      raise ConfigError(
          f"{source}: unknown ModelConfig field(s) {unknown}; known fields are {sorted(known)}"
      )
    try:
      return cls(**d)
    except ConfigError as e:
      raise ConfigError(f"{source}: {e}") from None

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

  @classmethod
  def from_json(cls, text: str, source: str = "config") -> ModelConfig:
    try:
      d = json.loads(text)
    except json.JSONDecodeError as e:
      raise ConfigError(f"{source}: not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(d, dict):
      raise ConfigError(f"{source}: expected a JSON object, got {type(d).__name__}")
    return cls.from_dict(d, source=source)

  @classmethod
  def from_file(cls, path: str) -> ModelConfig:
    try:
      with open(path, encoding="utf-8") as f:
        text = f.read()
    except OSError as e:
      raise ConfigError(f"cannot read model config {path}: {e.strerror}") from None
    return cls.from_json(text, source=path)

  def replace(self, **changes: Any) -> ModelConfig:
    return dataclasses.replace(self, **changes)

  # -- validation ----------------------------------------------------------------

  def _validate(self):
    def check(ok, field, message):
      if not ok:
        raise ConfigError(f"{field}={getattr(self, field)!r}: {message}")

    for field in (
        "vocab_size",
        "hidden_size",
        "num_layers",
        "num_heads",
        "intermediate_size",
        "max_position_embeddings",
        "type_vocab_size",
        "relative_num_buckets",
        "relative_max_distance",
    ):
      value = getattr(self, field)
      check(
          isinstance(value, int) and not isinstance(value, bool) and value > 0,
          field,
          "must be a positive integer",
      )
    for field, allowed in (
        ("mixer", MIXERS),
        ("hidden_act", ACTIVATIONS),
        ("position_embedding", POSITION_EMBEDDINGS),
        ("attention_bias", ATTENTION_BIASES),
        ("swish_rnn_residual", SWISH_RNN_RESIDUALS),
        ("swish_rnn_gate", SWISH_RNN_GATES),
        ("swish_rnn_direction", SWISH_RNN_DIRECTIONS),
        ("blstm_implementation", BLSTM_IMPLEMENTATIONS),
        ("swish_rnn_implementation", SWISH_RNN_IMPLEMENTATIONS),
    ):
      check(getattr(self, field) in allowed, field, f"must be one of {allowed}")
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
    for field in ("dropout_rate", "attention_dropout_rate"):
      check(0.0 <= getattr(self, field) < 1.0, field, "must be in [0, 1)")
    check(self.layer_norm_epsilon > 0, "layer_norm_epsilon", "must be positive")
    check(self.initializer_range > 0, "initializer_range", "must be positive")
    check(
        self.use_attention or self.attention_bias == "none",
        "attention_bias",
        "needs use_attention=True",
    )
    check(
        self.use_attention or self.mixer == "blstm",
        "use_attention",
        "False (BLSTM-only encoder) requires mixer='blstm'",
    )
    if self.blstm_units is not None:
      check(
          isinstance(self.blstm_units, int) and self.blstm_units > 0,
          "blstm_units",
          "must be a positive integer or null (= hidden_size)",
      )
    if self.uses_blstm and not self.blstm_projection:
      check(
          2 * self.resolved_blstm_units == self.hidden_size,
          "blstm_units",
          f"without blstm_projection the BLSTM output 2u must equal "
          f"hidden_size={self.hidden_size}",
      )
    if self.swish_rnn_size is not None:
      check(
          isinstance(self.swish_rnn_size, int) and self.swish_rnn_size > 0,
          "swish_rnn_size",
          "must be a positive integer or null (= matched to FFN)",
      )
    check(
        len(self.swish_rnn_step_sizes) > 0
        and all(isinstance(k, int) and k > 0 for k in self.swish_rnn_step_sizes),
        "swish_rnn_step_sizes",
        "must be a non-empty list of positive integers",
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
