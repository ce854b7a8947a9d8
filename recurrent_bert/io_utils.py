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
import re
import shutil
import tempfile
from typing import Iterator, List, Sequence, Tuple
import uuid

from recurrent_bert.errors import InputError
from recurrent_bert.model_dir import EVAL_METRICS_PREFIX
from recurrent_bert.model_dir import METRICS_LOG_FILE
from recurrent_bert.model_dir import gfile as _gfile
from recurrent_bert.model_dir import has_scheme as _has_scheme
from recurrent_bert.model_dir import isfile  # noqa: F401  (io_utils.isfile for readers)


def temp_path_for(path: str) -> str:
  """Returns a fresh temporary file name next to `path` (same directory, same filesystem).

  Being in the same directory matters: `os.replace` is only atomic within one filesystem.
  """
  if not path:
    raise InputError("empty output path; give a file name")
  directory = os.path.dirname(os.path.abspath(path))
  try:
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory
    )
  except OSError as e:  # a parent that is a file, no permission, a full disk
    raise InputError(f"{path}: cannot write here: {e.strerror or e}") from None
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


def _sibling(path: str, kind: str) -> str:
  """A fresh hidden name beside `path`. It must not start with `path`'s own name: the
  ram:// file system answers exists() and listdir() by name prefix."""
  directory, base = path.rstrip("/").rsplit("/", 1)
  return f"{directory}/.{kind}-{uuid.uuid4().hex}-{base}"


def _parent(path: str) -> str:
  """The directory of a path with a scheme ("gs://b/x" -> "gs://b", "ram://x" -> "ram://")."""
  directory = path.rstrip("/").rsplit("/", 1)[0]
  return directory + "/" if directory.endswith(":/") else directory


def open_file(path: str, mode: str = "rb"):
  """Opens `path` for reading, local or on a TensorFlow file system (gs://, ram://)."""
  if _has_scheme(path):
    return _gfile().GFile(path, mode)
  return open(path, mode) if "b" in mode else open(path, mode, encoding="utf-8")


def open_for_write(path: str):
  """Opens `path` for writing bytes, local or on a TensorFlow file system (gs://, ram://)."""
  if _has_scheme(path):
    return _gfile().GFile(path, "wb")
  return open(path, "wb")


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[str]:
  """Yields a temporary path beside `path`, moved over `path` if the block succeeds.

  For writers that take a path (TFRecordWriter, SavedModel files). Paths with a scheme
  (gs://, ram://) are renamed through `tf.io.gfile`.
  """
  if _has_scheme(path):
    gfile = _gfile()
    gfile.makedirs(_parent(path))
    tmp = _sibling(path, "tmp")
    try:
      yield tmp
      gfile.rename(tmp, path, overwrite=True)
    except BaseException:
      if gfile.exists(tmp):
        gfile.remove(tmp)
      raise
    return
  tmp = temp_path_for(path)
  try:
    yield tmp
    commit_temp(tmp, path)
  except BaseException:
    discard_temp(tmp)
    raise


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", encoding: str = "utf-8"):
  """Context manager yielding a file object; `path` appears only if the block succeeds.

  Args:
    path: final destination (local, or gs://, ram://... through `tf.io.gfile`).
    mode: "w" (text) or "wb" (binary).
    encoding: text encoding for mode "w".
  """
  if mode not in ("w", "wb"):
    raise ValueError(f"atomic_write supports modes 'w' and 'wb', got {mode!r}")
  with atomic_output(path) as tmp:
    if _has_scheme(path):
      with _gfile().GFile(tmp, mode) as f:
        yield f
    else:
      kwargs = {"encoding": encoding, "newline": "\n"} if mode == "w" else {}
      with open(tmp, mode, **kwargs) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())


def remove_file(path: str) -> None:
  """Deletes a file; nothing when it does not exist."""
  if _has_scheme(path):
    if _gfile().exists(path):
      _gfile().remove(path)
  else:
    discard_temp(path)


