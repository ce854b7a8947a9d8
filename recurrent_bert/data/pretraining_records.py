"""Pretraining records without TensorFlow: their layout, their rules, and a numpy reader.

The TF-free half of reading SPEC §8's records, for processes that have no TensorFlow (JAX
or PyTorch on a GPU machine) and as the spec the `tf.data` pipeline is tested against:

  * `feature_layout`: each feature's length and type, from which `schema` builds the
    tf.io feature specs (one table for both readers);
  * `value_rules`: what a value may be (ids below vocab_size, 0/1 masks and labels, ...),
    evaluated in numpy here and in the input graph by `record_values`;
  * `decode_example` (`example_decoder`): tf.train.Example read by protobuf's own
    parser, through a descriptor built there (TensorFlow's generated classes are not
    needed);
  * `check_shards`: each shard against the generator's stats.json;
  * `batches`: every record of the files in file order, framed and CRC-checked by
    `tfrecord_frames`, decoded a batch at a time, checked; bad input raises the same
    InputError line as the `tf.data` pipeline: "path: record N (byte B): what".

Batches are dicts of int32 [B, T] `input_ids`, `input_mask`, `segment_ids`; int32 [B, P]
`masked_lm_positions`, `masked_lm_ids`; float32 [B, P] `masked_lm_weights`; int32 [B]
`next_sentence_labels` (masked records; unmasked ones have the first three and the label).
"""

import dataclasses
import json
import os
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from recurrent_bert.data import example_decoder
from recurrent_bert.data import pretraining_output
from recurrent_bert.data import tfrecord_frames
from recurrent_bert.data.example_decoder import decode_example  # noqa: F401  (re-exported)
from recurrent_bert.data.tfrecord_frames import REMAKE
from recurrent_bert.data.tfrecord_frames import SkippedRecords
from recurrent_bert.errors import InputError

# What is wrong with a record's schema, in the words of both readers' errors (TF's parser
# errors are translated to these by `record_errors`).
NOT_AN_EXAMPLE = "not a tf.train.Example (its bytes do not parse as one)"
MISSING = "feature {!r} ({}) is missing"
NO_VALUE_LIST = "feature {!r} holds no value list"
WRONG_KIND = "feature {!r} holds {} values, expected {}"
WRONG_COUNT = "feature {!r} has {} values, expected {}"


@dataclasses.dataclass(frozen=True)
class PretrainingDataConfig:
  """What a pretraining input pipeline reads and how.

  Attributes:
    input_files: the TFRecord files (already expanded, see `io_utils.expand_input_patterns`).
    max_seq_length, max_predictions_per_seq: the records' schema lengths.
    seed: seeds file order, shuffling and dynamic masks.
    shuffle_buffer_size: examples held by the shuffle buffer.
    cycle_length: files read in parallel by the interleave.
    masker: a `DynamicMasker` for unmasked records (fresh masks every epoch), or None
      for records masked offline.
    vocab_size: ids must be below it (the model's); None: only checked >= 0.
    type_vocab_size: segment ids must be below it.
    skipped: --skip_bad_records: damaged frames are skipped and counted here (and shards
      shorter than stats.json says); None: they stop the run.
  """

  input_files: Sequence[str]
  max_seq_length: int
  max_predictions_per_seq: int
  seed: int = 0
  shuffle_buffer_size: int = 1000
  cycle_length: int = 4
  masker: Optional[object] = None
  vocab_size: Optional[int] = None
  type_vocab_size: int = 2
  skipped: Optional[SkippedRecords] = None

  @property
  def on_bad_record(self) -> Optional[Callable]:
    """`tfrecord_frames.read_frames`' callback: count and skip, or None to stop."""
    return self.skipped.add if self.skipped is not None else None


