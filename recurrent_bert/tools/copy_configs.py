r"""Writes the flagfiles and model configs that ship with the package into a folder.

  python -m recurrent_bert.tools.copy_configs --output_dir=configs

A source checkout has them at configs/ already. An installed package keeps them inside
itself (recurrent_bert/configs/); run this in the folder you work from and every
`--flagfile=configs/...` in README and docs/ runs there as written. The folder is written
whole or not at all; one that exists and is not empty is kept unless --overwrite.
"""

import os
import shutil

from absl import flags

from recurrent_bert import cli
from recurrent_bert.flags import execution

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", None, "Folder for pretrain/, finetune/ and models/.")
flags.DEFINE_bool("overwrite", False, "Replace --output_dir if it exists and is not empty.")
flags.mark_flags_as_required(["output_dir"])

# The package's own copy (setup.cfg's package_data ships it in the wheel).
SHIPPED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  execution.check_output_path("output_dir")  # empty, or under a file: one line
  from recurrent_bert import io_utils

  cli.run_checked(io_utils.check_replaceable_dir, FLAGS.output_dir, FLAGS.overwrite)
  with io_utils.atomic_directory(FLAGS.output_dir) as tmp_dir:
    shutil.copytree(SHIPPED, tmp_dir, dirs_exist_ok=True)
  count = sum(len(files) for _, _, files in os.walk(FLAGS.output_dir))
  print(f"wrote {FLAGS.output_dir}: {count} files (pretrain/, finetune/, models/)")


if __name__ == "__main__":
  cli.run(main)
