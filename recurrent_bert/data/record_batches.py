"""Training batches of pretraining records without TensorFlow: shuffled, masked, resumable.

What `pretraining_dataset.make_pretraining_dataset` is to the TensorFlow loop, this is to
the JAX loop (training/jax_loop.py): an endless stream of batches of the records, each
epoch in a new seeded order, masked at read time when the records are unmasked
(--dynamic_masking). The records' framing, CRCs, schema and values are checked by
`pretraining_records`, with the same one-line errors.

Order: epoch e visits the files in the permutation drawn from seed (seed, e), each file's
records in file order, through a shuffle buffer of `shuffle_buffer_size` records drawn
from seed (seed + 1). Batch k is masked with the numpy Generator of seed (seed + 2, k), so
a batch's masks depend on its index alone: a resumed run skips `skip_batches` batches
without decoding or masking them and then reads exactly what the uninterrupted run read.

With one file and a shuffle buffer of 1 the records come in file order, as they do from
`tf.data` with the same settings; otherwise the two readers' orders and masks differ
(their random streams do), while the rules (`mlm_masking.mask_batch`, the
`dynamic_masking` rules) are the same.

Batches are the dicts of `pretraining_records.batches` (masked features included).
This module imports no TensorFlow.
"""

import dataclasses
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np

from recurrent_bert.data import mlm_masking
from recurrent_bert.data import pretraining_records
from recurrent_bert.data import tfrecord_frames
from recurrent_bert.data.pretraining_records import PretrainingDataConfig
from recurrent_bert.data.vocab import Vocabulary
from recurrent_bert.errors import InputError


@dataclasses.dataclass(frozen=True)
class BatchMasker:
  """BERT's masking of a batch of unmasked records in numpy (`mlm_masking.mask_batch`),
  the TF-free twin of `dynamic_masking.DynamicMasker` (same recipe, same vocabulary ids).

  Attributes:
    config: the masking recipe.
    vocab_size, mask_id, cls_id, sep_id: from the vocabulary.
    word_starts: bool [vocab_size], False for pieces that continue a word.
  """

  config: mlm_masking.MaskingConfig
  vocab_size: int
  mask_id: int
  cls_id: int
  sep_id: int
  word_starts: np.ndarray

  @classmethod
  def from_vocabulary(cls, config: mlm_masking.MaskingConfig, vocab: Vocabulary) -> "BatchMasker":
    return cls(
        config,
        vocab.vocab_size,
        vocab.mask_id,
        vocab.cls_id,
        vocab.sep_id,
        np.asarray(vocab.word_starts, bool),
    )

  def __call__(self, batch: Dict[str, np.ndarray], rng: np.random.Generator):
    """`batch` (int32 [B, T] input_ids, input_mask, ...) with input_ids masked and int32
    masked_lm_positions, masked_lm_ids, float32 masked_lm_weights [B, P] added."""
    ids = batch["input_ids"]
    # Ids past the vocabulary (a model with a larger vocab_size) start words.
    starts = np.ones(ids.shape, bool)
    known = ids < len(self.word_starts)
    starts[known] = self.word_starts[ids[known]]
    masked = mlm_masking.mask_batch(
        ids,
        batch["input_mask"],
        starts,
        rng,
        self.config,
        vocab_size=self.vocab_size,
        mask_id=self.mask_id,
        cls_id=self.cls_id,
        sep_id=self.sep_id,
    )
    out = dict(batch)
    out["input_ids"] = masked["input_ids"].astype(np.int32)
    out["masked_lm_positions"] = masked["masked_lm_positions"].astype(np.int32)
    out["masked_lm_ids"] = masked["masked_lm_ids"].astype(np.int32)
    out["masked_lm_weights"] = masked["masked_lm_weights"].astype(np.float32)
    return out


def _epoch_frames(
    config: PretrainingDataConfig, epoch: int, shard: Tuple[int, int]
) -> Iterator[Tuple[str, bytes]]:
  """(record name, record bytes) of one epoch: files in this epoch's order, record i of
  the epoch going to shard i mod n (`shard` = (index, n))."""
  index, count = shard
  files = list(config.input_files)
  order = np.random.default_rng([config.seed, epoch]).permutation(len(files))
  position = 0
  for i in order:
    path = files[i]
    for number, offset, data in tfrecord_frames.read_frames(path, config.on_bad_record):
      if position % count == index:
        yield tfrecord_frames.record_name(path, number, offset), data
      position += 1


def _shuffled(frames: Iterator[Tuple[str, bytes]], buffer_size: int, seed: int):
  """`frames` through a shuffle buffer: each comes out after a random earlier one."""
  rng = np.random.default_rng(seed)
  buffer: List[Tuple[str, bytes]] = []
  for frame in frames:
    if len(buffer) < buffer_size:
      buffer.append(frame)
      continue
    i = int(rng.integers(buffer_size))
    yield buffer[i]
    buffer[i] = frame
  while buffer:
    yield buffer.pop(int(rng.integers(len(buffer))))


def training_batches(
    config: PretrainingDataConfig,
    batch_size: int,
    masker: Optional[BatchMasker] = None,
    skip_batches: int = 0,
    shard: Tuple[int, int] = (0, 1),
) -> Iterator[Dict[str, np.ndarray]]:
  """The endless stream of training batches (module docstring).

  Args:
    config: the records and their schema (`config.masker` is the TensorFlow reader's and
      is not read here).
    batch_size: records per batch.
    masker: masks unmasked records (--dynamic_masking); None for records masked offline.
    skip_batches: batches to pass over first (a resumed run's consumed batches).
    shard: (index, count): this process keeps record i of each epoch when i mod count ==
      index (several hosts reading the same files).

  Raises:
    InputError: a damaged record or one that is not the schema's (file and record
      named), or no record at all in the files.
  """
  pretraining_records.check_shards(config.input_files, config.skipped)
  layout = pretraining_records.feature_layout(
      config.max_seq_length, None if masker is not None else config.max_predictions_per_seq
  )
  rules = pretraining_records.value_rules(
      config.max_seq_length, config.vocab_size, config.type_vocab_size
  )

  def frames():
    epoch = 0
    while True:
      empty = True
      for frame in _epoch_frames(config, epoch, shard):
        empty = False
        yield frame
      if empty:
        raise InputError(f"no record to train on in {', '.join(config.input_files)}")
      epoch += 1

  stream = _shuffled(frames(), max(1, config.shuffle_buffer_size), config.seed + 1)
  index = 0
  while True:
    rows = [next(stream) for _ in range(batch_size)]
    if index >= skip_batches:
      names = [name for name, _ in rows]
      parsed = [pretraining_records.parse_record(name, data, layout) for name, data in rows]
      batch = pretraining_records.stack_batch(parsed, names, layout, rules)
      if masker is not None:
        batch = masker(batch, np.random.default_rng([config.seed + 2, index]))
      yield batch
    index += 1
