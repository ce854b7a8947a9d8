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
"""

import dataclasses
from typing import Optional, Sequence

import tensorflow as tf

from recurrent_bert.data import schema
from recurrent_bert.io_utils import InputError


@dataclasses.dataclass(frozen=True)
class PretrainingDataConfig:
  """What the pipeline reads and how.

  Attributes:
    input_files: the TFRecord files (already expanded, see `io_utils.expand_input_patterns`).
    max_seq_length, max_predictions_per_seq: the records' schema lengths.
    seed: seeds file order, shuffling and dynamic masks.
    shuffle_buffer_size: examples held by the shuffle buffer.
    cycle_length: files read in parallel by the interleave.
    masker: a `DynamicMasker` for unmasked records (fresh masks every epoch), or None
      for records masked offline.
  """

  input_files: Sequence[str]
  max_seq_length: int
  max_predictions_per_seq: int
  seed: int = 0
  shuffle_buffer_size: int = 1000
  cycle_length: int = 4
  masker: Optional[object] = None


def check_record_layout(path: str, config: PretrainingDataConfig) -> None:
  """Reads the first record of `path` and checks it against the flags.

  Catches the common mistakes (max_seq_length differing from the data's, masked
  records given to --dynamic_masking or the reverse) before the model is built.

  Raises:
    InputError: naming the flag that disagrees with the data.
  """
  try:
    first = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
  except tf.errors.OpError as e:
    raise InputError(f"--input_files: cannot read {path}: {e.message}") from None
  if first is None:
    raise InputError(f"--input_files: {path} holds no records")
  example = tf.train.Example.FromString(first.numpy())
  features = example.features.feature
  seq_len = len(features["input_ids"].int64_list.value) if "input_ids" in features else 0
  if seq_len != config.max_seq_length:
    raise InputError(
        f"--max_seq_length={config.max_seq_length} but {path} holds "
        f"sequences of length {seq_len}"
    )
  has_masks = "masked_lm_positions" in features
  if config.masker is not None and has_masks:
    # Their input_ids already hold [MASK]s: masking again would hide the originals.
    raise InputError(
        f"--dynamic_masking needs unmasked records, but {path} is masked; "
        "make the data with `tools.create_pretraining_data --dynamic_masking` "
        "or drop --dynamic_masking"
    )
  if config.masker is None and not has_masks:
    raise InputError(
        f"{path} holds unmasked records (made with --dynamic_masking); "
        "pass --dynamic_masking (and --vocab_file) to mask them while reading"
    )
  if config.masker is None:
    num_predictions = len(features["masked_lm_positions"].int64_list.value)
    if num_predictions != config.max_predictions_per_seq:
      raise InputError(
          f"--max_predictions_per_seq={config.max_predictions_per_seq} but "
          f"{path} holds {num_predictions} masked positions per sequence"
      )


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
  dataset = tf.data.Dataset.from_tensor_slices(files)
  if num_input_pipelines > 1 and shard_files:
    dataset = dataset.shard(num_input_pipelines, input_pipeline_id)
  # Each epoch visits the files in a new (seeded) order.
  dataset = dataset.shuffle(len(files), seed=config.seed, reshuffle_each_iteration=True)
  dataset = dataset.repeat()
  dataset = dataset.interleave(
      tf.data.TFRecordDataset,
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


def count_records(input_files: Sequence[str]) -> int:
  """Records in the files (held-out sets are small enough to count before evaluating)."""
  dataset = tf.data.TFRecordDataset(list(input_files))
  return int(dataset.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1))


def eval_steps(
    num_records: int, global_batch_size: int, max_input_pipelines: int = 1, max_eval_steps: int = 0
) -> int:
  """Steps that read every record once, however records are split between pipelines.

  With n pipelines, record i going to pipeline i mod n, a pipeline holds at most
  ceil(N / n) records and reads global_batch_size / n per step, so
  ceil((N + n - 1) / global_batch_size) steps cover every pipeline's share for any
  n <= `max_input_pipelines` (at most one step of padding more than n = 1 needs).
  """
  steps = -(-(num_records + max_input_pipelines - 1) // global_batch_size)
  return min(steps, max_eval_steps) if max_eval_steps > 0 else steps


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
  records = tf.data.TFRecordDataset(list(config.input_files))
  if num_input_pipelines > 1:
    records = records.shard(num_input_pipelines, input_pipeline_id)
  padding = tf.data.Dataset.from_tensors(_padding_record(config)).repeat()
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


def _parse_batches(
    dataset: tf.data.Dataset, config: PretrainingDataConfig, mask_seed: int
) -> tf.data.Dataset:
  """Batches of serialized records -> the training features (masked now if dynamic)."""
  if config.masker is None:
    dataset = dataset.map(
        lambda records: schema.parse_pretraining_example(
            records, config.max_seq_length, config.max_predictions_per_seq
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
  else:
    dataset = dataset.map(
        lambda records: schema.parse_unmasked_example(records, config.max_seq_length),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
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
