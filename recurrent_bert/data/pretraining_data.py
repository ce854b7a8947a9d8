"""Raw text -> pretraining instances -> TFRecord shards (google-research/bert semantics).

Input: one sentence per line, a blank line between documents (the end of a file also ends
a document). Output: TFRecords in the SPEC §8 schema (`schema.py`).

This module is the local tool's driver, `create_pretraining_data`; the parts it ties
together each have their module:
- `pretraining_options`: GeneratorOptions, the settings of a run;
- `pretraining_corpus`: lines -> documents -> chunks (and where "random next" comes from);
- `pretraining_instances`: BERT's instance rules (NSP pairs, packing, truncation, long
  lines) over token spans;
- `pretraining_workers`: `ChunkProcessor` (tokenize, build, mask, serialise a chunk) and the
  process pool that runs it;
- `pretraining_output`: shard names, the shard table, the --output_dir checks and clean-up;
- `pretraining_stats`: the stats dict (stats.json) and its printed report.

Streaming and parallelism. The main process reads the input once, line by line, and cuts
it into *chunks* of whole documents (about `chunk_bytes` of text each). A chunk is the unit
of work: its instances depend only on its text, the seed and its index, so the output does
not depend on how many workers process the chunks. Workers (`pretraining_workers`) turn
chunks into TFRecord-framed examples without TensorFlow. The main
process appends them to the shards in chunk order, instance k of the run going to shard
k mod num_output_shards. At most 2 * num_workers chunks are in flight, so memory is flat in
the corpus size. The stats report the seconds spent per stage (`stage_seconds`).
"""

import collections
import contextlib
import os
import sys
import time
from typing import Dict, Iterator, Sequence, Tuple

from recurrent_bert import io_utils
from recurrent_bert.data.pretraining_corpus import iter_chunks
from recurrent_bert.data.pretraining_corpus import iter_documents
from recurrent_bert.data.pretraining_options import GeneratorOptions
from recurrent_bert.data.pretraining_output import STATS_FILE
from recurrent_bert.data.pretraining_output import prepare_output_dir
from recurrent_bert.data.pretraining_output import shard_table
from recurrent_bert.data.pretraining_stats import summarize
from recurrent_bert.data.pretraining_workers import bounded_imap
from recurrent_bert.data.pretraining_workers import process_age
from recurrent_bert.data.pretraining_workers import process_chunks_here
from recurrent_bert.data.pretraining_workers import start_pool
from recurrent_bert.errors import InputError


def _file_size(path: str) -> int:
  if "://" in path:
    import tensorflow as tf

    return tf.io.gfile.stat(path).length
  return os.path.getsize(path)


def create_pretraining_data(options: GeneratorOptions) -> Dict:
  """Runs the whole generator: reads, builds, masks, writes shards and the stats JSON.

  Args:
    options: GeneratorOptions (input files already expanded, output shard paths).

  Returns:
    The stats dict (also written as JSON to options.stats_file when set).

  Raises:
    InputError: unreadable or non-UTF-8 input (file and line named), a vocabulary
      without the reserved tokens, or an input without any document.
  """
  from recurrent_bert.data.vocab import read_vocabulary

  options.validate()
  read_vocabulary(options.vocab_file)  # fail before any work on a bad vocabulary
  total_bytes = sum(os.path.getsize(p) for p in options.input_files)
  if options.output_dir:
    for cleaned in prepare_output_dir(options.output_dir):
      print(f"removed the leftover of a killed run: {cleaned}", file=sys.stderr)
    staging = io_utils.atomic_directory(options.output_dir)
  else:
    staging = contextlib.nullcontext(None)
  start = time.time()
  startup = process_age()
  with staging as stage_dir:
    if stage_dir is None:  # explicit --output_files: each file is replaced atomically
      with contextlib.ExitStack() as stack:
        written = [stack.enter_context(io_utils.atomic_output(p)) for p in options.output_files]
        counters, text_bytes = _generate(options, written, total_bytes, start)
        sizes = [_file_size(p) for p in written]
    else:  # the whole folder is staged: nobody reads it before the swap
      written = [os.path.join(stage_dir, os.path.basename(p)) for p in options.output_files]
      counters, text_bytes = _generate(options, written, total_bytes, start)
      sizes = [_file_size(p) for p in written]
    shards = shard_table(
        [os.path.basename(p) for p in options.output_files], sizes, counters["instances"]
    )
    stats = summarize(counters, options, time.time() - start, text_bytes, shards)
    stats["stage_seconds"]["start-up (main: imports, flags, checks)"] = round(startup, 3)
    if stage_dir is not None:
      io_utils.atomic_write_json(os.path.join(stage_dir, STATS_FILE), stats)
  if stage_dir is None and options.stats_file:
    io_utils.atomic_write_json(options.stats_file, stats)
  return stats


