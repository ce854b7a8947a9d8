r"""Fine-tunes and evaluates a token tagger: CoNLL-2003 NER as BERT §5.3 does it.

  python -m recurrent_bert.finetune_tagging --flagfile=configs/finetune/conll2003_bert.flags \
      --train_file=conll2003/eng.train --eval_file=conll2003/eng.testa \
      --predict_file=conll2003/eng.testb --init_checkpoint=/ckpt/bert_base_cased \
      --model_dir=/ckpt/bert_base_conll

Files: CoNLL format (--file_format=conll: whitespace columns, the tag in --tag_column,
-DOCSTART- lines between documents, blank lines between sentences) or one "word tag" pair
per line (--file_format=word_tag); --tfds reads conll2003 from tensorflow-datasets. Each
word's tag is predicted at its first word piece, with as much of the surrounding document
as fits in --max_seq_length as context (--nodocument_context: the sentence alone); long
sentences are cut into windows --doc_stride pieces apart. The task adapter:
recurrent_bert/tasks/tagging/adapter.py (windows: tasks/tagging/tagging_features.py).

The dev file (--eval_file) is scored with conlleval's definitions (chunk precision, recall,
F1 in percent, per entity type, token accuracy; the best checkpoint by F1); dev and
predict files are written back as CoNLL ("word gold predicted") to
model_dir/predictions/{dev,test}_predictions.txt. Bad input (a line with the wrong number
of columns, an unknown tag, text that is not UTF-8 ...) stops the command before any model
is built with one line naming file:line (exit status 2); --skip_bad_rows skips such
sentences. Modes and the model_dir layout: recurrent_bert/training/finetuning_runner.py.
"""

from absl import flags

from recurrent_bert import cli
from recurrent_bert import model_dir as layout
from recurrent_bert.errors import InputError
from recurrent_bert.flags import execution as run_flags
from recurrent_bert.flags import finetuning as finetune_flags

FLAGS = flags.FLAGS
# BERT appendix A.3's fine-tuning protocol (batch 32, lr 5e-5 of {5e-5, 3e-5, 2e-5}, 3 of
# {2, 3, 4} epochs), 128 pieces per window.
finetune_flags.define_flags(
    learning_rate=5e-5, train_batch_size=32, max_seq_length=128, num_train_epochs=3.0
)
flags.DEFINE_string("train_file", None, "Training sentences (e.g. CoNLL-2003 eng.train).")
flags.DEFINE_string("eval_file", None, "Dev sentences, scored (e.g. eng.testa).")
flags.DEFINE_string(
    "predict_file", None, "Sentences written with their predicted tags (e.g. eng.testb)."
)
flags.DEFINE_enum(
    "file_format",
    "conll",
    ["conll", "word_tag"],
    "conll: whitespace columns, the tag in --tag_column; word_tag: 'word tag' per line.",
)
flags.DEFINE_integer("tag_column", -1, "conll format: the tag's column (-1: the last).")
flags.DEFINE_list(
    "label_list",
    None,
    "The tags (default: CoNLL-2003's nine for --file_format=conll or --tfds, else the train "
    "file's tags, sorted, O first).",
)
flags.DEFINE_boolean(
    "document_context",
    True,
    "Fill each window with the neighbouring sentences of the same document (BERT §5.3).",
)
flags.DEFINE_integer("doc_stride", 64, "Pieces between the starts of a long sentence's windows.")
flags.DEFINE_boolean(
    "tfds", False, "Read conll2003 from TFDS (no document boundaries there: no document context)."
)
flags.DEFINE_string("tfds_data_dir", None, "TFDS data dir (default: TFDS's).")
flags.DEFINE_boolean("tfds_download", False, "Let TFDS download missing data (network).")
flags.register_validator("doc_stride", lambda v: v >= 1, "--doc_stride must be >= 1")
flags.register_validator("max_seq_length", lambda v: v >= 3, "--max_seq_length must be >= 3")
flags.register_validator(
    "tag_column", lambda v: v != 0, "--tag_column must not be 0, the word's column (-1: the last)"
)


