r"""Converts checkpoints: other BERTs into recurrent_bert model dirs, and model dirs out.

Import (--direction=import, the default):

  python rbert-convert-checkpoint --source=tf1 --input=uncased_L-12_H-768_A-12/bert_model.ckpt \
      --output_dir=models/bert_base_tf1
  python rbert-convert-checkpoint --source=hf --input=bert-base-uncased/ --output_dir=DIR
  python rbert-convert-checkpoint --source=keras_hub --input=PRESET_DIR --output_dir=DIR
  # warm start TRANS-BLSTM from BERT: shared weights copied, BLSTMs fresh
  python rbert-convert-checkpoint --source=tf1 --input=... --output_dir=DIR \
      --target_config=trans_blstm_2_base

Sources:
  tf1        google-research/bert checkpoint prefix; bert_config.json and vocab.txt are
             taken from beside it unless --bert_config_file / --vocab_file are given.
  hf         Hugging Face BERT: a .safetensors file or a dir with model.safetensors, and
             config.json beside it (or --bert_config_file); vocab.txt and
             tokenizer_config.json (do_lower_case) when present.
  keras_hub  a local keras-hub preset dir: a BertBackbone's (backbone.save_to_preset(dir)),
             or one this tool exported (any family, heads included).

Export (--direction=export): --input is any model dir the package writes (pretraining,
converted, fine-tuning, or an encoder/ export).

  python rbert-convert-checkpoint --direction=export --target=keras_hub \
      --input=MODEL_DIR --output_dir=PRESET_DIR
  python rbert-convert-checkpoint --direction=export --target=hf --input=MODEL_DIR \
      --output_dir=HF_DIR

Targets (recurrent_bert/convert/exporters.py):
  keras_hub  every family: config.json, model.weights.h5, tokenizer.json and its assets,
             metadata.json, and the MLM/NSP heads (pretraining_heads.weights.h5) when the
             dir has them; `keras_hub.models.Backbone.from_preset(dir)` loads it once
             `recurrent_bert.convert.keras_hub_preset` is imported.
  hf         BERT-orig: model.safetensors (BertForPreTraining names), config.json,
             vocab.txt, tokenizer_config.json, special_tokens_map.json.
  tf1        BERT-orig: bert_model.ckpt.* (google-research/bert's names), bert_config.json,
             vocab.txt. Its code has only the tanh GELU: a model with the exact GELU is
             refused unless --allow_gelu_approximation.

The import output dir has the layout pretraining writes (recurrent_bert/model_dir.py),
so `recurrent_bert.export` and `--init_checkpoint` accept it:

  output_dir/
    model_config.json
    encoder/                 the encoder export: model_config.json, encoder.*,
                             vocab.txt (if the source has one), export_info.json
    pretrainer.index, .data  the whole Pretrainer (encoder + MLM/NSP heads), keyed like a
                             training checkpoint: --init_checkpoint=output_dir/pretrainer
                             restores the heads too
    pretrainer.weights.h5    the same weights, for every Keras backend
    vocab.txt                (if the source has one)
    conversion_report.json   which weights were copied, new (freshly initialised: a head
                             listed here is not exported, `saving.StoredModel.heads`), or
                             unused

Every output dir is written to a temp dir beside it and renamed when complete. An import
prints the weights copied, left new (freshly initialised) and unused; an export the files
and heads written.
"""

import json
import os
from typing import Optional

from absl import flags

from recurrent_bert import cli
from recurrent_bert import model_dir as model_dir_layout
from recurrent_bert.flags import execution
from recurrent_bert.flags import vocabulary

FLAGS = flags.FLAGS
flags.DEFINE_enum(
    "direction", "import", ["import", "export"], "import: into a model dir; export: out of one."
)
flags.DEFINE_enum("source", None, ["tf1", "hf", "keras_hub"], "Import: kind of checkpoint.")
flags.DEFINE_enum(
    "target",
    None,
    ["keras_hub", "hf", "tf1"],
    "Export: the format to write (hf and tf1 hold BERT-orig only).",
)
flags.DEFINE_string(
    "input",
    None,
    "Import: tf1 checkpoint prefix, hf .safetensors file or its dir, or keras_hub preset "
    "dir. Export: a model dir.",
)
flags.DEFINE_string("output_dir", None, "The model dir to write.")
flags.DEFINE_string(
    "bert_config_file", None, "tf1: bert_config.json; hf: config.json (default: beside --input)."
)
vocabulary.define_flags(
    vocab_file_note="default: the source's, if any",
    do_lower_case=None,
    do_lower_case_note="the casing recorded for export; default: the source's, if it says",
)
flags.DEFINE_string(
    "target_config",
    None,
    "Warm start: a preset name or ModelConfig JSON "
    "of any family (sizes as the source). Weights it shares with BERT are "
    "copied, the rest stay freshly initialised.",
)
flags.DEFINE_integer("seed", 0, "Seeds the fresh initialisation of new weights.")
execution.register_range("seed", 0, 2**32 - 1)
flags.DEFINE_boolean("overwrite", False, "Replace an existing --output_dir.")
flags.DEFINE_boolean(
    "allow_gelu_approximation",
    False,
    "Export --target=tf1 of a model with the exact GELU: google-research/bert computes the "
    "tanh form, so its outputs differ slightly.",
)
flags.mark_flags_as_required(["input", "output_dir"])
# The flags of one direction that the other does not read.
_IMPORT_ONLY = ("source", "bert_config_file", "vocab_file", "do_lower_case", "target_config")
_EXPORT_ONLY = ("target", "allow_gelu_approximation")


