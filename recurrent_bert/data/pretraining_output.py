"""The pretraining-data generator's output folder: its names, its shard table, its hygiene.

An --output_dir holds `pretraining-SSSSS-of-NNNNN.tfrecord` shards and `stats.json`, and is
replaced as a unit (built beside it, swapped in at the end). So a folder holding files this
tool did not make is refused, and the leftovers of killed runs are cleaned before a run.
`shard_table` is stats.json's per-shard row, which the readers (`pretraining_records`)
check each shard against. Shared by the local tool (`pretraining_data`) and the Beam
pipeline (`beam_pipeline`); no TensorFlow here.
"""

import os
import re
from typing import Dict, List, Optional, Sequence

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert.errors import InputError

STATS_FILE = "stats.json"
SHARD_PATTERN = re.compile(r"pretraining-\d{5}-of-\d{5}\.tfrecord")
# Per-file temp names of earlier versions of this tool (io_utils.temp_path_for).
_OLD_TEMP_PATTERN = re.compile(r"\.(pretraining-\d{5}-of-\d{5}\.tfrecord|stats\.json)\..*\.tmp")


def shard_names(num_shards: int) -> List[str]:
  """pretraining-SSSSS-of-NNNNN.tfrecord, the names of --output_dir shards."""
  return [f"pretraining-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]


def foreign_output_files(names: Sequence[str]) -> List[str]:
  """The names in an output folder this tool did not make (it replaces the folder whole)."""
  return sorted(
      n
      for n in names
      if not (SHARD_PATTERN.fullmatch(n) or n == STATS_FILE or _OLD_TEMP_PATTERN.fullmatch(n))
  )


def check_output_dir(output_dir: str, names: Sequence[str]) -> None:
  """Raises InputError naming the files of `names` (output_dir's listing) not made here."""
  foreign = foreign_output_files(names)
  if foreign:
    shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    raise InputError(
        f"--output_dir {output_dir!r} holds files this tool did not make ({shown}); it "
        "replaces the folder as a unit: move them or give another --output_dir"
    )


def prepare_output_dir(output_dir: str) -> List[str]:
  """Checks a local or scheme (gs://) --output_dir and cleans leftovers of killed runs.

  Returns:
    What was cleaned (io_utils.clean_atomic_directory_leftovers), for a log line.
  """
  if layout.has_scheme(output_dir):
    gfile = layout.gfile()
    if gfile.exists(output_dir):
      if not gfile.isdir(output_dir):
        raise InputError(f"--output_dir {output_dir!r} is not a directory")
      check_output_dir(output_dir, [n.rstrip("/") for n in gfile.listdir(output_dir)])
  elif os.path.exists(output_dir):
    if not os.path.isdir(output_dir):
      raise InputError(f"--output_dir {output_dir!r} is not a directory")
    check_output_dir(output_dir, os.listdir(output_dir))
  return io_utils.clean_atomic_directory_leftovers(output_dir)


def shard_table(names: Sequence[str], sizes: Sequence[int], instances: Optional[int]) -> List[Dict]:
  """stats.json's "shards": [{"file": name, "bytes": size, "records": n}] per shard.

  The readers check each shard's size against it before training (a cut shard reads
  as a shorter one). `instances` None: records per shard unknown (Beam's writer
  spreads them as it likes); otherwise instance k went to shard k mod n
  (`pretraining_data._generate`).
  """
  num_shards = len(names)
  table = []
  for i, (name, size) in enumerate(zip(names, sizes)):
    row = {"file": name, "bytes": int(size)}
    if instances is not None:
      row["records"] = instances // num_shards + (1 if i < instances % num_shards else 0)
    table.append(row)
  return table