def atomic_write_text(path: str, text: str) -> None:
  with atomic_write(path, "w") as f:
    f.write(text)


def atomic_write_json(path: str, obj) -> None:
  atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def atomic_copy(source: str, path: str) -> None:
  """Copies `source` to `path` atomically; either may be local or have a scheme."""
  if os.path.abspath(source) == os.path.abspath(path):
    return
  with atomic_write(path, "wb") as out:
    if _has_scheme(source):
      with _gfile().GFile(source, "rb") as f:
        out.write(f.read())
    else:
      with open(source, "rb") as f:
        shutil.copyfileobj(f, out)


def makedirs(path: str) -> None:
  if _has_scheme(path):
    _gfile().makedirs(path)
  else:
    os.makedirs(path, exist_ok=True)


def remove_tree(path: str) -> None:
  """Deletes a directory and what it holds; nothing when it does not exist."""
  if _has_scheme(path):
    if _gfile().exists(path):
      _gfile().rmtree(path)
  else:
    shutil.rmtree(path, ignore_errors=True)


def check_replaceable_dir(path: str, overwrite: bool, flag: str = "output_dir") -> None:
  """Refuses (InputError) to replace a local folder that exists and holds files, unless
  `overwrite`: a folder `atomic_directory` may write over."""
  if os.path.exists(path) and os.listdir(path) and not overwrite:
    raise InputError(f"--{flag}={path} exists and is not empty; pass --overwrite to replace it")


@contextlib.contextmanager
def atomic_directory(final_dir: str):
  """Yields a temp dir beside `final_dir`; on success it replaces `final_dir` whole.

  Readers see either the old complete directory or the new complete one: a directory
  cannot be replaced in one rename, so the old one is first moved aside (two renames),
  then deleted. On error the temp dir is removed and `final_dir` is left untouched.
  On file systems with a scheme (gs://, ram://), which rename object by object, the
  files are moved into place one by one after all of them are complete; a reader that
  must not see a partial directory checks for the file written last (e.g. export_info.json).
  """
  if _has_scheme(final_dir):
    gfile = _gfile()
    final_dir = final_dir.rstrip("/")
    tmp_dir = _sibling(final_dir, "tmp")
    gfile.makedirs(tmp_dir)
    try:
      yield tmp_dir
      # Object stores (and ram://) rename file by file, not directories: the new files
      # are moved in one by one once all are written; the old ones are deleted first.
      if gfile.exists(final_dir):
        gfile.rmtree(final_dir)
      for directory, _, files in gfile.walk(tmp_dir):
        target_dir = final_dir + directory[len(tmp_dir) :]
        gfile.makedirs(target_dir)
        for name in files:
          gfile.rename(f"{directory}/{name}", f"{target_dir}/{name}", overwrite=True)
      gfile.rmtree(tmp_dir)
    except BaseException:
      if gfile.exists(tmp_dir):
        gfile.rmtree(tmp_dir)
      raise
    return
  final_dir = os.path.abspath(final_dir)
  parent, base = os.path.split(final_dir)
  os.makedirs(parent, exist_ok=True)
  tmp_dir = tempfile.mkdtemp(prefix=f".{base}.tmp-", dir=parent)
  try:
    yield tmp_dir
    # mkdtemp makes it 0700; the swapped-in folder gets the usual umask-based mode.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_dir, 0o777 & ~umask)
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


