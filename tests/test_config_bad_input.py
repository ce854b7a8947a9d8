"""Issue 15, model configs: a ModelConfig JSON (and an imported bert_config.json) is checked
against its schema; bad input is one ConfigError naming the file and the key.

The expectations are written here by hand from the documented schema (`FIELD_KINDS`), not
taken from config.py's checkers.
"""

import dataclasses
import json
import math
import os
import re

from hypothesis import given
from hypothesis import strategies as st
import pytest

from recurrent_bert.config import PRESETS
from recurrent_bert.config import ConfigError
from recurrent_bert.config import ModelConfig
from recurrent_bert.convert.importers import config_from_bert_json
from recurrent_bert.convert.importers import import_bert
from recurrent_bert.errors import InputError
from tests.support import mutations
from tests.support.readme_text import run_module

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = PRESETS["bert_tiny"].to_dict()

# The documented schema of each field, transcribed from ModelConfig's docstring.
POSITIVE_INT, OPTIONAL_POSITIVE_INT, BOOL, RATE, EPSILON, STDDEV, STEPS = (
    "positive int",
    "positive int or null",
    "bool",
    "rate in [0, 1)",
    "epsilon in (0, 1)",
    "stddev in (0, 1]",
    "list of positive ints",
)
CHOICES = {
    "position_embedding": ("absolute", "none"),
    "attention_bias": ("none", "relative"),
    "mixer": ("ffn", "blstm", "parallel_blstm", "swishrnn"),
    "blstm_implementation": ("auto", "keras", "scan", "fused", "block"),
    "swish_rnn_residual": ("x1", "x2"),
    "swish_rnn_gate": ("gelu", "sigmoid"),
    "swish_rnn_direction": ("forward", "backward", "bidirectional"),
    "swish_rnn_implementation": ("auto", "fused", "loop", "scan"),
    "hidden_act": ("gelu", "gelu_approximate", "relu"),
}
FIELD_KINDS = {
    **{
        name: POSITIVE_INT
        for name in (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
            "relative_num_buckets",
            "relative_max_distance",
        )
    },
    **{name: BOOL for name in ("relative_bias_shared", "use_attention", "blstm_projection")},
    "blstm_units": OPTIONAL_POSITIVE_INT,
    "swish_rnn_size": OPTIONAL_POSITIVE_INT,
    "swish_rnn_step_sizes": STEPS,
    "dropout_rate": RATE,
    "attention_dropout_rate": RATE,
    "layer_norm_epsilon": EPSILON,
    "initializer_range": STDDEV,
    **{name: ("one of", allowed) for name, allowed in CHOICES.items()},
}


def expected_value(field, value):
  """(accepted, canonical value) of `value` for `field` under the documented schema."""
  kind = FIELD_KINDS[field]

  def whole(v):
    if isinstance(v, bool):
      return None
    if isinstance(v, int):
      return v
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
      return int(v)
    return None

  def number(v):
    return (
        v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None
    )

  if kind == POSITIVE_INT or (kind == OPTIONAL_POSITIVE_INT and value is not None):
    n = whole(value)
    return (n is not None and 0 < n < 2**31), n
  if kind == OPTIONAL_POSITIVE_INT:
    return True, None
  if kind == BOOL:
    return isinstance(value, bool), value
  if kind == STEPS:
    if not isinstance(value, list) or not value:
      return False, None
    steps = [whole(k) for k in value]
    return all(k is not None and 0 < k < 2**31 for k in steps), tuple(steps)
  if kind in (RATE, EPSILON, STDDEV):
    x = number(value)
    if x is None:
      return False, None
    ok = {RATE: 0 <= x < 1, EPSILON: 0 < x < 1, STDDEV: 0 < x <= 1}[kind]
    return ok, float(x)
  _, allowed = kind
  return isinstance(value, str) and value in allowed, value


def rules_hold(d):
  """The rules between fields, for the bert_tiny base (mixer ffn, no BLSTM, no SwishRNN)."""
  return (
      d["hidden_size"] % d["num_heads"] == 0
      and d["relative_num_buckets"] % 4 == 0
      and (d["use_attention"] or (d["mixer"] == "blstm" and d["attention_bias"] == "none"))
      and not (
          d["mixer"] in ("blstm", "parallel_blstm")
          and not d["blstm_projection"]
          and 2 * (d["blstm_units"] or d["hidden_size"]) != d["hidden_size"]
      )
      and not (
          d["mixer"] == "swishrnn"
          and d["swish_rnn_direction"] == "bidirectional"
          and (d["swish_rnn_size"] or 336) % 2
      )
  )


def write(tmp_path, text, name="config.json"):
  path = tmp_path / name
  path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
  return str(path)


def refusal(path, match):
  with pytest.raises(ConfigError, match=match) as error:
    ModelConfig.from_file(path)
  message = str(error.value)
  assert message.startswith(path) and "\n" not in message
  return message


