"""The tf.data input pipeline of pretraining: TFRecords (SPEC §8) -> training batches.

    files ─shard by input pipeline─▶ shuffle files ─▶ repeat ─▶ parallel interleave of
    TFRecordDatasets ─▶ (shard by record, only if fewer files than pipelines) ─▶ shuffle ─▶
    batch(drop_remainder) ─▶ parse ─▶ [dynamic masking] ─▶ skip(resume) ─▶ prefetch

Every random choice is seeded by `seed`, and the interleave is deterministic, so a given
seed and pipeline id always yield the same sequence of batches. The training loop relies
on this twice: a distributed run with the same global batch sees the same examples as a
single-device run, and when the iterator itself cannot be checkpointed (distributed
iterators are not trackable in TF 2.21), a restarted run skips the batches it consumed.

Batches are dicts of int32 [B, T] `input_ids`, `input_mask`, `segment_ids`; int32 [B, P]
`masked_lm_positions`, `masked_lm_ids`; float32 [B, P] `masked_lm_weights`; int32 [B]
`next_sentence_labels`. Shapes are static (drop_remainder) as TPUs require.

Bad records: each is read whole or refused (`record_errors` turns what TF raises into
the package's one `InputError`, "path: record N (byte B): what"; read inside
`record_errors.reading_records()`).
  * Framing. Every record travels with its file, 1-based number and byte offset (a scan
    per file), and each file's frames must add up to its size: TF's reader takes a file
    that ends inside a record for a shorter file, the scan does not. A damaged frame is
    TF's DataLossError, located by `tfrecord_frames`. `check_shards` compares every shard
    with the generator's stats.json before the first step (a cut at a record boundary).
  * Schema. The batched parse names each record, so TF's parser names it in its errors;
    bytes that are not a tf.train.Example carry the name in an unused field
    (`schema.with_name_field`).
  * Values, checked in the input graph on every batch (asserts, no host round trip):
    ids in [0, vocab_size), segment ids in [0, type_vocab_size), input_mask and NSP
    labels 0 or 1, masked positions inside the sequence and, where weighted, inside the
    input_mask, weights finite and in [0, 1] (`record_values`; their cost:
    `benchmarks/record_checks.py`).
  * With `skipped` (--skip_bad_records), files are read by `tfrecord_frames.read_frames`
    (Python, both CRCs checked): damaged frames are skipped and counted, every good record
    is read. Schema and value errors still stop the run: they mean the data was made
    wrong, not damaged on its way.
"""

from typing import Dict, Optional

import tensorflow as tf

from recurrent_bert.data import pretraining_records
from recurrent_bert.data import record_errors
from recurrent_bert.data import record_values
from recurrent_bert.data import schema
from recurrent_bert.data import tfrecord_frames
from recurrent_bert.data.pretraining_records import PretrainingDataConfig  # the pipeline's config
from recurrent_bert.data.pretraining_records import check_record_layout  # noqa: F401  (re-exported)
from recurrent_bert.data.pretraining_records import count_records  # noqa: F401  (re-exported)
from recurrent_bert.data.pretraining_records import eval_steps  # noqa: F401  (re-exported)
from recurrent_bert.data.record_errors import CHECK_BEGIN
from recurrent_bert.data.record_errors import CHECK_END


def make_pretraining_dataset(
    config: PretrainingDataConfig,
    batch_size: int,
    input_pipeline_id: int = 0,
    num_input_pipelines: int = 1,
    skip_batches: int = 0,
) -> tf.data.Dataset:
  """Builds the training dataset of one input pipeline.

  Args:
    config: see PretrainingDataConfig.
    batch_size: examples per batch of this pipeline (the per-replica batch size under
      `distribute_datasets_from_function`).
    input_pipeline_id, num_input_pipelines: from `tf.distribute.InputContext`. Files are
      split between pipelines (file i goes to pipeline i mod n); with fewer files than
      pipelines, every pipeline reads all files and keeps every n-th record instead.
    skip_batches: batches to drop at the start (resuming without iterator state).

  Returns:
    An infinite dataset of batches (module docstring), prefetched.
  """
  files = list(config.input_files)
  shard_files = len(files) >= num_input_pipelines
  dataset = _files_and_sizes(config)
  if num_input_pipelines > 1 and shard_files:
    dataset = dataset.shard(num_input_pipelines, input_pipeline_id)
  # Each epoch visits the files in a new (seeded) order.
  dataset = dataset.shuffle(len(files), seed=config.seed, reshuffle_each_iteration=True)
  dataset = dataset.repeat()
  dataset = dataset.interleave(
      lambda path, size: _numbered_records(path, size, config.skipped),
      cycle_length=min(config.cycle_length, len(files)),
      block_length=1,
      num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=True,
  )
  if num_input_pipelines > 1 and not shard_files:
    dataset = dataset.shard(num_input_pipelines, input_pipeline_id)
  dataset = dataset.shuffle(
      config.shuffle_buffer_size, seed=config.seed + 1, reshuffle_each_iteration=True
  )
  dataset = dataset.batch(batch_size, drop_remainder=True)
  dataset = _parse_batches(dataset, config, mask_seed=config.seed + 2 + input_pipeline_id)
  if skip_batches:
    dataset = dataset.skip(skip_batches)
  return dataset.prefetch(tf.data.AUTOTUNE)


