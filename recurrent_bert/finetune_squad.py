r"""Fine-tunes and evaluates a span extractor on SQuAD v1.1 / v2.0.

  python -m recurrent_bert.finetune_squad --flagfile=configs/finetune/squad_v1_bert.flags \
      --train_file=squad/train-v1.1.json --predict_file=squad/dev-v1.1.json \
      --init_checkpoint=/ckpt/bert_base --model_dir=/ckpt/bert_base_squad

--use_blstm_decoder adds TRANS-BLSTM's two-layer BLSTM decoder to the span head.
--tfds reads squad/v1.1 or squad/v2.0 from tensorflow-datasets instead of the JSON files.
Evaluation scores the predict file with the official definitions (exact_match and f1 in
percent; v2.0 adds HasAns_/NoAns_ and the best no-answer threshold) and writes
predictions.json, nbest_predictions.json (and null_odds.json for v2.0) under
model_dir/predictions. The task adapter: recurrent_bert/tasks/span/adapter.py. Modes
and model_dir layout: recurrent_bert/training/finetuning_runner.py.
"""

import dataclasses
import math

from absl import flags

from recurrent_bert import cli
from recurrent_bert.errors import InputError
from recurrent_bert.flags import execution as run_flags
from recurrent_bert.flags import finetuning as finetune_flags

FLAGS = flags.FLAGS
finetune_flags.define_flags(
    learning_rate=5e-5, train_batch_size=32, max_seq_length=384, num_train_epochs=3.0
)
flags.DEFINE_enum("version", "1.1", ["1.1", "2.0"], "SQuAD version (2.0: no-answer).")
flags.DEFINE_string("train_file", None, "train-v1.1.json / train-v2.0.json.")
flags.DEFINE_string(
    "predict_file", None, "dev-v1.1.json / dev-v2.0.json (scored when it has answers)."
)
flags.DEFINE_boolean("tfds", False, "Read squad/v1.1 or squad/v2.0 from TFDS.")
flags.DEFINE_string("tfds_data_dir", None, "TFDS data dir (default: TFDS's).")
flags.DEFINE_boolean("tfds_download", False, "Let TFDS download missing data (network).")
flags.DEFINE_boolean("use_blstm_decoder", False, "Span head after a 2-layer BLSTM decoder.")
flags.DEFINE_integer("doc_stride", 128, "Pieces between the starts of context windows.")
flags.DEFINE_integer("max_query_length", 64, "Question pieces kept.")
flags.DEFINE_integer("max_answer_length", 30, "Longest predicted answer, in pieces.")
flags.DEFINE_integer("n_best_size", 20, "Candidates per window and n-best entries.")
flags.DEFINE_float(
    "null_score_diff_threshold",
    0.0,
    "v2.0: predict no answer when null score - best span exceeds this.",
)
flags.register_validator("doc_stride", lambda v: v >= 1, "--doc_stride must be >= 1")
flags.register_validator("max_query_length", lambda v: v >= 1, "--max_query_length must be >= 1")
flags.register_validator("max_answer_length", lambda v: v >= 1, "--max_answer_length must be >= 1")
flags.register_validator("n_best_size", lambda v: v >= 1, "--n_best_size must be >= 1")
flags.register_validator(
    "null_score_diff_threshold", math.isfinite, "--null_score_diff_threshold must be finite"
)


def main(argv):
  # TensorFlow loads here, after the flags are checked: a bad flag or --help costs no import.
  from recurrent_bert.data import tokenization
  from recurrent_bert.tasks.span import adapter as span_extraction

  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  if not FLAGS.tfds:
    if FLAGS.mode in ("train", "train_and_eval") and not FLAGS.train_file:
      cli.fail(f"--mode={FLAGS.mode} needs --train_file (or --tfds)")
    if FLAGS.mode != "train" and not FLAGS.predict_file:
      cli.fail(f"--mode={FLAGS.mode} needs --predict_file (or --tfds)")
  strategy, is_chief, worker_id = run_flags.make_strategy(run_flags.TRAINING_BACKENDS)
  parts = finetune_flags.resolve_run(
      worker_id, path_flags=("train_file", "predict_file", "tfds_data_dir")
  )
  if FLAGS.max_query_length + 4 > FLAGS.max_seq_length:
    cli.fail(
        f"--max_query_length={FLAGS.max_query_length} leaves no room for "
        f"the context in --max_seq_length={FLAGS.max_seq_length}"
    )
  files = {
      split: path
      for split, path in (("train", FLAGS.train_file), ("dev", FLAGS.predict_file))
      if path
  }
  settings = span_extraction.SpanSettings(
      **{
          field.name: FLAGS[field.name].value
          for field in dataclasses.fields(span_extraction.SpanSettings)
      }
  )
  try:
    tokenizer = tokenization.make_tokenizer(parts.vocab_file, do_lower_case=parts.do_lower_case)
    adapter = span_extraction.SpanExtractionAdapter(
        span_extraction.squad_reader(
            FLAGS.version,
            files,
            use_tfds=FLAGS.tfds,
            tfds_data_dir=FLAGS.tfds_data_dir,
            tfds_download=FLAGS.tfds_download,
            skip_bad_rows=FLAGS.skip_bad_rows,
        ),
        tokenizer,
        parts.cache_dir,
        settings,
        version_2=FLAGS.version == "2.0",
        use_blstm_decoder=FLAGS.use_blstm_decoder,
        predict_splits=("dev",) if FLAGS.tfds or "dev" in files else (),
    )
    # Bad data fails before the model is built.
    adapter.prepare(adapter.splits_read_by(FLAGS.mode))
  except (InputError, ValueError) as e:
    cli.fail(str(e))
  finetune_flags.run_and_report(strategy, adapter, parts, is_chief, worker_id)


if __name__ == "__main__":
  cli.run(
      main,
      finetune_flags.help_groups(
          (
              "version",
              "train_file",
              "predict_file",
              "tfds",
              "tfds_data_dir",
              "tfds_download",
              "use_blstm_decoder",
              "doc_stride",
              "max_query_length",
              "max_answer_length",
              "n_best_size",
              "null_score_diff_threshold",
          )
      ),
  )