def feature_layout(
    max_seq_length: int, max_predictions_per_seq: Optional[int]
) -> Dict[str, Tuple[int, str]]:
  """{feature: (values per record, "int64" or "float")}; masked features when P is given."""
  layout = {
      "input_ids": (max_seq_length, "int64"),
      "input_mask": (max_seq_length, "int64"),
      "segment_ids": (max_seq_length, "int64"),
      "next_sentence_labels": (1, "int64"),
  }
  if max_predictions_per_seq is not None:
    layout["masked_lm_positions"] = (max_predictions_per_seq, "int64")
    layout["masked_lm_ids"] = (max_predictions_per_seq, "int64")
    layout["masked_lm_weights"] = (max_predictions_per_seq, "float")
  return layout


# ------------------------------------------------------------------------ value rules


@dataclasses.dataclass(frozen=True)
class ValueRule:
  """One rule on a batch: `ok(features, ops)` -> bool [B, K], True where the values of
  `feature` [B, K] are allowed; `what` is the error's text (no quotes: TF's Assert would
  escape them)."""

  feature: str
  what: str
  ok: Callable


def value_rules(
    max_seq_length: int, vocab_size: Optional[int] = None, type_vocab_size: int = 2
) -> List[ValueRule]:
  """The schema's value rules, in the order they are checked (masked features last).

  `ops` gives `row_sum(x)` ([B, K] -> [B, 1], int64) and `is_finite(x)` for the array
  type at hand (numpy here, TensorFlow in `record_values`); comparisons and & | are
  the arrays' own operators.
  """
  ids = f"outside [0, {vocab_size}) (vocab_size of the model)" if vocab_size else "negative"
  top = vocab_size if vocab_size else 2**31  # int32 in the model
  seq, types = max_seq_length, type_vocab_size

  def in_range(name, low, high):
    return lambda f, ops: (f[name] >= low) & (f[name] < high)

  def inside_mask(f, ops):
    # Padding predictions (weight 0) sit at position 0; a weighted one must be real.
    return (f["masked_lm_weights"] == 0) | (f["masked_lm_positions"] < ops.row_sum(f["input_mask"]))

  def unit_weights(f, ops):
    w = f["masked_lm_weights"]
    return ops.is_finite(w) & (w >= 0) & (w <= 1)  # NaN fails every comparison too

  return [
      ValueRule("input_ids", f"input_ids {ids}", in_range("input_ids", 0, top)),
      ValueRule("input_mask", "input_mask must be 0 or 1", in_range("input_mask", 0, 2)),
      ValueRule(
          "segment_ids",
          f"segment_ids outside [0, {types}) (type_vocab_size of the model)",
          in_range("segment_ids", 0, types),
      ),
      ValueRule(
          "next_sentence_labels",
          "next_sentence_labels must be 0 or 1",
          in_range("next_sentence_labels", 0, 2),
      ),
      ValueRule(
          "masked_lm_positions",
          f"masked_lm_positions outside [0, {seq})",
          in_range("masked_lm_positions", 0, seq),
      ),
      ValueRule(
          "masked_lm_positions", "a weighted masked_lm_position outside the input_mask", inside_mask
      ),
      ValueRule("masked_lm_ids", f"masked_lm_ids {ids}", in_range("masked_lm_ids", 0, top)),
      ValueRule(
          "masked_lm_weights", "masked_lm_weights must be finite and in [0, 1]", unit_weights
      ),
  ]


class _NumpyOps:
  row_sum = staticmethod(lambda x: x.astype(np.int64).sum(axis=1, keepdims=True))
  is_finite = staticmethod(np.isfinite)


def format_value(value) -> str:
  """A value as the in-graph checks print it (`tf.strings.as_string`)."""
  return f"{value:f}" if isinstance(value, (float, np.floating)) else str(int(value))


def check_values(features: Dict[str, np.ndarray], names: Sequence[str], rules) -> None:
  """Raises InputError naming the first bad record of the batch, as `record_values` does."""
  for rule in rules:
    if rule.feature not in features:
      continue
    ok = np.asarray(rule.ok(features, _NumpyOps))
    if ok.all():
      continue
    row = int(np.argmin(ok.all(axis=1)))
    column = int(np.argmin(ok[row]))
    value = format_value(features[rule.feature][row, column])
    raise InputError(f"{names[row]}: {rule.what} ({value} at index {column}); {REMAKE}")