def clean_atomic_directory_leftovers(final_dir: str) -> List[str]:
  """Removes what killed `atomic_directory` runs for `final_dir` left beside it.

  A run killed while writing leaves its temp dir; one killed between the two renames of
  the swap leaves `final_dir` missing and the old complete copy in its `.old-` dir, which
  is moved back (the old complete folder wins over a half-finished swap). Call it before
  a new `atomic_directory(final_dir)`; two runs writing the same `final_dir` at once are
  not supported (each would see the other's temp dir as a leftover).

  Returns:
    The names removed (or restored, marked "restored ..."), for a log line.
  """
  cleaned = []
  if _has_scheme(final_dir):
    gfile = _gfile()
    final_dir = final_dir.rstrip("/")
    parent, base = _parent(final_dir), final_dir.rsplit("/", 1)[1]
    if not gfile.isdir(parent):
      return cleaned
    pattern = re.compile(r"\.tmp-[0-9a-f]{32}-" + re.escape(base))
    for name in gfile.listdir(parent):
      name = name.rstrip("/")
      if pattern.fullmatch(name):
        gfile.rmtree(f"{parent.rstrip('/')}/{name}")
        cleaned.append(name)
    return cleaned
  final_dir = os.path.abspath(final_dir)
  parent, base = os.path.split(final_dir)
  if not os.path.isdir(parent):
    return cleaned
  for name in sorted(os.listdir(parent)):
    if name.startswith(f".{base}.old-"):
      old_copy = os.path.join(parent, name, base)
      if not os.path.exists(final_dir) and os.path.isdir(old_copy):
        os.replace(old_copy, final_dir)
        cleaned.append(f"restored {base} from {name}")
    elif not name.startswith(f".{base}.tmp-"):
      continue
    shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
    cleaned.append(name)
  return cleaned


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
        import tensorflow as tf

        matches = sorted(tf.io.gfile.glob(pattern))
      else:
        matches = sorted(glob.glob(os.path.expanduser(pattern)))
      if not matches:
        raise InputError(f"--{flag_name}: no file matches {pattern!r}")
      for match in matches:
        if match in seen:
          continue
        # Object stores have no local permission bits to check.
        if not remote and not os.path.isfile(match):
          raise InputError(f"--{flag_name}: {match!r} is not a regular file")
        if not remote and not os.access(match, os.R_OK):
          raise InputError(f"--{flag_name}: {match!r} is not readable")
        seen.add(match)
        files.append(match)
  if not files:
    raise InputError(f"--{flag_name}: no input files given")
  return files


# Python's universal newlines: \n, \r\n and a lone \r (old Mac files) each end a line.
_LINE_END = re.compile(rb"\r\n|\r|\n")
_READ_CHUNK_BYTES = 1 << 20


def split_universal_lines(f, chunk_bytes: int = _READ_CHUNK_BYTES) -> Iterator[bytes]:
  """The lines of a binary file object, without their ends, split as Python's universal
  newlines split them (\n, \r\n or a lone \r).

  Reads `chunk_bytes` at a time, so memory stays flat whatever the line ends; a \r\n cut
  between two chunks still ends one line, not two. A final line without an end is yielded.
  """
  pending: List[bytes] = []  # the start of a line still open (in parts: no quadratic joins)
  after_cr = False  # the previous chunk ended in \r: a \n starting this one belongs to it
  while True:
    chunk = f.read(chunk_bytes)
    if not chunk:
      break
    if after_cr and chunk.startswith(b"\n"):
      chunk = chunk[1:]
    after_cr = chunk.endswith(b"\r")
    # Only the new chunk is scanned, so a line of any length costs linear time.
    pieces = _LINE_END.split(chunk)
    if len(pieces) == 1:
      pending.append(chunk)
      continue
    yield b"".join(pending) + pieces[0]
    yield from pieces[1:-1]
    pending = [pieces[-1]]
  if any(pending):
    yield b"".join(pending)


def not_utf8(raw: bytes, error: UnicodeDecodeError) -> str:
  """What is wrong with a line `raw` that failed to decode: where (1-based byte), and the fix."""
  return (
      f"not valid UTF-8 (byte {error.start + 1} of the line: "
      f"{raw[error.start : error.start + 4]!r}); save the file as UTF-8"
  )


def decoded_lines(raw_lines, path: str) -> Iterator[Tuple[int, str]]:
  """(1-based line number, line) of UTF-8 byte lines; an invalid one names `path:line`.

  Raises:
    InputError: a line is not valid UTF-8.
  """
  for line_number, raw in enumerate(raw_lines, start=1):
    try:
      line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
      raise InputError(f"{path}:{line_number}: {not_utf8(raw, e)}") from e
    yield line_number, line


