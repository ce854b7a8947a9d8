"""The one error type for bad user input, and how it names the place.

Every reader, validator and command raises `InputError` for input the user must fix: a
file, a line of it, a record of a TFRecord shard, a key of a config, a flag. Its message
starts with the place, in one of these forms (built by `at`):

    path/to/file.tsv:17: column 'label': 'x' is not one of ['0', '1']
    path/to/shard-00000.tfrecord: record 12: feature 'input_ids' has 31 values, expected 32
    path/to/config.json: key 'dropout_rate': expected a number, got the string "0.1"
    --max_seq_length=0: must be >= 8

Commands (through `cli.run`) print the message as one line on stderr and exit with status
2, wherever below them it was raised; nothing else is caught that way, so a bug still shows
its traceback. This module imports nothing, so the TensorFlow-free base (config) can use it.
"""

from typing import Callable, List, Optional, Tuple


class InputError(ValueError):
  """Bad user input (a file, a line, a record, a key, a flag): the message says what and where."""


def at(
    path: str,
    line: Optional[int] = None,
    record: Optional[int] = None,
    key: Optional[str] = None,
) -> str:
  """The place prefix of an InputError message (without the trailing ': ').

  Args:
    path: the file (or "--flag=value" for a flag).
    line: 1-based line number in a text file.
    record: 1-based record number in a TFRecord shard.
    key: a JSON key path such as "data[0].paragraphs[2]" or "dropout_rate".

  Returns:
    "path:line", "path: record N", "path: key 'k'", or combinations, e.g.
    "config.json: key 'dropout_rate'".
  """
  place = f"{path}:{line}" if line is not None else path
  if record is not None:
    place += f": record {record}"
  if key is not None:
    place += f": key {key!r}"
  return place


def refuse_duplicate_keys(
    where: str, error: type = InputError
) -> Callable[[List[Tuple[str, object]]], dict]:
  """A json.loads object_pairs_hook building a dict that refuses a key given twice (plain
  JSON silently keeps the last), naming `where` and the key.

  Args:
    where: the place prefix of the object's file (and line), e.g. "train.jsonl:3".
    error: the InputError subclass to raise (config.ConfigError for model configs).
  """

  def build(pairs):
    value = {}
    for key, item in pairs:
      if key in value:
        raise error(f"{at(where, key=key)}: given twice in one object")
      value[key] = item
    return value

  return build


def first_line(error: BaseException, limit: Optional[int] = None) -> str:
  """The first line of `error`'s message (at most `limit` characters), else its type's name:
  the reason an InputError quotes from a library's multi-line error (TensorFlow's op dumps)."""
  text = str(error).strip()
  return text.splitlines()[0][:limit] if text else type(error).__name__
