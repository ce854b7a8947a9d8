"""Prints parameter counts and the layer summary of model presets, one JSON object a line.

  python -m recurrent_bert.summary --preset bert_base
  python -m recurrent_bert.summary --all
  python -m recurrent_bert.summary --config path/to/model_config.json --layers
  python -m recurrent_bert.summary --write_configs configs/models   # refresh the JSONs

Counting builds the real model without initialising its weights, so even the large
BLSTM presets print at once.
"""

import json
import os
import sys

from absl import flags

from recurrent_bert import cli
from recurrent_bert import config as config_lib
from recurrent_bert import io_utils
from recurrent_bert.flags import execution

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", None, "A preset name, e.g. bert_base (see --all).")
flags.DEFINE_string("config", None, "A ModelConfig JSON file instead of a preset.")
flags.DEFINE_bool("all", False, "Summarise every preset.")
flags.DEFINE_bool("layers", False, "Add the per-layer parameter breakdown.")
flags.DEFINE_string(
    "write_configs", None, "Write every preset as <dir>/<preset>.json (atomically) and exit."
)


def summarize(name, model_config, with_layers=False):
  """A JSON-able dict: preset, family-defining fields, params (and per-layer params)."""
  from recurrent_bert.models import count_parameters

  total, by_layer = count_parameters(model_config)
  c = model_config
  row = {
      "preset": name,
      "params": total,
      "num_layers": c.num_layers,
      "hidden_size": c.hidden_size,
      "num_heads": c.num_heads,
      "mixer": c.mixer,
      "use_attention": c.use_attention,
      "attention_bias": c.attention_bias,
  }
  if c.uses_blstm:
    row.update(blstm_units=c.resolved_blstm_units, blstm_projection=c.blstm_projection)
  if c.mixer == "swishrnn":
    row.update(
        swish_rnn_size=c.resolved_swish_rnn_size, swish_rnn_step_sizes=list(c.swish_rnn_step_sizes)
    )
  if with_layers:
    row["layers"] = by_layer
  return row


def write_preset_files(directory):
  """Writes every preset as <directory>/<name>.json, each atomically."""
  os.makedirs(directory, exist_ok=True)
  for name, preset in sorted(config_lib.PRESETS.items()):
    io_utils.atomic_write_text(os.path.join(directory, f"{name}.json"), preset.to_json())
  return len(config_lib.PRESETS)


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  if FLAGS.write_configs:
    execution.check_output_path("write_configs")
    n = write_preset_files(FLAGS.write_configs)
    print(f"wrote {n} presets to {FLAGS.write_configs}", file=sys.stderr)
    return
  chosen = [FLAGS.all, bool(FLAGS.preset), bool(FLAGS.config)]
  if sum(chosen) != 1:
    cli.fail("give exactly one of --preset, --config or --all")
  try:
    if FLAGS.all:
      targets = sorted(config_lib.PRESETS.items())
    elif FLAGS.preset:
      targets = [(FLAGS.preset, config_lib.get_preset(FLAGS.preset))]
    else:
      targets = [(FLAGS.config, config_lib.ModelConfig.from_file(FLAGS.config))]
  except config_lib.ConfigError as e:
    flag = "--preset" if FLAGS.preset else "--config"
    cli.fail(f"{flag}: {e}")
  for name, model_config in targets:
    print(json.dumps(summarize(name, model_config, FLAGS.layers)), flush=True)


if __name__ == "__main__":
  cli.run(main)