def read_lines_checked(path: str) -> Iterator[Tuple[int, str]]:
  """Yields (1-based line number, line without its end) of a UTF-8 text file.

  Lines end in \n, \r\n or a lone \r, as in Python's universal newlines (and
  `bytes.splitlines`), so a file with old Mac line ends reads as its lines, not as one
  line, and line numbers match what Python (and editors) count. Reads in binary and
  decodes line by line so an encoding error names the exact line, and memory stays flat
  however large the file is.

  Raises:
    InputError: the file cannot be opened, or a line is not valid UTF-8.
  """
  try:
    f = open_file(path, "rb")
  except OSError as e:
    raise InputError(f"cannot read input file {path!r}: {e.strerror or e}") from e
  with f:
    yield from decoded_lines(split_universal_lines(f), path)


def _metrics_row_kind(record: dict) -> str:
  # Evaluation rows ({"step", "eval/mlm_loss", ...}) share a step with a training row.
  return "eval" if any(key.startswith(EVAL_METRICS_PREFIX) for key in record) else "train"


def read_metrics_log(model_dir: str) -> dict:
  """{step: record} of a training run's metrics.jsonl, a step's training and evaluation
  rows merged; later lines win (a resumed run replays steps); a line cut by a kill is
  skipped. TensorFlow-free, for reports."""
  path = os.path.join(model_dir, METRICS_LOG_FILE)
  records = {}
  if not os.path.exists(path):
    return records
  rows = {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      try:
        record = json.loads(line)
        step = int(record["step"])
      except (ValueError, KeyError, TypeError):
        continue
      rows[(step, _metrics_row_kind(record))] = record
  for (step, _), record in sorted(rows.items(), key=lambda item: item[0][1] != "train"):
    records.setdefault(step, {}).update(record)
  return dict(sorted(records.items()))


def truncate_metrics_log(model_dir: str, last_step: int) -> int:
  """Makes model_dir/metrics.jsonl hold one row per step 1..last_step (and that step's
  evaluation row, if any), in step order.

  A run resumed from the checkpoint of `last_step` would otherwise log the steps after it
  twice (a run killed at step 60 with a checkpoint at 50 re-runs 51..60). Rows after
  `last_step` and lines cut by a kill are dropped; of repeated steps (logs of older
  versions) the last row is kept, as `read_metrics_log` reads them. The file is replaced
  atomically (`atomic_write_text`, gs:// and ram:// too) and only when a row goes.

  Returns:
    The number of lines dropped.
  """
  path = os.path.join(model_dir, METRICS_LOG_FILE)
  if _has_scheme(path):
    gfile = _gfile()
    if not gfile.exists(path):
      return 0
    with gfile.GFile(path, "r") as f:
      text = f.read()
  else:
    if not os.path.exists(path):
      return 0
    with open(path, encoding="utf-8", newline="\n") as f:
      text = f.read()
  lines = text.splitlines(keepends=True)
  rows = {}
  for line in lines:
    try:
      record = json.loads(line)
      step = int(record["step"])
    except (ValueError, KeyError, TypeError):  # a line cut by a kill
      continue
    if line.endswith("\n") and 1 <= step <= last_step:
      rows[(step, _metrics_row_kind(record) != "train")] = line
  kept = [rows[key] for key in sorted(rows)]
  if kept != lines:
    atomic_write_text(path, "".join(kept))
  return len(lines) - len(kept)


def append_metrics_rows(model_dir: str, rows: Sequence[dict]) -> None:
  """Appends `rows` to model_dir/metrics.jsonl, one JSON object a line (ram:// too)."""
  path = os.path.join(model_dir, METRICS_LOG_FILE)
  text = "".join(json.dumps(row) + "\n" for row in rows)
  if _has_scheme(path):
    with _gfile().GFile(path, "a") as f:
      f.write(text)
  else:
    with open(path, "a", encoding="utf-8", newline="\n") as f:
      f.write(text)