def _generate(
    options: GeneratorOptions, paths: Sequence[str], total_bytes: int, start: float
) -> Tuple[collections.Counter, int]:
  """Writes the shards to `paths`; returns (counters, text bytes read).

  Counters named "seconds STAGE" hold the per-stage profile (worker stages summed over
  workers: CPU-ish seconds, not wall).
  """
  num_shards = len(paths)
  counters: collections.Counter = collections.Counter()
  pool = None
  progress = None
  text_bytes = 0
  writers = []
  try:
    if options.num_workers > 1:
      # First, so the workers start up while this process reads the input.
      pool = start_pool(options)
    writers = [io_utils.open_for_write(p) for p in paths]
    if options.show_progress:
      from tqdm import tqdm

      progress = tqdm(
          total=total_bytes,
          unit="B",
          unit_scale=True,
          smoothing=0.1,
          desc="create_pretraining_data",
          dynamic_ncols=True,
      )
    chunks = _timed(
        iter_chunks(iter_documents(options.input_files), options.chunk_bytes),
        counters,
        "seconds reading",
    )
    if pool is None:
      results = process_chunks_here(options, chunks)
    else:
      results = bounded_imap(pool, chunks, 2 * options.num_workers)
    written = 0
    for (framed, offsets, chunk_stats, seconds), size in results:
      clock = time.perf_counter()
      counters.update(chunk_stats)
      counters.update({f"seconds {k}": v for k, v in seconds.items()})
      counters["chunks"] += 1
      records = len(offsets) - 1
      view = memoryview(framed)
      if num_shards == 1:
        writers[0].write(view)
      else:  # instance k of the run goes to shard k mod num_shards
        bounds = offsets.tolist()
        for k in range(min(num_shards, records)):
          first = (k - written) % num_shards
          writers[(written + first) % num_shards].write(
              b"".join(view[bounds[i] : bounds[i + 1]] for i in range(first, records, num_shards))
          )
      written += records
      text_bytes += size
      counters["seconds writing"] += time.perf_counter() - clock
      if progress is not None:
        progress.update(min(size, total_bytes - progress.n))
        elapsed = max(time.time() - start, 1e-9)
        progress.set_postfix(
            docs=counters["documents"],
            docs_per_s=f"{counters['documents'] / elapsed:.0f}",
            instances=written,
            refresh=False,
        )
    if counters["documents"] - counters["documents_without_tokens"] == 0:
      raise InputError(
          "the input has no document with any text: "
          + ", ".join(options.input_files)
          + " (expected one sentence per line, a blank line between documents)"
      )
  finally:
    for writer in writers:
      writer.close()
    if progress is not None:
      progress.close()
    if pool is not None:
      pool.terminate()
      pool.join()
  return counters, text_bytes


def _timed(iterator: Iterator, counters: collections.Counter, key: str) -> Iterator:
  """Yields from iterator, adding the time spent producing each item to counters[key]."""
  while True:
    clock = time.perf_counter()
    try:
      item = next(iterator)
    except StopIteration:
      return
    finally:
      counters[key] += time.perf_counter() - clock
    yield item
