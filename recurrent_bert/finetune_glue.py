r"""Fine-tunes and evaluates a classifier/regressor: GLUE, SuperGLUE BoolQ/MultiRC, or yours.

  python -m recurrent_bert.finetune_glue --flagfile=configs/finetune/glue_bert.flags \
      --task=mrpc --data_dir=glue_data/MRPC --init_checkpoint=/ckpt/bert_base \
      --model_dir=/ckpt/bert_base_mrpc

Data: the official task folder (--data_dir: GLUE TSVs, SuperGLUE JSONL), TFDS
(--tfds; prepared data only unless --tfds_download), or --task=custom with TSV files of
your own (recurrent_bert/tasks/classification/custom_task.py). The task adapter:
recurrent_bert/tasks/classification/adapter.py. Modes, outputs and the model_dir layout:
recurrent_bert/training/finetuning_runner.py. Metrics carry the official names (SPEC §9) in
eval_results.json; test-split predictions are written as leaderboard submission files.
Re-running the same command resumes training from the latest checkpoint.

Bad task data (a score outside 0..5, an unknown label, a wrong column count, a repeated id
or header, text that is not UTF-8 ...) stops the command before any model is built, with
one line naming file:line (exit status 2). --skip_bad_rows skips such rows instead: the
count skipped is logged per file and written to model_dir/skipped_rows.json.
"""

from absl import flags

from recurrent_bert import cli
from recurrent_bert import model_dir as layout
from recurrent_bert.errors import InputError
from recurrent_bert.flags import execution as run_flags
from recurrent_bert.flags import finetuning as finetune_flags

FLAGS = flags.FLAGS
finetune_flags.define_flags(
    learning_rate=2e-5, train_batch_size=32, max_seq_length=128, num_train_epochs=3.0
)
flags.DEFINE_string(
    "task",
    None,
    "GLUE task (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli), boolq, multirc, or custom.",
)
flags.DEFINE_string(
    "data_dir",
    None,
    "The task's folder (e.g. glue_data/MRPC, superglue/BoolQ, or a custom task's TSV folder).",
)
flags.DEFINE_boolean("tfds", False, "Read the task from tensorflow-datasets instead.")
flags.DEFINE_string("tfds_data_dir", None, "TFDS data dir (default: TFDS's).")
flags.DEFINE_boolean("tfds_download", False, "Let TFDS download missing data (network).")
flags.DEFINE_list("label_list", None, "custom task: label names (default: sorted train labels).")
flags.DEFINE_list(
    "predict_splits",
    None,
    "Splits written as prediction files (default: the task's test splits that exist).",
)
flags.mark_flags_as_required(["task"])
flags.register_multi_flags_validator(
    ["tfds", "data_dir"],
    lambda f: f["tfds"] or f["data_dir"],
    "give --data_dir (the task folder) or --tfds",
)
flags.register_multi_flags_validator(
    ["label_list", "task"],
    lambda f: not f["label_list"] or f["task"] == "custom",
    "--label_list is for --task=custom; the GLUE and SuperGLUE tasks have their official labels",
)


def _trained_label_list():
  """The labels of the model in --model_dir, when it already holds a fine-tuned one."""
  if not layout.is_finetuning_dir(FLAGS.model_dir):
    return None
  return layout.TaskInfo.read(FLAGS.model_dir).label_names


def main(argv):
  # TensorFlow loads here, after the flags are checked: a bad flag or --help costs no import.
  from recurrent_bert.data import tokenization
  from recurrent_bert.tasks.classification import adapter as classification

  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  strategy, is_chief, worker_id = run_flags.make_strategy(run_flags.TRAINING_BACKENDS)
  parts = finetune_flags.resolve_run(worker_id, path_flags=("data_dir", "tfds_data_dir"))
  try:
    source = classification.task_source(
        FLAGS.task,
        FLAGS.data_dir,
        use_tfds=FLAGS.tfds,
        tfds_data_dir=FLAGS.tfds_data_dir,
        tfds_download=FLAGS.tfds_download,
        label_list=FLAGS.label_list,
        trained_label_list=_trained_label_list(),
        skip_bad_rows=FLAGS.skip_bad_rows,
    )
    tokenizer = tokenization.make_tokenizer(parts.vocab_file, do_lower_case=parts.do_lower_case)
    adapter = classification.ClassificationAdapter(
        source.spec,
        source.read_split,
        tokenizer,
        FLAGS.max_seq_length,
        parts.cache_dir,
        FLAGS.predict_splits if FLAGS.predict_splits is not None else source.predict_splits,
    )
    for split in () if FLAGS.tfds else FLAGS.predict_splits or ():
      if split not in source.spec.files:
        raise InputError(
            f"--predict_splits={split}: task {source.spec.name} has no such split; its splits "
            f"are {', '.join(source.spec.files)}"
        )
    # Every split the mode needs is read and converted before the model is built, so
    # bad data fails first.
    adapter.prepare(adapter.splits_read_by(FLAGS.mode))
  except (InputError, ValueError) as e:
    cli.fail(str(e))
  finetune_flags.run_and_report(strategy, adapter, parts, is_chief, worker_id)


if __name__ == "__main__":
  cli.run(
      main,
      finetune_flags.help_groups(
          (
              "task",
              "data_dir",
              "label_list",
              "predict_splits",
              "tfds",
              "tfds_data_dir",
              "tfds_download",
          )
      ),
  )