# ------------------------------------------------------------ shards and stats.json


def check_shards(input_files: Sequence[str], skipped: Optional[SkippedRecords] = None) -> List[int]:
  """Compares each file with the stats.json the generator wrote beside it, if any.

  A shard cut between two records, or inside a record's header, reads as a shorter
  shard without any error from TF; its size (or, for stats.json files written before
  the sizes were, its record count) tells. Files without a stats.json beside them, or
  not named in it, are not checked.

  Args:
    input_files: the shards.
    skipped: with --skip_bad_records, where records missing from a shard are counted
      (the damaged frame a cut leaves is the reader's to count); None: refuse the shard.

  Returns:
    Each file's size in bytes (what its frames must add up to).

  Raises:
    InputError: "shard: expected N records (B bytes) as stats.json says, found ...".
  """
  stats_by_dir: Dict[str, Optional[dict]] = {}
  sizes = []
  for path in input_files:
    directory = os.path.dirname(path)
    if directory not in stats_by_dir:
      stats_by_dir[directory] = _read_stats(os.path.join(directory, pretraining_output.STATS_FILE))
    stats = stats_by_dir[directory]
    expected = None if stats is None else _expected_shard(stats, os.path.basename(path))
    size = tfrecord_frames.file_size(path)
    sizes.append(size)
    if size == 0 and expected is None:
      # The generator writes an empty shard only with a stats.json that says so.
      why = "holds no records (an empty file)"
      if skipped is None:
        raise InputError(f"{path}: {why}; drop it from the input files or {REMAKE}")
      skipped.add_missing(path, 0, f"{why}: skipped")
    if expected is None or expected.get("bytes") == size:
      continue
    frames = tfrecord_frames.walk_frames(path)
    if "bytes" not in expected and not frames.problem and frames.records == expected["records"]:
      continue
    want = [f"{expected['records']} records"] if "records" in expected else []
    want += [f"{expected['bytes']} bytes"] if "bytes" in expected else []
    found = f"{frames.records} whole records, {size} bytes"
    if frames.problem:
      found += f"; record {frames.records + 1} (byte {frames.end}): {frames.problem}"
    stats_path = os.path.join(os.path.dirname(path), pretraining_output.STATS_FILE)
    why = f"expected {' and '.join(want)} (as {stats_path} says), found {found}"
    if skipped is not None:
      missing = expected.get("records", 0) - frames.records - (1 if frames.problem else 0)
      if missing > 0:
        skipped.add_missing(path, missing, f"{why}: {missing} records missing")
      continue
    raise InputError(
        f"{path}: {why}: the shard is cut short or was changed; copy it again or {REMAKE}"
    )
  return sizes


def check_vocabulary(input_files: Sequence[str], vocab_file: str) -> None:
  """Refuses records made with another vocabulary than `vocab_file`: their ids would name
  other tokens. The generator's stats.json beside the shards records its vocabulary's
  SHA-256; files without one (or written before it did) are not checked.

  Raises:
    InputError: "DIR/stats.json: these records were made with another vocabulary ...".
  """
  from recurrent_bert.data import vocab as vocab_lib

  wanted = None
  for directory in dict.fromkeys(os.path.dirname(path) for path in input_files):
    stats_path = os.path.join(directory, pretraining_output.STATS_FILE)
    options = (_read_stats(stats_path) or {}).get("options") or {}
    recorded = options.get("vocab_sha256")
    if not recorded:
      continue
    wanted = wanted or vocab_lib.fingerprint(vocab_file)
    if recorded != wanted:
      raise InputError(
          f"{stats_path}: these records were made with another vocabulary "
          f"({options.get('vocab_file')}, sha256 {recorded[:12]}) than --vocab_file="
          f"{vocab_file} (sha256 {wanted[:12]}): their ids would name other tokens; give "
          f"the vocabulary they were made with, or {REMAKE}"
      )


