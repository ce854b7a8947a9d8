r"""Writes small generated fine-tuning tasks in the official formats (no download).

  python -m recurrent_bert.tools.make_sample_tasks --output_dir=runs/tiny/tasks

gives `rte/` (GLUE RTE TSVs: finetune_glue --task=rte --data_dir=.../rte) and `squad/`
(SQuAD v1.1 JSON: finetune_squad --train_file=.../squad/train-v1.1.json
--predict_file=.../squad/dev-v1.1.json). What they contain: recurrent_bert/tasks/sample_tasks.py.
"""

import os

from absl import flags

from recurrent_bert import cli
from recurrent_bert.flags import execution

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", None, "Folder for rte/ and squad/.")
flags.DEFINE_integer("num_train", 400, "Training examples per task.")
flags.DEFINE_integer("num_dev", 100, "Dev examples per task.")
flags.DEFINE_integer("seed", 0, "Seeds the generated text.")
flags.mark_flags_as_required(["output_dir"])
flags.register_validator("num_train", lambda v: v >= 1, "--num_train must be >= 1")
flags.register_validator("num_dev", lambda v: v >= 1, "--num_dev must be >= 1")


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  execution.check_output_path("output_dir")  # empty, or under a file: one line
  from recurrent_bert.tasks import sample_tasks

  rte = sample_tasks.write_rte_folder(
      os.path.join(FLAGS.output_dir, "rte"), FLAGS.num_train, FLAGS.num_dev, seed=FLAGS.seed
  )
  squad = sample_tasks.write_squad_files(
      os.path.join(FLAGS.output_dir, "squad"), FLAGS.num_train, FLAGS.num_dev, seed=FLAGS.seed
  )
  print(f"wrote {rte}/{{train,dev,test}}.tsv and {squad['train']}, {squad['dev']}")


if __name__ == "__main__":
  cli.run(main)