def _label_list(read_split):
  """--label_list, else the trained model's, else CoNLL-2003's or the train file's tags."""
  from recurrent_bert.tasks.tagging import conll

  trained = None
  if layout.is_finetuning_dir(FLAGS.model_dir):
    trained = tuple(layout.TaskInfo.read(FLAGS.model_dir).label_names)
  # Checked here, naming the flag: the readers would name only "label list".
  given = conll.check_label_list(FLAGS.label_list, "--label_list") if FLAGS.label_list else None
  if trained and given and given != trained:
    raise InputError(
        f"--label_list={','.join(given)} differs from the tags {','.join(trained)} the model "
        "was trained with"
    )
  if given or trained:
    return given or trained
  if FLAGS.tfds or FLAGS.file_format == "conll":
    return tuple(conll.CONLL2003_TAGS)
  if not FLAGS.train_file:
    raise InputError("give --label_list: there is no train file to read the tags from")
  return tuple(conll.infer_label_list(read_split("train").examples))


def main(argv):
  # TensorFlow loads here, after the flags are checked: a bad flag or --help costs no import.
  from recurrent_bert.data import tokenization
  from recurrent_bert.tasks.tagging import adapter as token_tagging

  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  if not FLAGS.tfds:
    if FLAGS.mode in ("train", "train_and_eval") and not FLAGS.train_file:
      cli.fail(f"--mode={FLAGS.mode} needs --train_file (or --tfds)")
    if FLAGS.mode == "eval" and not FLAGS.eval_file:
      cli.fail("--mode=eval needs --eval_file (or --tfds)")
    if FLAGS.mode == "predict" and not (FLAGS.eval_file or FLAGS.predict_file):
      cli.fail("--mode=predict needs --predict_file or --eval_file (or --tfds)")
  strategy, is_chief, worker_id = run_flags.make_strategy(run_flags.TRAINING_BACKENDS)
  parts = finetune_flags.resolve_run(
      worker_id, path_flags=("train_file", "eval_file", "predict_file", "tfds_data_dir")
  )
  files = {
      split: path
      for split, path in (
          ("train", FLAGS.train_file),
          ("dev", FLAGS.eval_file),
          ("test", FLAGS.predict_file),
      )
      if path
  }
  reader_options = dict(
      file_format=FLAGS.file_format,
      tag_column=FLAGS.tag_column,
      use_tfds=FLAGS.tfds,
      tfds_data_dir=FLAGS.tfds_data_dir,
      tfds_download=FLAGS.tfds_download,
      skip_bad_rows=FLAGS.skip_bad_rows,
  )
  try:
    label_list = _label_list(token_tagging.tagging_reader(files, None, **reader_options))
    tokenizer = tokenization.make_tokenizer(parts.vocab_file, do_lower_case=parts.do_lower_case)
    splits = ("dev", "test") if FLAGS.tfds else tuple(s for s in ("dev", "test") if s in files)
    adapter = token_tagging.TaggingAdapter(
        token_tagging.tagging_reader(files, label_list, **reader_options),
        tokenizer,
        parts.cache_dir,
        label_list,
        token_tagging.TaggingSettings(
            max_seq_length=FLAGS.max_seq_length,
            doc_stride=FLAGS.doc_stride,
            document_context=FLAGS.document_context,
        ),
        eval_splits=tuple(s for s in splits if s == "dev"),
        predict_splits=splits,
        docstart_lines=not FLAGS.tfds,
    )
    # Every split the mode needs is read and converted before the model is built, so bad
    # data fails first.
    adapter.prepare(adapter.splits_read_by(FLAGS.mode))
  except (InputError, ValueError) as e:
    cli.fail(str(e))
  finetune_flags.run_and_report(
      strategy, adapter, parts, is_chief, worker_id, shown_metrics=("f1", "precision", "recall")
  )


if __name__ == "__main__":
  cli.run(
      main,
      finetune_flags.help_groups(
          (
              "train_file",
              "eval_file",
              "predict_file",
              "file_format",
              "tag_column",
              "label_list",
              "document_context",
              "doc_stride",
              "tfds",
              "tfds_data_dir",
              "tfds_download",
          )
      ),
  )
