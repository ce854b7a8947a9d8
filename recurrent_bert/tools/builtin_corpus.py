r"""Writes the built-in corpus (docstrings of the installed Python) to a text file.

  python -m recurrent_bert.tools.builtin_corpus --output_file=corpus.txt [--max_bytes=N]

One sentence per line, a blank line between documents: the input format of the data
tools. What the corpus is and how it is extracted: recurrent_bert/data/builtin_corpus.py.
The data tools' `--input_files=builtin` builds the same text into a cache by itself.
"""

from absl import flags

from recurrent_bert import cli
from recurrent_bert.flags import execution

FLAGS = flags.FLAGS
flags.DEFINE_string("output_file", None, "Where to write the corpus (atomically).")
flags.DEFINE_integer("max_bytes", 0, "Stop after about this many bytes (0 = all).")
flags.DEFINE_integer("max_documents", 0, "Stop after this many documents (0 = all).")
flags.mark_flag_as_required("output_file")
for _name in ("max_bytes", "max_documents"):
  flags.register_validator(_name, lambda v: v >= 0, f"--{_name} must be >= 0 (0 = all)")


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  execution.check_output_path("output_file", folder=False)
  from recurrent_bert.data import builtin_corpus

  stats = cli.run_checked(
      builtin_corpus.write_corpus,
      FLAGS.output_file,
      max_bytes=FLAGS.max_bytes or None,
      max_documents=FLAGS.max_documents or None,
  )
  print(
      f"wrote {FLAGS.output_file}: {stats['documents']:,} documents, "
      f"{stats['sentences']:,} sentences, {stats['bytes'] / 1e6:.1f} MB"
  )


if __name__ == "__main__":
  cli.run(main)
