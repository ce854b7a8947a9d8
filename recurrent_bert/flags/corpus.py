"""The text-corpus input of the data tools (build_vocab, create_pretraining_data).

`--input_files` takes text files or globs, and `builtin` for the corpus of
recurrent_bert/data/builtin_corpus.py, built once under --cache_dir (at most
--builtin_max_bytes of it). `input_files()` resolves them into file paths.
"""

from typing import List

from absl import flags

from recurrent_bert.flags import execution

FLAGS = flags.FLAGS


def define_flags() -> None:
  """--input_files (required), --cache_dir and --builtin_max_bytes."""
  flags.DEFINE_list(
      "input_files", None, "Text files or globs (comma-separated); `builtin` = the built-in corpus."
  )
  flags.DEFINE_string(
      "cache_dir", None, "Where `builtin` is built (default ~/.cache/recurrent_bert)."
  )
  flags.DEFINE_integer("builtin_max_bytes", 0, "Cap of the built-in corpus size (0 = all).")
  flags.mark_flag_as_required("input_files")
  execution.register_range("builtin_max_bytes", 0, 2**63 - 1)


def input_files() -> List[str]:
  """The text files --input_files names, the built-in corpus built if named.

  Returns:
    File paths, in the order given, each once.

  Raises:
    InputError: a pattern matching nothing, named with the flag.
  """
  from recurrent_bert.data import builtin_corpus

  execution.check_output_path("cache_dir")

  return builtin_corpus.resolve_input_files(
      FLAGS.input_files, "input_files", FLAGS.cache_dir, FLAGS.builtin_max_bytes or None
  )
