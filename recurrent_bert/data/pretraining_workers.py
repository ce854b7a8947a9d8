"""The generator's workers: a chunk of documents -> framed TFRecords, and the pool of them.

Workers (processes, forked where safe, started first so their start-up overlaps the
reading) turn chunks into TFRecord-framed examples without TensorFlow: the native
tokenizer over the whole chunk (WordPiece, or a SentencePiece `.model` through the
`sentencepiece` package), instances as token spans (`pretraining_instances`), then
filling, masking and serialisation by numpy over batches (`ChunkProcessor`). A chunk's
records depend only on its text, the seed and its index, so the output does not depend on
how many workers process the chunks. The Beam pipeline runs the same `ChunkProcessor`.
Masking is `mlm_masking.mask_batch`, the numpy twin of the read-time `dynamic_masking`
function (same rules, checked by the same tests).

Imports stay light (numpy, the standard library; the tokenizer, masking and codec modules
inside the functions that use them): a spawned worker imports this module, and its
start-up is paid once per worker.
"""

import collections
import os
import random
import sys
import time
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from recurrent_bert.data.pretraining_instances import InstanceBuilder
from recurrent_bert.data.pretraining_instances import Span
from recurrent_bert.data.pretraining_instances import fill_instances
from recurrent_bert.data.pretraining_options import GeneratorOptions

_MASK_BATCH_SIZE = 2048


