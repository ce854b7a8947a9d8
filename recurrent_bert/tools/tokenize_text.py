r"""Writes, for each input line, one JSON list of its word pieces.

A debugging aid, and a stable way to compare tokenizers (diff the outputs).

Example:
  python -m recurrent_bert.tools.tokenize_text --vocab_file=vocab.txt --do_lower_case=true \
      --input_file=corpus.txt --output_file=pieces.jsonl
  python -m recurrent_bert.tools.tokenize_text --vocab_file=spm.model \
      --input_file=corpus.txt --output_file=pieces.jsonl    # a SentencePiece model
"""

import json

from absl import flags

from recurrent_bert import cli
from recurrent_bert.flags import execution
from recurrent_bert.flags import vocabulary

FLAGS = flags.FLAGS
vocabulary.define_flags()
flags.DEFINE_string("input_file", None, "UTF-8 text, one string per line; `builtin` allowed.")
flags.DEFINE_string("output_file", None, "JSON lines output, written atomically.")
flags.DEFINE_enum("output", "pieces", ["pieces", "ids"], "Write piece strings or ids.")
flags.DEFINE_integer("batch_size", 1024, "Lines tokenized per call.")
execution.register_range("batch_size", 1, execution.INT32_MAX)
flags.mark_flags_as_required(["vocab_file", "input_file", "output_file"])


def tokenize_file(tokenizer, input_file, output_file, output="pieces", batch_size=1024):
  """Tokenizes input_file line by line (blank lines give []); returns the line count."""
  import tensorflow as tf

  from recurrent_bert import io_utils

  tokenize = tf.function(
      tokenizer.tokenize_flat, input_signature=[tf.TensorSpec([None], tf.string)]
  )
  lines = 0
  with io_utils.atomic_write(output_file, "w") as out:
    batch = []

    def flush():
      ids = tokenize(tf.constant(batch)).to_list()
      for row in ids:
        value = tokenizer.convert_ids_to_tokens(row) if output == "pieces" else row
        out.write(json.dumps(value, ensure_ascii=False) + "\n")
      batch.clear()

    for _, line in io_utils.read_lines_checked(input_file):
      batch.append(line)
      lines += 1
      if len(batch) >= batch_size:
        flush()
    if batch:
      flush()
  return lines


def main(argv):
  del argv
  from recurrent_bert.data import builtin_corpus
  from recurrent_bert.data import vocab

  # Bad input fails in a second, before TensorFlow loads (tokenization imports it).
  execution.check_output_path("output_file", folder=False)
  vocab.read_vocabulary(FLAGS.vocab_file)
  from recurrent_bert.data import tokenization

  [input_file] = cli.run_checked(
      builtin_corpus.resolve_input_files, [FLAGS.input_file], "input_file"
  )
  tokenizer = cli.run_checked(tokenization.make_tokenizer, FLAGS.vocab_file, FLAGS.do_lower_case)
  cli.run_checked(
      tokenize_file, tokenizer, input_file, FLAGS.output_file, FLAGS.output, FLAGS.batch_size
  )


if __name__ == "__main__":
  cli.run(main)
