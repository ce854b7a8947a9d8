"""--vocab_file and --do_lower_case: the vocabulary (WordPiece or SentencePiece) and its casing.

One definition for the commands that tokenize (the data tools, pretrain) and those that
record or take them from a model dir (export, convert_checkpoint). Each command adds to
the help where the default comes from or what the value is used for.
"""

from typing import Optional

from absl import flags


def _help(text: str, note: str) -> str:
  return f"{text}; {note}." if note else f"{text}."


def define_flags(
    *,
    vocab_file_note: Optional[str] = "",
    do_lower_case: Optional[bool] = True,
    do_lower_case_note: str = "",
) -> None:
  """--vocab_file (unless `vocab_file_note` is None) and --do_lower_case.

  Args:
    vocab_file_note: appended to --vocab_file's help (where its default comes from, what
      the command does with it); None: no --vocab_file (the command writes one).
    do_lower_case: default of --do_lower_case; None: what the model dir or source
      records (`do_lower_case_note` says where).
    do_lower_case_note: appended to --do_lower_case's help.
  """
  if vocab_file_note is not None:
    flags.DEFINE_string(
        "vocab_file",
        None,
        _help(
            "vocab.txt (ours or google-research/bert's) or a SentencePiece .model "
            "(recurrent_bert/tools/build_vocab.py --tokenizer=unigram|bpe)",
            vocab_file_note,
        ),
    )
    flags.register_validator(
        "vocab_file", lambda v: v is None or bool(v.strip()), "--vocab_file: empty; give a path"
    )
  flags.DEFINE_boolean(
      "do_lower_case",
      do_lower_case,
      _help(
          "Lower-case and strip accents (an uncased vocabulary; a SentencePiece model "
          "has its own casing, fixed when it was built)",
          do_lower_case_note,
      ),
  )


def resolve_casing(vocabulary, vocab_file: str, flag: Optional[bool], recorded: Optional[bool]):
  """The casing to tokenize with: --do_lower_case, else the recorded one, else true.

  A SentencePiece model's normaliser fixes its casing: that is used, and a --do_lower_case
  saying otherwise (it would be silently ignored) fails in one line naming the flag.

  Args:
    vocabulary: the `data.vocab.Vocabulary` read from `vocab_file`.
    vocab_file: its path (for the message).
    flag: --do_lower_case (None: not given).
    recorded: the casing the model dir or checkpoint records (None: none).
  """
  from recurrent_bert import model_dir as layout
  from recurrent_bert.cli import fail

  if vocabulary.kind == layout.SENTENCEPIECE:
    model_casing = bool(vocabulary.folds_case)
    if flag is not None and flag != model_casing:
      fail(
          f"--do_lower_case={flag} contradicts the SentencePiece model {vocab_file}, which "
          f"{'lower-cases' if model_casing else 'keeps case'}: drop the flag"
      )
    return model_casing
  if flag is not None:
    return flag
  return True if recorded is None else recorded