def make_eval_dataset(
    config: PretrainingDataConfig,
    batch_size: int,
    num_batches: int,
    input_pipeline_id: int = 0,
    num_input_pipelines: int = 1,
) -> tf.data.Dataset:
  """Held-out records, each once, as exactly `num_batches` full batches of this pipeline.

  Record i goes to pipeline i mod n, in file order, unshuffled. The last batches are filled
  with padding rows (all-zero records) so that every pipeline yields the same number of
  batches of the same static shape, as TPUs and the replicas' collectives need. The
  batches carry, beside the training features, float32 [B] `example_weights`: 1.0 for a
  record, 0.0 for padding (whose `masked_lm_weights` are 0 too), so sums over the
  batches count each record once. Dynamic masks are seeded by `config.seed` alone: every
  evaluation of the same records masks the same positions.

  Args:
    config: see PretrainingDataConfig (shuffle settings are unused).
    batch_size: examples per batch of this pipeline (per replica).
    num_batches: batches to yield (`eval_steps` x replicas fed by this pipeline); with
      fewer records than that, the rest is padding; with more, the tail is not read.
    input_pipeline_id, num_input_pipelines: from `tf.distribute.InputContext`.
  """
  records = _files_and_sizes(config).flat_map(
      lambda path, size: _numbered_records(path, size, config.skipped)
  )
  if num_input_pipelines > 1:
    records = records.shard(num_input_pipelines, input_pipeline_id)
  padding = tf.data.Dataset.from_tensors(
      ("padding", tf.constant(0, tf.int64), tf.constant(0, tf.int64), _padding_record(config))
  ).repeat()
  dataset = records.concatenate(padding)
  dataset = dataset.take(num_batches * batch_size).batch(batch_size, drop_remainder=True)
  return (
      _parse_batches(dataset, config, mask_seed=config.seed)
      .map(_weigh_examples, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
      .prefetch(tf.data.AUTOTUNE)
  )


def _weigh_examples(features):
  # Every record starts with [CLS] (input_mask 1); a padding row's mask is all 0.
  features = dict(features)
  example_weights = tf.cast(features["input_mask"][:, 0], tf.float32)
  features["example_weights"] = example_weights
  features["masked_lm_weights"] *= example_weights[:, None]
  return features


def _padding_record(config: PretrainingDataConfig) -> bytes:
  zeros = {name: [0] * config.max_seq_length for name in ("input_ids", "input_mask", "segment_ids")}
  zeros["next_sentence_labels"] = [0]
  if config.masker is None:
    for name in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights"):
      zeros[name] = [0] * config.max_predictions_per_seq
  return schema.serialize_example(zeros)


_RECORDS_PER_SCAN = 64


def _files_and_sizes(config: PretrainingDataConfig) -> tf.data.Dataset:
  """(path, size in bytes) of each input file: what each file's frames must add up to.

  The files are checked against their stats.json first (`pretraining_records.check_shards`).
  """
  files = list(config.input_files)
  sizes = pretraining_records.check_shards(files, config.skipped)
  record_errors.register(files)
  return tf.data.Dataset.from_tensor_slices((files, tf.constant(sizes, tf.int64)))


def _numbered_records(
    path: tf.Tensor, size: tf.Tensor, skipped: Optional[record_errors.SkippedRecords]
) -> tf.data.Dataset:
  """(path, 1-based record number, byte offset, record) of every record of one file.

  TF's reader, checked: a scan adds up the frames (header, data, CRC), 64 records a
  call, and, after the last record TF gives, asserts they end where the file does (TF
  takes a file that ends inside a record for a shorter one). With `skipped`,
  `tfrecord_frames.read_frames` reads the file instead (Python), skipping and counting
  damaged frames.
  """
  if skipped is not None:
    # Chunks of records per Python call: one call per record costs more than the reading.
    frames = tf.data.Dataset.from_generator(
        lambda name: _frame_chunks(name.decode("utf-8"), skipped.add),
        output_signature=(
            tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None], tf.string),
        ),
        args=(path,),
    )
    return frames.unbatch().map(lambda number, offset, record: (path, number, offset, record))
  framing = tfrecord_frames.HEADER_BYTES + tfrecord_frames.FOOTER_BYTES
  # Added up a chunk of records at a time: one scan call per record would cost more than
  # reading the records does.
  chunks = tf.data.TFRecordDataset(path).batch(_RECORDS_PER_SCAN)
  end = tf.data.Dataset.from_tensors(tf.zeros([0], tf.string))  # the only empty chunk

  def add_up(state, chunk):
    offset, records_read = state  # where the chunk starts; records before it
    count = tf.size(chunk, out_type=tf.int64)
    frames = framing + tf.cast(tf.strings.length(chunk), tf.int64)  # [count] bytes
    # After the last record, `offset` is where TF's reading ended: the end of the file.
    whole = tf.logical_or(count > 0, tf.equal(offset, size))
    message = tf.cond(
        whole,
        lambda: tf.constant(""),
        lambda: tf.strings.join(
            [
                CHECK_BEGIN,
                _record_names(path, records_read + 1, offset),
                ": the file ends inside it (",
                tf.strings.as_string(size - offset),
                " bytes after the last whole record)",
                CHECK_END,
            ]
        ),
    )
    with tf.control_dependencies([tf.debugging.Assert(whole, [message])]):
      offsets = offset + tf.math.cumsum(frames, exclusive=True)
      numbers = records_read + 1 + tf.range(count)
      state = (offset + tf.reduce_sum(frames), records_read + count)
      return state, (tf.fill([count], path), numbers, offsets, chunk)

  start = (tf.constant(0, tf.int64), tf.constant(0, tf.int64))
  return chunks.concatenate(end).scan(start, add_up).unbatch()


