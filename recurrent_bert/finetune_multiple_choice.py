r"""Fine-tunes and evaluates a multiple-choice model: SWAG (BERT §4.4), or yours as JSONL.

  python -m recurrent_bert.finetune_multiple_choice --flagfile=configs/finetune/swag_bert.flags \
      --data_dir=swagaf/data --init_checkpoint=/ckpt/bert_base --model_dir=/ckpt/bert_base_swag

Data: --task=swag reads the official folder (--data_dir: train.csv, val.csv scored as dev,
test.csv predicted); --task=hellaswag --tfds reads HellaSwag, SWAG's successor, from
tensorflow-datasets (which has no SWAG builder); --task=jsonl reads files of the generic
format ({"id", "context", "choices", "label"} a line:
recurrent_bert/tasks/multiple_choice/swag.py) given
as --train_file, --eval_file (scored as dev) and --predict_file (predicted). Each
choice is packed as [CLS] context [SEP] ending [SEP] and scored by one vector on its
pooled [CLS]; the scores of an example's choices are softmaxed together. The task adapter:
recurrent_bert/tasks/multiple_choice/adapter.py; modes, outputs and the model_dir layout:
recurrent_bert/training/finetuning_runner.py. eval_results.json holds dev accuracy;
predictions/<split>_predictions.jsonl the chosen ending and the probabilities per example.

Bad task data (a label out of range, a row with another number of endings, a repeated id,
text that is not UTF-8 ...) stops the command before any model is built, with one line
naming file:line (exit status 2). --skip_bad_rows skips such rows instead: the count
skipped is logged per file and written to model_dir/skipped_rows.json.
"""

from absl import flags

from recurrent_bert import cli
from recurrent_bert.errors import InputError
from recurrent_bert.flags import execution as run_flags
from recurrent_bert.flags import finetuning as finetune_flags

FLAGS = flags.FLAGS
# BERT §4.4: 3 epochs, learning rate 2e-5, batch 16.
finetune_flags.define_flags(
    learning_rate=2e-5, train_batch_size=16, max_seq_length=128, num_train_epochs=3.0
)
flags.DEFINE_enum(
    "task",
    "swag",
    ["swag", "jsonl", "hellaswag"],
    "swag: the SWAG folder; jsonl: your own files; hellaswag: from TFDS (--tfds).",
)
flags.DEFINE_string("data_dir", None, "swag: the folder of train.csv, val.csv, test.csv.")
flags.DEFINE_string("train_file", None, "jsonl: the training file.")
flags.DEFINE_string("eval_file", None, "jsonl: the labeled file scored as dev.")
flags.DEFINE_string("predict_file", None, "jsonl: a file whose predictions are written.")
flags.DEFINE_boolean("tfds", False, "hellaswag: read it from tensorflow-datasets.")
flags.DEFINE_string("tfds_data_dir", None, "TFDS data dir (default: TFDS's).")
flags.DEFINE_boolean("tfds_download", False, "Let TFDS download missing data (network).")
flags.register_multi_flags_validator(
    ["task", "data_dir", "tfds", "train_file", "eval_file", "predict_file"],
    lambda f: [
        bool(f["data_dir"]),
        bool(f["train_file"] or f["eval_file"] or f["predict_file"]),
        f["tfds"],
    ]
    == [f["task"] == "swag", f["task"] == "jsonl", f["task"] == "hellaswag"],
    "--task=swag takes --data_dir (TFDS has no SWAG builder); --task=jsonl takes "
    "--train_file, --eval_file and/or --predict_file; --task=hellaswag takes --tfds",
)

_FILE_FLAGS = (("train", "train_file"), ("dev", "eval_file"), ("test", "predict_file"))


def main(argv):
  # TensorFlow loads here, after the flags are checked: a bad flag or --help costs no import.
  from recurrent_bert.data import tokenization
  from recurrent_bert.tasks.multiple_choice import adapter as multiple_choice

  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  strategy, is_chief, worker_id = run_flags.make_strategy(run_flags.TRAINING_BACKENDS)
  parts = finetune_flags.resolve_run(
      worker_id,
      path_flags=("data_dir", "train_file", "eval_file", "predict_file", "tfds_data_dir"),
  )
  try:
    source = multiple_choice.choice_source(
        FLAGS.task,
        data_dir=FLAGS.data_dir,
        files={split: FLAGS[name].value for split, name in _FILE_FLAGS if FLAGS[name].value},
        use_tfds=FLAGS.tfds,
        tfds_data_dir=FLAGS.tfds_data_dir,
        tfds_download=FLAGS.tfds_download,
        skip_bad_rows=FLAGS.skip_bad_rows,
    )
    tokenizer = tokenization.make_tokenizer(parts.vocab_file, do_lower_case=parts.do_lower_case)
    adapter = multiple_choice.MultipleChoiceAdapter(
        source, tokenizer, FLAGS.max_seq_length, parts.cache_dir
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
              "train_file",
              "eval_file",
              "predict_file",
              "tfds",
              "tfds_data_dir",
              "tfds_download",
          )
      ),
  )
