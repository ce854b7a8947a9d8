import glob
import json
import os
import subprocess
import sys

import pytest

from recurrent_bert.config import PRESETS
from recurrent_bert.config import ConfigError
from recurrent_bert.config import ModelConfig
from recurrent_bert.config import get_preset
from recurrent_bert.config import resolve_config
from recurrent_bert.config import swish_rnn_size_matching_ffn

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# SPEC §5, transcribed.
SPEC_SIZES = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}
SPEC_FAMILIES = {  # mixer, use_attention, attention_bias, blstm units as fraction of H
    "bert": ("ffn", True, "none", None),
    "bert_rab": ("ffn", True, "relative", None),
    "trans_blstm_1": ("blstm", True, "none", 1.0),
    "trans_blstm_2": ("parallel_blstm", True, "none", 1.0),
    "trans_blstm_small_1": ("blstm", True, "none", 0.5),
    "trans_blstm_small_2": ("parallel_blstm", True, "none", 0.5),
    "swishrnn": ("swishrnn", True, "relative", None),
    "blstm": ("blstm", False, "none", 1.0),
}


def test_presets_follow_spec_table():
  assert len(PRESETS) == len(SPEC_SIZES) * len(SPEC_FAMILIES)
  for family, (mixer, attention, bias, units) in SPEC_FAMILIES.items():
    for size, (layers, hidden, heads) in SPEC_SIZES.items():
      c = get_preset(f"{family}_{size}")
      assert (c.num_layers, c.hidden_size, c.num_heads) == (layers, hidden, heads)
      assert (c.mixer, c.use_attention, c.attention_bias) == (mixer, attention, bias)
      assert c.intermediate_size == 4 * hidden and c.vocab_size == 30522
      assert c.position_embedding == "absolute"
      if units is not None:
        assert c.resolved_blstm_units == int(units * hidden)
        assert c.blstm_projection == (units == 1.0)
  assert get_preset("swishrnn_base").resolved_swish_rnn_size == 2048
  assert get_preset("swishrnn_large").resolved_swish_rnn_size == 2752


@pytest.mark.parametrize("hidden,expected", [(768, 2048), (256, 688), (128, 336), (1024, 2736)])
def test_swish_rnn_size_rule(hidden, expected):
  # round(8H/3) to the nearest multiple of 16, worked by hand.
  assert swish_rnn_size_matching_ffn(hidden) == expected


def test_shipped_json_files_are_the_presets():
  files = sorted(glob.glob(os.path.join(REPO, "configs", "models", "*.json")))
  assert {os.path.basename(f)[:-5] for f in files} == set(PRESETS)
  for path in files:
    assert (
        ModelConfig.from_file(path) == PRESETS[os.path.basename(path)[:-5]]
    ), f"{path} is stale: python -m recurrent_bert.summary --write_configs configs/models"


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_json_round_trip(name):
  config = PRESETS[name]
  assert ModelConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize(
    "changes,field",
    [
        (dict(hidden_size=100, num_heads=3), "hidden_size"),
        (dict(mixer="cnn"), "mixer"),
        (dict(num_layers=0), "num_layers"),
        (dict(dropout_rate=1.5), "dropout_rate"),
        (dict(mixer="blstm", blstm_units=10, blstm_projection=False), "blstm_units"),
        (dict(use_attention=False, mixer="ffn"), "use_attention"),
        (dict(swish_rnn_step_sizes=[]), "swish_rnn_step_sizes"),
        (dict(hidden_act="swish"), "hidden_act"),
        (dict(blstm_implementation="cudnn8"), "blstm_implementation"),
        (dict(swish_rnn_implementation="cuda"), "swish_rnn_implementation"),
    ],
)
def test_invalid_fields_are_named(changes, field):
  with pytest.raises(ConfigError, match=field):
    ModelConfig(**changes)


def test_file_errors_name_the_file_and_line(tmp_path):
  bad_json = tmp_path / "bad.json"
  bad_json.write_text('{\n  "hidden_size": 128,\n  oops\n}')
  with pytest.raises(ConfigError, match=r"bad\.json:3: not valid JSON"):
    ModelConfig.from_file(str(bad_json))
  unknown = tmp_path / "unknown.json"
  unknown.write_text(json.dumps({"hidden_sise": 128}))
  with pytest.raises(ConfigError, match=r"unknown\.json.*hidden_sise"):
    resolve_config(str(unknown))
  with pytest.raises(ConfigError, match="missing.json"):
    ModelConfig.from_file(str(tmp_path / "missing.json"))
  with pytest.raises(ConfigError, match="unknown preset 'bert_huge'.*bert_base"):
    resolve_config("bert_huge")


def test_config_imports_no_tensorflow():
  # The layers take their allowed values (MIXERS, *_IMPLEMENTATIONS) from config: that
  # direction holds only while config stays light enough for the CLI and model_dir readers.
  code = (
      "import sys, recurrent_bert.config\n"
      "heavy = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')]\n"
      "assert not heavy, heavy"
  )
  subprocess.run(
      [sys.executable, "-c", code], check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}
  )