REPORT_FILE = model_dir_layout.CONVERSION_REPORT_FILE
PRETRAINER_PREFIX = model_dir_layout.PRETRAINER_PREFIX


def _warm_start_target(imported, target_config: str):
  """A Pretrainer of `target_config` warm-started from the imported BERT.

  The activation and LayerNorm epsilon follow the source: its weights were trained
  with them. Sizes are not adjusted: a mismatch fails, naming the weights.
  """
  from recurrent_bert.config import resolve_config
  from recurrent_bert.convert.warm_start import warm_start
  from recurrent_bert.models import Encoder
  from recurrent_bert.models import Pretrainer

  source_config = imported.model.encoder.config
  config = resolve_config(target_config).replace(
      hidden_act=source_config.hidden_act, layer_norm_epsilon=source_config.layer_norm_epsilon
  )
  target = Pretrainer(Encoder(config), use_nsp=imported.model.use_nsp)
  report = warm_start(target, imported.model)
  # Weights the source lacked altogether (e.g. heads of a bare encoder) stay new too.
  not_imported = set(imported.new)
  copied = [p for p in report.copied if p not in not_imported]
  new = report.new + [p for p in report.copied if p in not_imported]
  return target, copied, new, report.unused


def convert_checkpoint(
    source: str,
    input_path: str,
    output_dir: str,
    bert_config_file: Optional[str] = None,
    vocab_file: Optional[str] = None,
    do_lower_case: Optional[bool] = None,
    target_config: Optional[str] = None,
    overwrite: bool = False,
) -> dict:
  """Imports `input_path` (warm-starting `target_config` if given), writes `output_dir`.

  Returns:
    The conversion report: source, source_kind, model_config, do_lower_case, vocab_file,
    copied / new / unused (our variable paths).
  Raises:
    CheckpointMappingError: a missing or mis-shaped variable, named.
  """
  from recurrent_bert.convert.importers import import_bert

  imported = import_bert(source, input_path, bert_config_file, vocab_file)
  if target_config:
    model, copied, new, unused = _warm_start_target(imported, target_config)
  else:
    model, copied, new, unused = imported.model, imported.copied, imported.new, []
  if do_lower_case is None:
    do_lower_case = imported.do_lower_case
  info = {
      "source": os.path.abspath(input_path),
      "source_kind": source,
      "model_config": model.encoder.config.to_dict(),
      "do_lower_case": do_lower_case,
      "vocab_file": imported.vocab_file,
      "copied": copied,
      "new": new,
      "unused": unused,
  }
  from recurrent_bert import saving

  saving.write_converted_dir(model, output_dir, imported.vocab_file, info, overwrite)
  return info


def print_report(report: dict, output_dir: str) -> None:
  print(
      f"wrote {os.path.abspath(output_dir)} from {report['source_kind']} checkpoint "
      f"{report['source']}"
  )
  for key, title in (
      ("copied", "copied from the source"),
      ("new", "new (freshly initialised)"),
      ("unused", "in the source but unused"),
  ):
    print(f"{title}: {len(report[key])}")
    for path in report[key]:
      print(f"  {path}")
  if report["vocab_file"] is None:
    print("no vocabulary in the source: pass --vocab_file to recurrent_bert.export")
  if report["do_lower_case"] is None:
    print("the source does not record its casing: export lower-cases unless told --nodo_lower_case")


def _check_direction_flags() -> None:
  """--source names an import and --target an export; each refuses the other's flags."""
  needed, unread = (
      ("source", _EXPORT_ONLY) if FLAGS.direction == "import" else ("target", _IMPORT_ONLY)
  )
  if FLAGS[needed].value is None:
    cli.fail(f"--direction={FLAGS.direction} needs --{needed}")
  given = [name for name in unread if FLAGS[name].present]
  if given:
    cli.fail(f"--{given[0]} does not apply to --direction={FLAGS.direction}")


def export_main() -> None:
  from recurrent_bert.convert.exporters import export_model_dir

  report = cli.run_checked(
      export_model_dir,
      FLAGS.input,
      FLAGS.target,
      FLAGS.output_dir,
      FLAGS.overwrite,
      FLAGS.allow_gelu_approximation,
  )
  heads = ", ".join(report["heads"]) or "none (the model dir has no trained pretraining heads)"
  if report["heads_left_out"]:
    heads += f"; left out, never trained: {', '.join(report['heads_left_out'])}"
  print(
      f"wrote {report['target']} {os.path.abspath(FLAGS.output_dir)} from "
      f"{report['source_kind']} {report['source']}"
  )
  print(f"pretraining heads: {heads}")
  for name in report["files"]:
    print(f"  {name}")
  print(json.dumps({"target": report["target"], "heads": report["heads"]}))


def main(argv):
  del argv
  _check_direction_flags()
  if FLAGS.direction == "export":
    export_main()
    return
  import keras

  keras.utils.set_random_seed(FLAGS.seed)
  # Mapping, config and input errors are ValueErrors: one line naming the culprit, exit 2.
  report = cli.run_checked(
      convert_checkpoint,
      FLAGS.source,
      FLAGS.input,
      FLAGS.output_dir,
      FLAGS.bert_config_file,
      FLAGS.vocab_file,
      FLAGS.do_lower_case,
      FLAGS.target_config,
      FLAGS.overwrite,
  )
  print_report(report, FLAGS.output_dir)
  print(
      json.dumps(
          {
              "copied": len(report["copied"]),
              "new": len(report["new"]),
              "unused": len(report["unused"]),
          }
      )
  )


if __name__ == "__main__":
  cli.run(main)