def _read_stats(path: str) -> Optional[dict]:
  if not tfrecord_frames.exists(path):
    return None
  try:
    with tfrecord_frames.open_binary(path) as f:
      stats = json.loads(f.read())
  except (ValueError, UnicodeDecodeError) as e:
    raise InputError(f"{path}: not the generator's stats JSON ({e}); {REMAKE}") from None
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
  names = pretraining_output.shard_names(num_shards)
  if name not in names:
    return None
  table = pretraining_output.shard_table(names, [0] * num_shards, instances)
  return {"records": table[names.index(name)]["records"]}


# ------------------------------------------------------------------------ the reader


def check_record_layout(
    path: str, config: PretrainingDataConfig, dynamic_masking: Optional[bool] = None
) -> None:
  """Reads the first record of `path` and checks it against the flags.

  Catches the common mistakes (max_seq_length differing from the data's, masked
  records given to --dynamic_masking or the reverse) before the model is built, and
  checks every file of `config.input_files` against its stats.json (`check_shards`).

  Raises:
    InputError: naming the flag that disagrees with the data, or the shard cut short.
  """
  check_shards(config.input_files, config.skipped)
  first = None
  for candidate in [path] + [f for f in config.input_files if f != path]:
    first = next(tfrecord_frames.read_frames(candidate, config.on_bad_record), None)
    if first is not None:
      path = candidate
      break
  if first is None:
    raise InputError(f"--input_files: no record in {', '.join(config.input_files)}")
  try:
    features = example_decoder.raw_example(first[2])
  except ValueError:
    raise tfrecord_frames.BadRecord(path, first[0], first[1], NOT_AN_EXAMPLE).error() from None
  if dynamic_masking is None:
    dynamic_masking = config.masker is not None
  kind, payload = features.get("input_ids", ("int64", b""))
  seq_len = example_decoder.count_values(kind, payload) if kind == "int64" else 0
  if seq_len != config.max_seq_length:
    raise InputError(
        f"--max_seq_length={config.max_seq_length} but {path} holds "
        f"sequences of length {seq_len}"
    )
  has_masks = "masked_lm_positions" in features
  if dynamic_masking and has_masks:
    # Their input_ids already hold [MASK]s: masking again would hide the originals.
    raise InputError(
        f"--dynamic_masking needs unmasked records, but {path} is masked; "
        "make the data with `recurrent_bert.tools.create_pretraining_data --dynamic_masking` "
        "or drop --dynamic_masking"
    )
  if not dynamic_masking and not has_masks:
    raise InputError(
        f"{path} holds unmasked records (made with --dynamic_masking); "
        "pass --dynamic_masking (and --vocab_file) to mask them while reading"
    )
  if not dynamic_masking:
    kind, payload = features["masked_lm_positions"]
    num_predictions = example_decoder.count_values(kind, payload) if kind == "int64" else 0
    if num_predictions != config.max_predictions_per_seq:
      raise InputError(
          f"--max_predictions_per_seq={config.max_predictions_per_seq} but "
          f"{path} holds {num_predictions} masked positions per sequence"
      )


def parse_record(name: str, data: bytes, layout) -> Dict[str, bytes]:
  """One record's features as the layout says ({feature: payload}), or InputError."""
  try:
    example = example_decoder.raw_example(data)
  except ValueError:
    raise InputError(f"{name}: {NOT_AN_EXAMPLE}; {REMAKE}") from None
  parsed = {}
  for feature, (length, kind) in layout.items():
    found_kind, payload = example.get(feature, ("", b""))
    if feature not in example:
      what = MISSING.format(feature, kind)
    elif found_kind is None:
      what = NO_VALUE_LIST.format(feature)
    elif found_kind != kind:
      what = WRONG_KIND.format(feature, found_kind, kind)
    elif example_decoder.count_values(kind, payload) != length:
      what = WRONG_COUNT.format(feature, example_decoder.count_values(kind, payload), length)
    else:
      what = ""
    if what:
      raise InputError(f"{name}: {what}; {REMAKE}")
    parsed[feature] = payload
  return parsed