class ChunkProcessor:
  """Turns a chunk of raw documents into framed TFRecords (one process, no TensorFlow).

  Tokenization is the native tokenizer over the whole chunk, instances are spans, and
  filling, masking (`mlm_masking.mask_batch`) and serialisation (`example_codec`) are numpy
  over batches of instances.
  """

  def __init__(self, options: GeneratorOptions):
    from recurrent_bert.data.native_tokenizer import make_native_tokenizer

    self.options = options
    self.tokenizer = make_native_tokenizer(options.vocab_file, options.do_lower_case)
    self.builder = InstanceBuilder(options.max_seq_length, options.short_seq_prob, options.use_nsp)
    # Sentence ends, where a long line is preferably cut (ids absent from the vocab: none).
    self._end_ids = [
        self.tokenizer.token_id(t)
        for t in (".", "!", "?")
        if self.tokenizer.token_id(t) != self.tokenizer.unk_id
    ]
    self.stage_seconds: collections.Counter = collections.Counter()

  def tokenize_documents(
      self, documents: Sequence[Sequence[str]]
  ) -> Tuple[np.ndarray, np.ndarray, List[List[Span]]]:
    """Tokenizes the chunk in one call.

    Returns:
      (ids int32 [tokens], word starts bool [tokens], documents as lists of sentence spans);
      sentences without tokens are dropped, and documents left without sentences.
    """
    flat = [s for document in documents for s in document]
    ids, splits = self.tokenizer.tokenize(flat)
    starts = self.tokenizer.is_word_start[ids]
    bounds = splits.tolist()
    tokenized: List[List[Span]] = []
    cursor = 0
    for document in documents:
      spans = [
          (bounds[k], bounds[k + 1])
          for k in range(cursor, cursor + len(document))
          if bounds[k + 1] > bounds[k]
      ]
      cursor += len(document)
      if spans:
        tokenized.append(spans)
    return ids, starts, tokenized

  def process(
      self, chunk_index: int, documents: List[List[str]], frame: bool = True
  ) -> Tuple[bytes, np.ndarray, Dict[str, int]]:
    """Returns (records in output order, their offsets [n + 1], counters).

    The records are TFRecord-framed (ready to append to a shard) with `frame`, else bare
    serialized tf.train.Examples (for writers that frame them, e.g. Beam's).
    """
    options = self.options
    stats = collections.Counter()
    clock = time.perf_counter()
    ids, starts, tokenized = self.tokenize_documents(documents)
    clock = self._lap("tokenization", clock)
    tokenized = [
        self.builder.split_long_sentences(d, ids, starts, self._end_ids, stats) for d in tokenized
    ]
    stats["documents"] += len(documents)
    stats["documents_without_tokens"] += len(documents) - len(tokenized)
    stats["sentences"] += sum(len(d) for d in documents)
    stats["input_tokens"] += len(ids)
    if len(tokenized) < 2 and options.use_nsp:
      stats["chunks_with_single_document"] += 1
    # Seeded by (seed, chunk): independent of the number of workers.
    rng = random.Random(f"{options.random_seed}:{chunk_index}")
    instances: List[Tuple] = []
    for _ in range(options.dupe_factor):
      for document_index in range(len(tokenized)):
        instances.extend(self.builder.from_document(tokenized, document_index, rng))
    rng.shuffle(instances)
    table = np.array(instances, np.int64).reshape(-1, 6)
    clock = self._lap("instance building", clock)
    framed, offsets = [], [np.zeros(1, np.int64)]
    for batch_index, begin in enumerate(range(0, len(table), _MASK_BATCH_SIZE)):
      data, batch_offsets = self._serialize_batch(
          table[begin : begin + _MASK_BATCH_SIZE],
          ids,
          starts,
          (chunk_index, batch_index),
          stats,
          frame,
      )
      offsets.append(batch_offsets[1:] + sum(len(f) for f in framed))
      framed.append(data)
    return b"".join(framed), np.concatenate(offsets), dict(stats)

  def _lap(self, stage: str, clock: float) -> float:
    now = time.perf_counter()
    self.stage_seconds[stage] += now - clock
    return now

  def _serialize_batch(
      self,
      instances: np.ndarray,
      ids: np.ndarray,
      starts: np.ndarray,
      seed_parts: Tuple[int, int],
      stats: collections.Counter,
      frame: bool,
  ) -> Tuple[bytes, np.ndarray]:
    from recurrent_bert.data import example_codec
    from recurrent_bert.data import mlm_masking

    options = self.options
    clock = time.perf_counter()
    rows = fill_instances(
        instances,
        ids,
        starts,
        options.max_seq_length,
        options.use_nsp,
        self.tokenizer.cls_id,
        self.tokenizer.sep_id,
    )
    n = len(instances)
    stats["instances"] += n
    stats["instance_tokens"] += int(rows["input_mask"].sum())
    stats["truncated_instances"] += int((instances[:, 5] > 0).sum())
    stats["truncated_tokens"] += int(instances[:, 5].sum())
    stats["random_next"] += int(instances[:, 4].sum())
    features = {
        k: rows[k] for k in ("input_ids", "input_mask", "segment_ids", "next_sentence_labels")
    }
    clock = self._lap("instance building", clock)
    floats = {}
    if not options.dynamic_masking:
      chunk_index, batch_index = seed_parts
      # Seeded by (seed, chunk, batch): independent of the number of workers.
      rng = np.random.default_rng([options.random_seed % 2**64, chunk_index, batch_index])
      masked = mlm_masking.mask_batch(
          rows["input_ids"],
          rows["input_mask"],
          rows["word_starts"],
          rng,
          options.masking,
          vocab_size=self.tokenizer.vocab_size,
          mask_id=self.tokenizer.mask_id,
          cls_id=self.tokenizer.cls_id,
          sep_id=self.tokenizer.sep_id,
      )
      real = masked["masked_lm_weights"] > 0
      new_ids = np.take_along_axis(masked["input_ids"], masked["masked_lm_positions"], axis=1)[real]
      old_ids = masked["masked_lm_ids"][real]
      mask_id = self.tokenizer.mask_id
      stats["masked_positions"] += int(real.sum())
      stats["masked_as_mask_token"] += int((new_ids == mask_id).sum())
      stats["masked_kept"] += int((new_ids == old_ids).sum())
      stats["masked_as_random_token"] += int(((new_ids != old_ids) & (new_ids != mask_id)).sum())
      features.update(
          input_ids=masked["input_ids"],
          masked_lm_positions=masked["masked_lm_positions"],
          masked_lm_ids=masked["masked_lm_ids"],
      )
      floats = {"masked_lm_weights": masked["masked_lm_weights"]}
      clock = self._lap("masking", clock)
    data, offsets = example_codec.serialize_examples(features, floats)
    clock = self._lap("serialisation", clock)
    if not frame:
      return data.tobytes(), offsets
    framed = example_codec.frame_records(data, offsets)
    self._lap("framing (CRC)", clock)
    return framed


