r"""Exports a model dir as a SavedModel that takes raw text.

  python -m recurrent_bert.export --model_dir=DIR --export_dir=DIR [--max_seq_length=N]

`--model_dir` is a fine-tuning model_dir (finetune_glue, finetune_squad, finetune_tagging,
finetune_multiple_choice: the task's classify / regress / answer_question / tag / choose
signatures plus encode and encode_layers, from its best/ checkpoint),
or anything else `saving.open_model` opens (encode signatures): a pretraining
model_dir, its `encoder/` export, or a dir written by `recurrent_bert/tools/convert_checkpoint.py`.
The SavedModel (signatures: see `recurrent_bert/serving/module.py`) loads with only
`tensorflow` and `tensorflow_text` imported; it is written to a temp dir beside
`--export_dir` and renamed when complete. The signatures written are printed, and which
of them is `serving_default` (a pair task's takes both texts; a SQuAD v2.0 model's decides
"no answer" with the threshold chosen on dev, printed too).
"""

import os

from absl import flags

from recurrent_bert import cli
from recurrent_bert.flags import execution
from recurrent_bert.flags import vocabulary

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "model_dir",
    None,
    "Fine-tuning/pretraining/converted model dir, an encoder/ export, or a checkpoint prefix.",
)
flags.DEFINE_string("export_dir", None, "Where the SavedModel goes (replaced atomically).")
flags.DEFINE_integer(
    "max_seq_length",
    None,
    "Longest packed input; longer text is "
    "truncated. Default: a fine-tuned model's training length, else the "
    "model's max_position_embeddings (512 without absolute positions).",
)
vocabulary.define_flags(
    vocab_file_note="default: the one in the model dir",
    do_lower_case=None,
    do_lower_case_note="default: as recorded in the model dir (tokenizer.json), else true",
)
flags.mark_flags_as_required(["model_dir", "export_dir"])
flags.register_validator(
    "max_seq_length", lambda v: v is None or v >= 1, "--max_seq_length must be >= 1"
)
flags.register_validator(
    "model_dir", lambda v: v is None or bool(v.strip()), "--model_dir is empty"
)


def main(argv):
  del argv
  execution.check_output_path("export_dir")
  # Heavy imports after flag parsing: a bad flag fails fast.
  from recurrent_bert.errors import InputError
  from recurrent_bert.serving import ExportError
  from recurrent_bert.serving import export_model_dir

  try:
    signatures = export_model_dir(
        FLAGS.model_dir,
        FLAGS.export_dir,
        FLAGS.max_seq_length,
        FLAGS.vocab_file,
        FLAGS.do_lower_case,
    )
  except (ExportError, InputError) as e:
    cli.fail(str(e))  # one line naming the culprit, no traceback
  where = FLAGS.export_dir if "://" in FLAGS.export_dir else os.path.abspath(FLAGS.export_dir)
  print(f"SavedModel written to {where} with signatures:")
  default = signatures.get("serving_default")
  # serving_default is one of the others: its inputs and which one, not its long line again.
  aliases = [
      name
      for name, description in signatures.items()
      if name != "serving_default" and description == default
  ]
  for name, description in signatures.items():
    if name == "serving_default" and aliases:
      print(f"  serving_default{description.split(' -> ', 1)[0]} = {aliases[0]}")
    else:
      print(f"  {name}{description}")


if __name__ == "__main__":
  cli.run(main)