def test_every_field_has_a_documented_kind():
  assert set(FIELD_KINDS) == {f.name for f in dataclasses.fields(ModelConfig)}


# -- the fuzz campaign's examples ---------------------------------------------------------


@pytest.mark.parametrize("field", ["use_attention", "relative_bias_shared", "blstm_projection"])
@pytest.mark.parametrize(
    "value,shown",
    [
        ("false", 'the string "false"'),
        ("true", 'the string "true"'),
        (0, "0"),
        (1, "1"),
        (None, "null"),
    ],
)
def test_a_bool_field_takes_only_true_or_false(tmp_path, field, value, shown):
  # "false" is a truthy string: the encoder kept its attention / built one shared table.
  path = write(tmp_path, json.dumps({**BASE, field: value}))
  refusal(path, rf"key '{field}': expected true or false, got {re.escape(shown)}$")


def test_json_false_still_means_false(tmp_path):
  path = write(tmp_path, json.dumps({**BASE, "relative_bias_shared": False}))
  assert ModelConfig.from_file(path).relative_bias_shared is False


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN", "1e400"])
def test_initializer_range_must_be_finite(tmp_path, literal):
  # Infinity gave NaN outputs.
  text = json.dumps(BASE).replace('"initializer_range": 0.02', f'"initializer_range": {literal}')
  path = write(tmp_path, text)
  refusal(path, r"key 'initializer_range': expected a number in \(0, 1\], got")


def test_dropout_rate_as_a_string_names_file_and_key(tmp_path):
  # Was: TypeError: '<=' not supported between 'float' and 'str', with no file named.
  path = write(tmp_path, json.dumps({**BASE, "dropout_rate": "0.1"}))
  message = refusal(path, "dropout_rate")
  assert message == (
      f"{path}: key 'dropout_rate': expected a number in [0, 1), got the string \"0.1\""
  )


def test_non_utf8_config_names_file_and_line(tmp_path):
  # Was: UnicodeDecodeError.
  path = write(tmp_path, b'{\n  "mixer": "ffn",\n  "hidden_act": "g\xe9lu"\n}')
  refusal(path, r"config\.json:3: not valid UTF-8")


def test_utf8_byte_order_mark_is_accepted(tmp_path):
  path = write(tmp_path, b"\xef\xbb\xbf" + json.dumps(BASE).encode())
  assert ModelConfig.from_file(path) == PRESETS["bert_tiny"]


def test_unknown_key_has_a_did_you_mean(tmp_path):
  path = write(tmp_path, json.dumps({**BASE, "dropout_rte": 0.1}))
  refusal(path, r"key 'dropout_rte': unknown ModelConfig field; did you mean 'dropout_rate'\?")


def test_key_given_twice_is_refused(tmp_path):
  text = json.dumps(BASE)[:-1] + ', "num_layers": 4}'
  refusal(write(tmp_path, text), r"key 'num_layers': given twice")


@pytest.mark.parametrize(
    "field,value,expected",
    [
        ("vocab_size", 128.7, "a positive integer"),
        ("vocab_size", True, "a positive integer"),
        ("num_layers", "2", "a positive integer"),
        ("mixer", "blstn", r"one of .* \(did you mean 'blstm'\?\)"),
        ("swish_rnn_step_sizes", [1, 2.5], "a non-empty list of positive integers"),
        ("blstm_units", 0, "a positive integer or null"),
        ("layer_norm_epsilon", 0, r"a number in \(0, 1\)"),
        ("attention_dropout_rate", 1, r"a number in \[0, 1\)"),
    ],
)
def test_wrong_types_and_ranges_name_the_key(tmp_path, field, value, expected):
  refusal(
      write(tmp_path, json.dumps({**BASE, field: value})), rf"key '{field}': expected {expected}"
  )


def test_integral_numbers_are_read_in_their_field_type(tmp_path):
  path = write(tmp_path, json.dumps({**BASE, "vocab_size": 128.0, "dropout_rate": 0}))
  config = ModelConfig.from_file(path)
  assert config.vocab_size == 128 and isinstance(config.vocab_size, int)
  assert config.dropout_rate == 0.0 and isinstance(config.dropout_rate, float)


# -- bert_config.json / Hugging Face config.json ------------------------------------------

BERT_JSON = {
    "vocab_size": 120,
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "initializer_range": 0.02,
}


@pytest.mark.parametrize(
    "key,value",
    [
        ("intermediate_size", 128.7),  # was truncated to 128
        ("num_hidden_layers", True),  # was read as 1 layer
        ("vocab_size", "120"),
        ("hidden_dropout_prob", "0.1"),
        ("initializer_range", float("inf")),
        ("hidden_act", ["gelu"]),  # was a TypeError (unhashable list)
    ],
)
def test_bert_config_json_types_are_checked(key, value):
  with pytest.raises(InputError, match=rf"^bert_config\.json: key '{key}': expected"):
    config_from_bert_json({**BERT_JSON, key: value}, gelu_is_exact=False, source="bert_config.json")


