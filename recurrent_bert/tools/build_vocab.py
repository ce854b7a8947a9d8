r"""Learns a BERT WordPiece vocabulary (or a SentencePiece model) from text, atomically.

The learner is tensorflow-text's (`wordpiece_vocab.wordpiece_tokenizer_learner_lib`, the one
behind `bert_vocab_from_dataset` and keras-hub's `compute_word_piece_vocabulary`); the word
counts come from our in-graph basic tokenizer, so the vocabulary matches what
`BertWordpieceTokenizer` will split. The reserved tokens [PAD] [UNK] [CLS] [SEP] [MASK] get
ids 0-4; if the learner returns fewer tokens than requested the vocabulary is padded with
[unusedN] tokens (as BERT's own vocabularies are), so vocab.txt has exactly --vocab_size
lines.

With --tokenizer=unigram or bpe it learns a SentencePiece model instead, with the
`sentencepiece` package, from the same text (recurrent_bert/data/sentencepiece_vocab.py:
[PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4, --do_lower_case as the model's case folding,
deterministic), and writes `<output>.model` (the tokenizer: give it as --vocab_file to
every command) and `<output>.vocab` (piece<TAB>score, line i = id i, for reading). The
WordPiece learner's --max_unique_chars, --max_token_length and --min_count do not apply.

Examples:
  python -m recurrent_bert.tools.build_vocab --input_files=builtin --vocab_size=8000 \
      --do_lower_case=true --output_file=/tmp/vocab.txt
  python -m recurrent_bert.tools.build_vocab --input_files=builtin --vocab_size=8000 \
      --tokenizer=unigram --output_file=/tmp/spm      # /tmp/spm.model, /tmp/spm.vocab
"""

import collections
import os
import sys

from absl import flags
from absl import logging

from recurrent_bert import cli
from recurrent_bert.flags import corpus
from recurrent_bert.flags import execution
from recurrent_bert.flags import vocabulary

FLAGS = flags.FLAGS
corpus.define_flags()
vocabulary.define_flags(vocab_file_note=None)
flags.DEFINE_enum(
    "tokenizer",
    "wordpiece",
    ["wordpiece", "unigram", "bpe"],
    "wordpiece: BERT's vocab.txt; unigram (unigram language model) or bpe: a "
    "SentencePiece model, <output_file>.model plus the <output_file>.vocab listing.",
)
flags.DEFINE_string(
    "output_file",
    None,
    "Where to write vocab.txt (atomically); with a SentencePiece --tokenizer the "
    "prefix of <prefix>.model and <prefix>.vocab (a trailing .model is dropped).",
)
flags.DEFINE_float(
    "character_coverage",
    1.0,
    "SentencePiece: the fraction of the text's characters the model covers, the rarest "
    "others becoming [UNK]. 1.0: every character of the text has a piece (as the "
    "WordPiece learner keeps every character); SentencePiece's 0.9995 suits CJK-rich "
    "text, where thousands of rare characters would take the vocabulary.",
)
flags.DEFINE_integer("vocab_size", 30522, "Number of tokens in the vocabulary.")
flags.DEFINE_integer("max_lines", 0, "Read at most this many lines (0 = all).")
flags.DEFINE_integer("max_unique_chars", 1000, "Alphabet size cap for the learner.")
flags.DEFINE_integer("max_token_length", 50, "Longer words are not counted.")
flags.DEFINE_integer("min_count", 1, "Lower bound of the learner's frequency threshold.")
flags.mark_flag_as_required("output_file")
execution.register_range("vocab_size", 100, execution.INT32_MAX)
execution.register_range("max_lines", 0, 2**63 - 1)
execution.register_range("max_unique_chars", 1, 1 << 21)  # Unicode has fewer code points
# tensorflow-text's WordPiece holds tokens of at most 256 bytes (data/vocab.py).
execution.register_range("max_token_length", 1, 256)
execution.register_range("min_count", 1, 2**63 - 1)
flags.register_validator(
    "character_coverage",
    lambda v: 0.0 < v <= 1.0,
    "--character_coverage must be in (0, 1]",
)
WORDPIECE_ONLY_FLAGS = ("max_unique_chars", "max_token_length", "min_count")


def count_words(files, do_lower_case, max_lines=0, batch_size=4096):
  """Counter of basic-tokenized words over the files (streamed, batched in-graph)."""
  import tensorflow as tf

  from recurrent_bert import io_utils
  from recurrent_bert.data import tokenization

  split = tf.function(
      lambda t: tokenization.basic_tokenize(t, do_lower_case),
      input_signature=[tf.TensorSpec([None], tf.string)],
  )
  counts = collections.Counter()
  batch = []
  seen = 0

  def flush():
    words = split(tf.constant(batch)).flat_values.numpy()
    counts.update(w.decode("utf-8") for w in words)
    batch.clear()

  for path in files:
    for _, line in io_utils.read_lines_checked(path):
      if line.strip():
        batch.append(line)
        if len(batch) >= batch_size:
          flush()
      seen += 1
      if max_lines and seen >= max_lines:
        break
    if max_lines and seen >= max_lines:
      break
  if batch:
    flush()
  return counts