_WORKER: Optional[ChunkProcessor] = None


def process_age() -> float:
  """Seconds since this process started (its start-up, when called at the end of it)."""
  import psutil

  return max(0.0, time.time() - psutil.Process().create_time())


def _init_worker(options: GeneratorOptions) -> None:
  global _WORKER
  # One tokenizer thread per worker: the workers already use the cores.
  os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
  _WORKER = ChunkProcessor(options)
  _WORKER.stage_seconds["start-up (workers: imports, vocabulary)"] += process_age()


def _process_in_worker(chunk_index: int, documents: List[List[str]]):
  result = _WORKER.process(chunk_index, documents)
  return result + (_drain_stage_seconds(_WORKER),)


def _drain_stage_seconds(processor: ChunkProcessor) -> Dict[str, float]:
  seconds = dict(processor.stage_seconds)
  processor.stage_seconds.clear()
  return seconds


# ------------------------------------------------------------------------------ the pool


def start_pool(options: GeneratorOptions):
  """A pool of options.num_workers processes, each with its ChunkProcessor (`bounded_imap`).

  Args:
    options: GeneratorOptions, handed to every worker.

  Returns:
    The multiprocessing pool; the caller terminates and joins it.
  """
  return _pool_context().Pool(options.num_workers, initializer=_init_worker, initargs=(options,))


def _pool_context():
  """fork where safe: the workers start with this process's imports in milliseconds,
  where spawned ones took 1.5 s each on 2 busy cores (interpreter, imports). Not once
  TensorFlow is loaded (e.g. by a gs:// output, or a caller), which is not fork-safe."""
  import multiprocessing

  if sys.platform.startswith("linux") and "tensorflow" not in sys.modules:
    # What the workers use, imported once here, before the fork.
    import psutil  # noqa: F401
    import sentencepiece  # noqa: F401
    import tokenizers  # noqa: F401

    from recurrent_bert.data import example_codec  # noqa: F401
    from recurrent_bert.data import mlm_masking  # noqa: F401
    from recurrent_bert.data import native_tokenizer  # noqa: F401

    return multiprocessing.get_context("fork")
  return multiprocessing.get_context("spawn")


def bounded_imap(pool, chunks, max_in_flight: int):
  """Like pool.imap over enumerate(chunks), but reads ahead at most max_in_flight chunks."""
  pending = collections.deque()
  for index, (documents, size) in enumerate(chunks):
    pending.append((pool.apply_async(_process_in_worker, (index, documents)), size))
    if len(pending) >= max_in_flight:
      result, result_size = pending.popleft()
      yield result.get(), result_size
  while pending:
    result, result_size = pending.popleft()
    yield result.get(), result_size


def process_chunks_here(
    options: GeneratorOptions, chunks: Iterable[Tuple[List[List[str]], int]]
) -> Iterator[Tuple[Tuple, int]]:
  """What `bounded_imap` yields, from one ChunkProcessor in this process (num_workers 1).

  Args:
    options: GeneratorOptions.
    chunks: (documents, text bytes) per chunk, in order.

  Returns:
    An iterator of ((records, offsets, counters, stage seconds), text bytes) per chunk.
  """
  clock = time.perf_counter()
  processor = ChunkProcessor(options)
  processor.stage_seconds["start-up (workers: imports, vocabulary)"] += time.perf_counter() - clock
  return (
      ((*processor.process(i, docs), _drain_stage_seconds(processor)), size)
      for i, (docs, size) in enumerate(chunks)
  )