def _read_records(config: PretrainingDataConfig, layout) -> Iterator[Tuple[str, Dict[str, bytes]]]:
  """("path: record N (byte B)", {feature: payload}) of every record, in file order.

  Raises:
    InputError: a shard that stats.json says is short, a damaged frame (unless
      `config.skipped`: counted, skipped), or a record that is not the schema's; values
      are checked by `batches`.
  """
  check_shards(config.input_files, config.skipped)
  for path in config.input_files:
    for number, offset, data in tfrecord_frames.read_frames(path, config.on_bad_record):
      name = tfrecord_frames.record_name(path, number, offset)
      yield name, parse_record(name, data, layout)


def stack_batch(
    rows: Sequence[Dict[str, bytes]], names: Sequence[str], layout, rules
) -> Dict[str, np.ndarray]:
  """One batch of parsed records (`parse_record`'s), value-checked, with the `tf.data`
  pipeline's dtypes and shapes (module docstring).

  Each feature is decoded at once (one vectorized varint decode of every record's packed
  bytes): the Python work per record is the protobuf parse alone.

  Raises:
    InputError: naming the first record (of `names`) with a value the rules refuse.
  """
  batch = {
      key: example_decoder.values(kind, [row[key] for row in rows]).reshape(len(rows), length)
      for key, (length, kind) in layout.items()
  }
  check_values(batch, names, rules)
  batch = {
      key: value.astype(np.float32 if layout[key][1] == "float" else np.int32)
      for key, value in batch.items()
  }
  batch["next_sentence_labels"] = batch["next_sentence_labels"].reshape(-1)  # [B]
  return batch


def count_records(config: PretrainingDataConfig) -> int:
  """Records in the files (held-out sets are small enough to count before evaluating).

  Read by `tfrecord_frames` (both CRCs checked, in Python): TF's reader would count a
  file that ends inside a record as a shorter one. With `config.skipped`, good records
  only.

  Raises:
    InputError: a file is damaged or cut inside a record (file, record and byte named).
  """
  check_shards(config.input_files, config.skipped)
  return sum(
      1
      for path in config.input_files
      for _ in tfrecord_frames.read_frames(path, config.on_bad_record)
  )


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


def batches(
    config: PretrainingDataConfig,
    batch_size: int,
    pad_last: bool = False,
    unmasked: bool = False,
) -> Iterator[Dict[str, np.ndarray]]:
  """Full batches of every record in file order, as `stack_batch` makes them.

  The last partial batch is dropped; with `pad_last` it is filled up with all-zero rows
  instead, and every batch gets float32 [B] `example_weights` (1.0 for records, 0.0 for
  padding), as the held-out `tf.data` pipeline pads (`make_eval_dataset`). `unmasked`:
  the records have no masked features yet (--dynamic_masking's).
  """
  rules = value_rules(config.max_seq_length, config.vocab_size, config.type_vocab_size)
  layout = feature_layout(
      config.max_seq_length, None if unmasked else config.max_predictions_per_seq
  )

  def finish(batch, real):
    if pad_last:
      batch = {
          k: np.concatenate([v, np.zeros((batch_size - real,) + v.shape[1:], v.dtype)])
          for k, v in batch.items()
      }
      batch["example_weights"] = (np.arange(batch_size) < real).astype(np.float32)
    return batch

  names, rows = [], []
  for name, features in _read_records(config, layout):
    names.append(name)
    rows.append(features)
    if len(rows) == batch_size:
      yield finish(stack_batch(rows, names, layout, rules), batch_size)
      names, rows = [], []
  if rows and pad_last:
    yield finish(stack_batch(rows, names, layout, rules), len(rows))