def learn_vocab(counts, vocab_size, max_unique_chars=1000, max_token_length=50, min_count=1):
  """Runs tensorflow-text's WordPiece learner; returns exactly vocab_size tokens."""
  from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

  from recurrent_bert.data import tokenization

  reserved = list(tokenization.RESERVED_TOKENS)
  # Sorted input: the learner's result then does not depend on Counter insertion order.
  word_counts = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
  vocab = learner.learn(
      word_counts,
      vocab_size=vocab_size,
      reserved_tokens=reserved,
      lower_thresh=min_count,
      max_unique_chars=max_unique_chars,
      max_token_length=max_token_length,
      include_joiner_token=True,
      joiner=tokenization.SUFFIX_INDICATOR,
  )
  vocab = [t for t in vocab if t.strip()]
  if len(vocab) > vocab_size:
    # The learner always keeps every single character; with a tiny --vocab_size that can
    # exceed the budget. Keep the reserved tokens and the first (most useful) entries.
    logging.warning("learner returned %d tokens, keeping %d", len(vocab), vocab_size)
    vocab = vocab[:vocab_size]
  unused = 0
  while len(vocab) < vocab_size:
    vocab.append(f"[unused{unused}]")
    unused += 1
  return vocab


def check_tokenizer_flags():
  """Refuses flags of the other kind of learner (one line, exit 2)."""
  if FLAGS.tokenizer == "wordpiece":
    if FLAGS["character_coverage"].present:
      cli.fail("--character_coverage is for a SentencePiece --tokenizer (unigram or bpe)")
    return
  given = [f"--{name}" for name in WORDPIECE_ONLY_FLAGS if FLAGS[name].present]
  if given:
    cli.fail(
        f"{', '.join(given)}: WordPiece learner option(s), not used with "
        f"--tokenizer={FLAGS.tokenizer}; drop them"
    )


def build_sentencepiece(files):
  """--tokenizer=unigram|bpe: learns the model and writes <output>.model and .vocab."""
  from recurrent_bert.data import sentencepiece_vocab

  # Read first: the trainer pulls lines from C++, where a bad line's error would be lost.
  lines = cli.run_checked(list, sentencepiece_vocab.iter_lines(files, FLAGS.max_lines))
  if not lines:
    cli.fail("--input_files: no text in " + ", ".join(files))
  model = cli.run_checked(
      sentencepiece_vocab.train_sentencepiece,
      lines,
      FLAGS.tokenizer,
      FLAGS.vocab_size,
      FLAGS.do_lower_case,
      FLAGS.character_coverage,
  )
  sentencepiece_vocab.write_model(FLAGS.output_file, model)
  model_path, vocab_path = sentencepiece_vocab.output_paths(FLAGS.output_file)
  print(
      f"wrote {model_path} and {vocab_path}: {FLAGS.tokenizer} SentencePiece model of "
      f"{FLAGS.vocab_size} pieces, {'case-folded' if FLAGS.do_lower_case else 'cased'}",
      file=sys.stderr,
  )


def main(argv):
  del argv
  from recurrent_bert import io_utils

  check_tokenizer_flags()
  execution.check_output_path("output_file", folder=False)
  files = cli.run_checked(corpus.input_files)
  output_dir = os.path.dirname(os.path.abspath(FLAGS.output_file))
  if os.path.exists(output_dir) and not os.access(output_dir, os.W_OK):
    cli.fail(f"--output_file: directory {output_dir!r} is not writable")
  if FLAGS.tokenizer != "wordpiece":
    build_sentencepiece(files)
    return
  counts = cli.run_checked(count_words, files, FLAGS.do_lower_case, FLAGS.max_lines)
  if not counts:
    cli.fail("--input_files: no words in " + ", ".join(files))
  logging.info("%d distinct words, %d in total", len(counts), sum(counts.values()))
  vocab = learn_vocab(
      counts, FLAGS.vocab_size, FLAGS.max_unique_chars, FLAGS.max_token_length, FLAGS.min_count
  )
  io_utils.atomic_write_text(FLAGS.output_file, "\n".join(vocab) + "\n")
  num_unused = sum(t.startswith("[unused") for t in vocab)
  print(
      f"wrote {FLAGS.output_file}: {len(vocab)} tokens ({num_unused} [unused] padding), "
      f"{'uncased' if FLAGS.do_lower_case else 'cased'}, from {len(counts):,} distinct words",
      file=sys.stderr,
  )


if __name__ == "__main__":
  cli.run(main)
