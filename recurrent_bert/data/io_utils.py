"""File helpers shared by the data tools: atomic writes, checked text reading, globs.

Every file the data tools produce (vocab.txt, TFRecord shards, stats JSON, the built-in
corpus) is first written to a temporary file in the destination directory and then moved
into place with `os.replace`, so a reader never sees a half-written file and an
interrupted run leaves no output that looks complete.
"""

import contextlib
import glob
import json
import os
import shutil
import tempfile
from typing import Iterator, List, Sequence, Tuple


class InputError(ValueError):
  """Bad user input (a file, a line, a flag): the message names what is wrong and where."""


def temp_path_for(path: str) -> str:
  """Returns a fresh temporary file name next to `path` (same directory, same filesystem).

  Being in the same directory matters: `os.replace` is only atomic within one filesystem.
  """
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                             dir=directory)
  os.close(fd)
  return tmp


def commit_temp(tmp: str, path: str) -> None:
  """Moves a finished temporary file into place (atomic on POSIX)."""
  # mkstemp creates files with mode 0600; give the output the usual umask-based mode.
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(tmp, 0o666 & ~umask)
  os.replace(tmp, path)


def discard_temp(tmp: str) -> None:
  with contextlib.suppress(FileNotFoundError):
    os.remove(tmp)


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", encoding: str = "utf-8"):
  """Context manager yielding a file object; `path` appears only if the block succeeds.

  Args:
    path: final destination.
    mode: "w" (text) or "wb" (binary).
    encoding: text encoding for mode "w".
  """
  if mode not in ("w", "wb"):
    raise ValueError(f"atomic_write supports modes 'w' and 'wb', got {mode!r}")
  tmp = temp_path_for(path)
  try:
    kwargs = {"encoding": encoding, "newline": "\n"} if mode == "w" else {}
    with open(tmp, mode, **kwargs) as f:
      yield f
      f.flush()
      os.fsync(f.fileno())
    commit_temp(tmp, path)
  except BaseException:
    discard_temp(tmp)
    raise


def atomic_write_text(path: str, text: str) -> None:
  with atomic_write(path, "w") as f:
    f.write(text)


def atomic_write_json(path: str, obj) -> None:
  atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def atomic_directory(final_dir: str):
  """Yields a temp dir beside `final_dir`; on success it replaces `final_dir` whole.

  Readers see either the old complete directory or the new complete one: a directory
  cannot be replaced in one rename, so the old one is first moved aside (two renames),
  then deleted. On error the temp dir is removed and `final_dir` is left untouched.
  """
  final_dir = os.path.abspath(final_dir)
  parent, base = os.path.split(final_dir)
  os.makedirs(parent, exist_ok=True)
  tmp_dir = tempfile.mkdtemp(prefix=f".{base}.tmp-", dir=parent)
  try:
    yield tmp_dir
    if os.path.exists(final_dir):
      old_dir = tempfile.mkdtemp(prefix=f".{base}.old-", dir=parent)
      os.replace(final_dir, os.path.join(old_dir, base))
      os.replace(tmp_dir, final_dir)
      shutil.rmtree(old_dir, ignore_errors=True)
    else:
      os.replace(tmp_dir, final_dir)
  except BaseException:
    shutil.rmtree(tmp_dir, ignore_errors=True)
    raise


def expand_input_patterns(patterns: Sequence[str], flag_name: str = "input_files") -> List[str]:
  """Expands comma-separated file names and globs, in a deterministic (sorted) order.

  Local paths are checked to be readable regular files; `scheme://` paths (gs://...) are
  globbed through TensorFlow's file systems.

  Args:
    patterns: file names or glob patterns; each entry may itself be comma-separated.
    flag_name: used in error messages.

  Returns:
    The matched files, sorted within each pattern, duplicates removed, pattern order kept.

  Raises:
    InputError: a pattern matches nothing, or a match is not a readable regular file.
  """
  files: List[str] = []
  seen = set()
  for entry in patterns:
    for pattern in str(entry).split(","):
      pattern = pattern.strip()
      if not pattern:
        continue
      remote = "://" in pattern  # gs:// and other TensorFlow file systems
      if remote:
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        matches = sorted(tf.io.gfile.glob(pattern))
      else:
        matches = sorted(glob.glob(os.path.expanduser(pattern)))
      if not matches:
        raise InputError(f"--{flag_name}: no file matches {pattern!r}")
      for match in matches:
        if match in seen:
          continue
        if remote:
          pass  # object stores have no local permission bits to check
        elif not os.path.isfile(match):
          raise InputError(f"--{flag_name}: {match!r} is not a regular file")
        if not os.access(match, os.R_OK):
          raise InputError(f"--{flag_name}: {match!r} is not readable")
        seen.add(match)
        files.append(match)
  if not files:
    raise InputError(f"--{flag_name}: no input files given")
  return files


def read_lines_checked(path: str) -> Iterator[Tuple[int, str]]:
  """Yields (1-based line number, line without its newline) of a UTF-8 text file.

  Reads in binary and decodes line by line so an encoding error names the exact line,
  and so memory stays flat however large the file is.

  Raises:
    InputError: the file cannot be opened, or a line is not valid UTF-8.
  """
  try:
    f = open(path, "rb")
  except OSError as e:
    raise InputError(f"cannot read input file {path!r}: {e.strerror or e}") from e
  with f:
    for line_number, raw in enumerate(f, start=1):
      try:
        line = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        raise InputError(
            f"{path}:{line_number}: not valid UTF-8 (byte {e.start} of the line: "
            f"{raw[e.start:e.start + 4]!r}); convert the file to UTF-8") from e
      yield line_number, line.rstrip("\r\n")


def read_metrics_log(model_dir: str) -> dict:
  """{step: record} of a training run's metrics.jsonl; later lines win (a resumed run
  replays steps); a line cut by a kill is skipped. TensorFlow-free, for reports."""
  path = os.path.join(model_dir, "metrics.jsonl")
  records = {}
  if not os.path.exists(path):
    return records
  with open(path, encoding="utf-8") as f:
    for line in f:
      try:
        record = json.loads(line)
      except json.JSONDecodeError:
        continue
      records[int(record["step"])] = record
  return records