def test_bert_config_json_valid_values_map_exactly():
  config = config_from_bert_json(
      {**BERT_JSON, "intermediate_size": 32.0}, gelu_is_exact=False, source="bert_config.json"
  )
  assert (config.vocab_size, config.hidden_size, config.num_layers, config.num_heads) == (
      120,
      16,
      2,
      2,
  )
  assert config.intermediate_size == 32 and config.hidden_act == "gelu_approximate"


NOT_CHECKED = "; the checkpoint was not checked yet"


def _bad_checkpoint(directory, names):
  """Checkpoint files of garbage bytes under `names`: refused by any reader."""
  for name in names:
    (directory / name).write_bytes(b"not a checkpoint\x00\xff")


@pytest.mark.slow(seconds=9)
def test_convert_checkpoint_prints_one_line_and_exits_2_on_a_bad_bert_config(tmp_path):
  # Both the config and the checkpoint are bad: the config is named (it is read first) and
  # the message says the checkpoint is still to be checked (issue 31).
  _bad_checkpoint(tmp_path, ["bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001"])
  prefix = f"{tmp_path}/bert_model.ckpt"
  (tmp_path / "bert_config.json").write_text(json.dumps(BERT_JSON))
  with pytest.raises(InputError, match=f"^cannot read TF1 checkpoint '{prefix}'"):
    import_bert("tf1", prefix)  # with a good config, the checkpoint is refused
  (tmp_path / "bert_config.json").write_text(json.dumps({**BERT_JSON, "hidden_size": 16.5}))
  result = run_module(
      "recurrent_bert.tools.convert_checkpoint",
      "--source=tf1",
      f"--input={prefix}",
      f"--output_dir={tmp_path}/out",
  )
  assert result.returncode == 2, result.stderr[-2000:]
  lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert lines == [
      f"error: {tmp_path}/bert_config.json: key 'hidden_size': expected a positive integer "
      f"(at most {2**31 - 1}), got 16.5{NOT_CHECKED}"
  ]
  assert "Traceback" not in result.stderr


def test_hf_bad_config_beside_a_bad_checkpoint_says_the_checkpoint_is_unchecked(tmp_path):
  _bad_checkpoint(tmp_path, ["model.safetensors"])
  config = tmp_path / "config.json"
  config.write_text(json.dumps(BERT_JSON))
  with pytest.raises(InputError, match="^cannot read safetensors file"):
    import_bert("hf", str(tmp_path))
  config.write_text("{")
  with pytest.raises(InputError) as error:
    import_bert("hf", str(tmp_path))
  assert str(error.value) == (
      f"{config}:1: not valid JSON (Expecting property name enclosed in double quotes, "
      f"column 2){NOT_CHECKED}"
  )
  config.unlink()
  with pytest.raises(InputError) as error:
    import_bert("hf", str(tmp_path))
  assert str(error.value) == (
      f"no config.json beside '{tmp_path}/model.safetensors'; pass --bert_config_file{NOT_CHECKED}"
  )


# -- the property -------------------------------------------------------------------------

ODD_VALUES = st.one_of(
    st.sampled_from(
        ["false", "true", "0.1", "", "none", "ffn ", "FFN", "128", "1e400", "relu", "blstm"]
    ),
    st.sampled_from([None, True, False, 0, -1, 1, 2, 3, 7, 64, 128.0, 128.7, 0.5, 1.0, 2**31]),
    st.sampled_from([float("inf"), float("-inf"), float("nan"), 1e-12, 0.02, 0.999, -0.1]),
    st.sampled_from([[], [1], [1, 2, 4], [0], [1.5], ["1"], {}, {"a": 1}]),
    st.sampled_from(sorted({v for allowed in CHOICES.values() for v in allowed})),
)


@mutations.fuzz_settings(max_examples=60)
@given(
    field=st.sampled_from(sorted(FIELD_KINDS)),
    value=ODD_VALUES,
    # Mostly no unknown key, so the values themselves decide.
    typo=st.sampled_from([None] * 6 + ["hidden_sise", "Dropout_rate", "num_layer", "extra"]),
)
def test_config_json_property(tmp_path_factory, field, value, typo):
  d = dict(BASE)
  d[field] = value
  if typo:
    d[typo] = 1
  path = write(tmp_path_factory.mktemp("cfg"), json.dumps(d))
  accepted, canonical = expected_value(field, value)
  expected_dict = {**BASE, field: canonical}
  expected = None
  if accepted and not typo and rules_hold(expected_dict):
    expected = {
        **expected_dict,
        "swish_rnn_step_sizes": list(expected_dict["swish_rnn_step_sizes"]),
    }
  error = mutations.check_outcome(
      "model config json", lambda: ModelConfig.from_file(path).to_dict(), path, expected
  )
  if error is not None:
    message = str(error)
    assert message.startswith(f"{path}: key '")
    if typo:
      assert f"key '{typo}'" in message or f"key '{field}'" in message
    elif not accepted:
      assert f"key '{field}'" in message