def _frame_chunks(path: str, on_bad_record):
  """([numbers], [offsets], [records]) of `tfrecord_frames.read_frames`, 64 at a time."""
  chunk = []
  for frame in tfrecord_frames.read_frames(path, on_bad_record):
    chunk.append(frame)
    if len(chunk) == _RECORDS_PER_SCAN:
      yield tuple(zip(*chunk))
      chunk = []
  if chunk:
    yield tuple(zip(*chunk))


def _record_names(paths: tf.Tensor, numbers: tf.Tensor, offsets: tf.Tensor) -> tf.Tensor:
  """ "path: record N (byte B)" of each record (any shape, the three alike)."""
  return tf.strings.join(
      [
          paths,
          ": record ",
          tf.strings.as_string(numbers),
          " (byte ",
          tf.strings.as_string(offsets),
          ")",
      ]
  )


def _parse_named(
    paths: tf.Tensor,
    numbers: tf.Tensor,
    offsets: tf.Tensor,
    records: tf.Tensor,
    config: PretrainingDataConfig,
) -> Dict[str, tf.Tensor]:
  """A batch of records [B] -> their features, every problem named "path: record N (byte B)"."""
  names = _record_names(paths, numbers, offsets)
  records = schema.with_name_field(records, names)
  seq_len = config.max_seq_length
  if config.masker is None:
    features = schema.parse_pretraining_example(
        records, seq_len, config.max_predictions_per_seq, tf.int64, names=names
    )
    checks = []
  else:
    features = schema.parse_unmasked_example(records, seq_len, tf.int64, names=names)
    # Masked records parse as unmasked ones too, but their input_ids hold [MASK]s already.
    masked = tf.io.parse_example(
        records, {"masked_lm_positions": tf.io.VarLenFeature(tf.int64)}, example_names=names
    )["masked_lm_positions"]
    holds_masks = tf.math.bincount(
        tf.cast(masked.indices[:, 0], tf.int32), minlength=tf.size(names), maxlength=tf.size(names)
    )
    checks = [
        record_values.check(
            tf.equal(holds_masks, 0)[:, None],
            holds_masks[:, None],
            names,
            "holds masked_lm_positions: a masked record among unmasked ones (--dynamic_masking "
            "needs unmasked records only)",
        )
    ]
  # Checked as int64, as stored: a cast first would wrap 2**32 + 5 around to 5.
  checks += record_values.value_checks(
      features,
      names,
      config.max_seq_length,
      vocab_size=config.vocab_size,
      type_vocab_size=config.type_vocab_size,
  )
  with tf.control_dependencies(checks):
    return {
        name: tf.cast(value, tf.int32) if value.dtype == tf.int64 else tf.identity(value)
        for name, value in features.items()
    }


def _parse_batches(
    dataset: tf.data.Dataset, config: PretrainingDataConfig, mask_seed: int
) -> tf.data.Dataset:
  """Batches of (paths, numbers, records) -> the training features (masked now if dynamic)."""
  dataset = dataset.map(
      lambda paths, numbers, offsets, records: _parse_named(
          paths, numbers, offsets, records, config
      ),
      num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=True,
  )
  if config.masker is not None:
    dataset = config.masker.mask_dataset(dataset, seed=mask_seed)
  return dataset.map(_finalize, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _finalize(features):
  """int32 everywhere but the weights; NSP labels [B, 1] -> [B]."""
  out = {}
  for name, value in features.items():
    value = tf.cast(value, tf.float32 if name == "masked_lm_weights" else tf.int32)
    if name == "next_sentence_labels":
      value = tf.reshape(value, [-1])
    out[name] = value
  return out
