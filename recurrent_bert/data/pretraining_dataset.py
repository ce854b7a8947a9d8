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

Bad records. Every record travels with its file and 1-based number (a zip per file, no
per-record function), and the batched parse names each record "path: record N": TF's
parser then names it in its own errors (a missing feature, a wrong length or type), bytes
that are not a `tf.train.Example` carry the name in an unused field the error quotes
(`schema.with_name_field`), and the in-graph checks of values assert with the name.
`record_error` turns any of these errors, or a reader's "corrupted/truncated record at
OFFSET" (located by walking the files' frames), into one `InputError` line
"path: record N: what". Before any of that, `check_shards` compares every shard with the
stats.json the generator wrote beside it (its byte size: O(1); older stats.json files
without sizes: its record count), so a shard cut short is refused before the first step.
"""

import dataclasses
import json
import os
import re
import struct
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from google.protobuf import message
import tensorflow as tf

from recurrent_bert.data import example_codec
from recurrent_bert.data import pretraining_data
from recurrent_bert.data import schema
from recurrent_bert.errors import at
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
  records given to --dynamic_masking or the reverse) before the model is built, and
  checks every file of `config.input_files` against its stats.json (`check_shards`).

  Raises:
    InputError: naming the flag that disagrees with the data, or the shard cut short.
  """
  check_shards(config.input_files)
  try:
    first = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
  except tf.errors.OpError as e:
    raise InputError(f"--input_files: cannot read {path}: {e.message}") from None
  if first is None:
    raise InputError(f"--input_files: {path} holds no records")
  try:
    example = tf.train.Example.FromString(first.numpy())
  except message.DecodeError:
    raise InputError(f"{at(path, record=1)}: {_NOT_AN_EXAMPLE}") from None
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
  _register(files)
  shard_files = len(files) >= num_input_pipelines
  dataset = tf.data.Dataset.from_tensor_slices(files)
  if num_input_pipelines > 1 and shard_files:
    dataset = dataset.shard(num_input_pipelines, input_pipeline_id)
  # Each epoch visits the files in a new (seeded) order.
  dataset = dataset.shuffle(len(files), seed=config.seed, reshuffle_each_iteration=True)
  dataset = dataset.repeat()
  dataset = dataset.interleave(
      _numbered_records,
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
  """Records in the files (held-out sets are small enough to count before evaluating).

  Raises:
    InputError: a file is damaged or cut inside a record (file and record named).
  """
  _register(input_files)
  dataset = tf.data.TFRecordDataset(list(input_files))
  try:
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1))
  except tf.errors.DataLossError as e:
    raise (record_error(e) or e) from None


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
  _register(config.input_files)
  records = tf.data.Dataset.from_tensor_slices(list(config.input_files)).flat_map(_numbered_records)
  if num_input_pipelines > 1:
    records = records.shard(num_input_pipelines, input_pipeline_id)
  padding = tf.data.Dataset.from_tensors(
      ("padding", tf.constant(0, tf.int64), _padding_record(config))
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


def _numbered_records(path: tf.Tensor) -> tf.data.Dataset:
  """(path, 1-based record number, record) of one file: a zip, no function per record."""
  return tf.data.Dataset.zip(
      (
          tf.data.Dataset.from_tensors(path).repeat(),
          tf.data.Dataset.range(1, sys.maxsize),
          tf.data.TFRecordDataset(path),
      )
  )


# Brackets the "path: record N: what" of the in-graph checks' assertion messages.
_CHECK_BEGIN, _CHECK_END = "<<bad pretraining record>>", "<<end>>"


def _check_rows(ok: tf.Tensor, names: tf.Tensor, what: str) -> List[tf.Operation]:
  """Asserts every row of the batch is `ok` [B]; the error names the first bad record."""
  first_bad = tf.argmin(tf.cast(ok, tf.int32))
  return [
      tf.debugging.Assert(
          tf.reduce_all(ok),
          [tf.strings.join([_CHECK_BEGIN, tf.gather(names, first_bad), ": ", what, _CHECK_END])],
      )
  ]


def _parse_named(
    paths: tf.Tensor, numbers: tf.Tensor, records: tf.Tensor, config: PretrainingDataConfig
) -> Dict[str, tf.Tensor]:
  """A batch of records [B] -> their features, every problem named "path: record N"."""
  names = tf.strings.join([paths, ": record ", tf.strings.as_string(numbers)])
  records = schema.with_name_field(records, names)
  seq_len = config.max_seq_length
  if config.masker is None:
    features = schema.parse_pretraining_example(
        records, seq_len, config.max_predictions_per_seq, names=names
    )
    positions = features["masked_lm_positions"]
    checks = _check_rows(
        tf.reduce_all((positions >= 0) & (positions < seq_len), axis=1),
        names,
        f"masked_lm_positions outside [0, {seq_len})",
    )
  else:
    features = schema.parse_unmasked_example(records, seq_len, names=names)
    # Masked records parse as unmasked ones too, but their input_ids hold [MASK]s already.
    masked = tf.io.parse_example(
        records, {"masked_lm_positions": tf.io.VarLenFeature(tf.int64)}, example_names=names
    )["masked_lm_positions"]
    holds_masks = tf.math.bincount(
        tf.cast(masked.indices[:, 0], tf.int32), minlength=tf.size(names), maxlength=tf.size(names)
    )
    checks = _check_rows(
        tf.equal(holds_masks, 0),
        names,
        "holds masked_lm_positions: a masked record among unmasked ones (--dynamic_masking "
        "needs unmasked records only)",
    )
  binary = tf.concat(
      [features["input_mask"], features["segment_ids"], features["next_sentence_labels"]], axis=1
  )
  checks += _check_rows(
      tf.reduce_all((binary == 0) | (binary == 1), axis=1),
      names,
      "input_mask, segment_ids and next_sentence_labels must be 0 or 1",
  )
  checks += _check_rows(
      tf.reduce_all(features["input_ids"] >= 0, axis=1), names, "negative input_ids"
  )
  with tf.control_dependencies(checks):
    return {name: tf.identity(value) for name, value in features.items()}


def _parse_batches(
    dataset: tf.data.Dataset, config: PretrainingDataConfig, mask_seed: int
) -> tf.data.Dataset:
  """Batches of (paths, numbers, records) -> the training features (masked now if dynamic)."""
  dataset = dataset.map(
      lambda paths, numbers, records: _parse_named(paths, numbers, records, config),
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


# ------------------------------------------------------------------------ bad records

_NOT_AN_EXAMPLE = "not a tf.train.Example (its bytes do not parse as one)"
_REMAKE = "make the records again with `python -m tools.create_pretraining_data`"
# Every file a pipeline of this process reads, the latest last: where a reader's error
# (which names an offset, not a file) is looked for, the latest first.
_FILES_READ: Dict[str, None] = {}


def _register(paths: Sequence[str]) -> None:
  for path in paths:
    _FILES_READ.pop(path, None)
    _FILES_READ[path] = None


# What TF's parser says after "Name: path: record N, " -> what the error says.
_PARSER_ERRORS = (
    (
        re.compile(
            r"Key: (\w+), Index: \d+\.\s+Number of \w+ values != expected\.\s+"
            r"Values size: (\d+) but output shape: \[(\d+)\]"
        ),
        "feature {0!r} has {1} values, expected {2}",
    ),
    (
        re.compile(
            r"Key: (\w+), Index: \d+\.\s+Data types don't match\.\s+"
            r"Data type: (\w+) but expected type: (\w+)"
        ),
        "feature {0!r} holds {1} values, expected {2}",
    ),
    (
        re.compile(r"Feature: (\w+) \(data type: (\w+)\) is required but could not be found"),
        "feature {0!r} ({1}) is missing",
    ),
)
_NAMED = re.compile(r"Name: (.*?: record \d+), (.*?)(?:\n|\t|\[\[|$)", re.S)
_CHECKED = re.compile(re.escape(_CHECK_BEGIN) + r"(.*?)" + re.escape(_CHECK_END), re.S)
_QUOTED = b"Could not parse example input, value: '"
_READER = re.compile(r"(corrupted|truncated) record at (\d+)")


def record_error(error: BaseException) -> Optional[InputError]:
  """The InputError "path: record N: what" for an error raised reading pretraining records.

  Args:
    error: what iterating a dataset of this module raised: an InvalidArgumentError of the
      parser or of the checks, a UnicodeDecodeError (TF's message quoting bytes that are
      not an Example is not UTF-8), or a reader's DataLossError.

  Returns:
    The InputError, or None when `error` is not about a record (a bug: re-raise it).
  """
  if isinstance(error, UnicodeDecodeError):
    data = error.object if isinstance(error.object, bytes) else bytes(error.object)
  elif isinstance(error, tf.errors.OpError):
    data = error.message.encode("utf-8")
  else:
    return None
  if _QUOTED in data:
    name = schema.read_name_field(data[data.index(_QUOTED) + len(_QUOTED) :])
    if name is not None:
      return InputError(f"{name}: {_NOT_AN_EXAMPLE}; {_REMAKE}")
  text = data.decode("utf-8", "replace")
  checked = _CHECKED.search(text)
  if checked:
    return InputError(f"{checked.group(1)}; {_REMAKE}")
  named = _NAMED.search(text)
  if named:
    name, what = named.group(1), named.group(2).strip()
    for pattern, template in _PARSER_ERRORS:
      found = pattern.search(what)
      if found:
        what = template.format(*found.groups())
        break
    return InputError(f"{name}: {what}; {_REMAKE}")
  reader = _READER.search(text)
  if reader and isinstance(error, tf.errors.DataLossError):
    # TF names the offset of the record's data (a bad header: of the record itself).
    offset = int(reader.group(2))
    return _locate_damage(list(reversed(_FILES_READ)), (offset - _HEADER_BYTES, offset))
  if isinstance(error, tf.errors.InvalidArgumentError) and "Unsupported datatype" in text:
    # The fast parser's one error that names no example: a feature with no value list.
    return _locate_empty_feature(list(reversed(_FILES_READ)))
  return None


def _locate_empty_feature(paths: Sequence[str]) -> Optional[InputError]:
  """The first record of `paths` holding a feature without a value list, found after the
  fact (the run has stopped; reading the files again costs nothing that matters)."""
  for path in paths:
    for number, record in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator(), 1):
      try:
        features = tf.train.Example.FromString(record).features.feature
      except message.DecodeError:
        return InputError(f"{path}: record {number}: {_NOT_AN_EXAMPLE}; {_REMAKE}")
      for name, feature in features.items():
        if feature.WhichOneof("kind") is None:
          return InputError(
              f"{path}: record {number}: feature {name!r} holds no value list; {_REMAKE}"
          )
  return None


_HEADER_BYTES, _FOOTER_BYTES = 12, 4  # length (8) + its CRC (4); the data's CRC (4)


@dataclasses.dataclass(frozen=True)
class _Frames:
  """What walking a TFRecord file's frames found (headers only; data CRCs unchecked).

  Attributes:
    records: whole records before `end`.
    end: the offset the walk stopped at.
    problem: "" when the file ends cleanly at `end`; else what is wrong with record
      `records + 1`, which starts there.
  """

  records: int
  end: int
  problem: str


def _walk_frames(path: str, stop_at: Optional[int] = None) -> _Frames:
  """Walks the frames of `path` (to its end, or to the first frame at or past `stop_at`)."""
  size = tf.io.gfile.stat(path).length
  position, records = 0, 0
  with tf.io.gfile.GFile(path, "rb") as f:
    while position < size and (stop_at is None or position < stop_at):
      problem, end = _frame_problem(f, position, size, check_data=False)
      if problem:
        return _Frames(records, position, problem)
      position, records = end, records + 1
  return _Frames(records, position, "")


def _frame_problem(f, start: int, size: int, check_data: bool = True) -> Tuple[str, int]:
  """(what is wrong with the frame at `start` of the open file `f` or "", where it ends).

  Headers only unless `check_data`: walking a file then costs a seek per record.
  """
  f.seek(start)
  header = f.read(_HEADER_BYTES)
  if len(header) < _HEADER_BYTES:
    return f"the file ends inside its header ({len(header)} bytes)", size
  length, length_crc = struct.unpack("<QI", header)
  if example_codec.masked_crc(header[:8]) != length_crc:
    return "its header is corrupted (checksum mismatch)", size
  end = start + _HEADER_BYTES + length + _FOOTER_BYTES
  if end > size:
    return f"the file ends inside it ({size - start} of its {end - start} bytes)", size
  if check_data:
    data = f.read(length)
    if example_codec.masked_crc(data) != struct.unpack("<I", f.read(_FOOTER_BYTES))[0]:
      return "its data is corrupted (checksum mismatch)", end
  return "", end


def _locate_damage(paths: Sequence[str], offsets: Sequence[int]) -> Optional[InputError]:
  """The first damaged record of `paths` that starts at one of `offsets`."""
  for path in paths:
    if not tf.io.gfile.exists(path):
      continue
    size = tf.io.gfile.stat(path).length
    for start in offsets:
      frames = _walk_frames(path, stop_at=start)
      if frames.end != start or start >= size:
        continue
      with tf.io.gfile.GFile(path, "rb") as f:
        problem, _ = _frame_problem(f, start, size)
      if problem:
        return InputError(
            f"{at(path, record=frames.records + 1)} (byte {start}): {problem}; {_REMAKE}"
        )
  return None


def check_shards(input_files: Sequence[str]) -> None:
  """Compares each file with the stats.json the generator wrote beside it, if any.

  A shard cut between two records, or inside a record's header, reads as a shorter
  shard without any error from TF; its size (or, for stats.json files written before
  the sizes were, its record count) tells. Files without a stats.json beside them, or
  not named in it, are not checked.

  Raises:
    InputError: "shard: expected N records (B bytes) as stats.json says, found ...".
  """
  stats_by_dir: Dict[str, Optional[dict]] = {}
  for path in input_files:
    directory = os.path.dirname(path)
    if directory not in stats_by_dir:
      stats_by_dir[directory] = _read_stats(os.path.join(directory, pretraining_data.STATS_FILE))
    stats = stats_by_dir[directory]
    if stats is None:
      continue
    expected = _expected_shard(stats, os.path.basename(path))
    if expected is None:
      continue
    size = tf.io.gfile.stat(path).length
    if expected.get("bytes") == size:
      continue
    frames = _walk_frames(path)
    if "bytes" not in expected and not frames.problem and frames.records == expected["records"]:
      continue
    want = [f"{expected['records']} records"] if "records" in expected else []
    want += [f"{expected['bytes']} bytes"] if "bytes" in expected else []
    found = f"{frames.records} whole records, {size} bytes"
    if frames.problem:
      found += f"; record {frames.records + 1} (byte {frames.end}): {frames.problem}"
    stats_path = os.path.join(os.path.dirname(path), pretraining_data.STATS_FILE)
    raise InputError(
        f"{path}: expected {' and '.join(want)} (as {stats_path} says), found {found}: the "
        f"shard is cut short or was changed; copy it again or {_REMAKE}"
    )


def _read_stats(path: str) -> Optional[dict]:
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path, "r") as f:
      stats = json.load(f)
  except (ValueError, UnicodeDecodeError) as e:
    raise InputError(f"{path}: not the generator's stats JSON ({e}); {_REMAKE}") from None
  return stats if isinstance(stats, dict) else None


def _expected_shard(stats: dict, name: str) -> Optional[dict]:
  """{"records": n, "bytes": b} (either may be absent) stats.json says `name` holds."""
  for row in stats.get("shards") or ():
    if isinstance(row, dict) and row.get("file") == name:
      return {k: row[k] for k in ("records", "bytes") if isinstance(row.get(k), int)} or None
  num_shards, instances = stats.get("num_output_shards"), stats.get("instances")
  if "shards" in stats or not isinstance(num_shards, int) or not isinstance(instances, int):
    return None
  # An older stats.json: the local generator put instance k in shard k mod n; Beam's
  # writer spreads records as it likes, so its shards cannot be checked one by one.
  if str(stats.get("runner", "")).startswith("beam") or num_shards < 1:
    return None
  names = pretraining_data.shard_names(num_shards)
  if name not in names:
    return None
  table = pretraining_data.shard_table(names, [0] * num_shards, instances)
  return {"records": table[names.index(name)]["records"]}
