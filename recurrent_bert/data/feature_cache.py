"""The TFRecord cache of fine-tuning features, task-agnostic.

A feature converter returns a plain dict of numpy arrays with a leading row axis [N, ...]
(`Features`). `cached_features` stores such a dict as one TFRecord file (one
`tf.train.Example` per row) plus a JSON sidecar holding shapes, dtypes and a fingerprint of
what produced the features; both are written atomically, the sidecar last, so an
interrupted write never looks like a valid cache. `load_feature_dataset` streams a cache
back as a `tf.data.Dataset`, `read_feature_cache` reads it back into numpy.

`SplitData` is what a task reader returns for one split: the examples a converter turns
into features, and the records it skipped.
"""

import dataclasses
import hashlib
import json
from typing import Any, Callable, Dict, List, Mapping, Optional

from absl import logging
import numpy as np
import tensorflow as tf

from recurrent_bert import io_utils
from recurrent_bert.errors import InputError

Features = Dict[str, np.ndarray]

_CACHE_FORMAT_VERSION = 1


@dataclasses.dataclass
class SplitData:
  """The result of reading one split of a task.

  Attributes:
    examples: the parsed examples, in file order.
    source: the file (or TFDS name) they came from.
    skipped: one "file:line: reason" message per input record the reader skipped (QQP's
      official broken rows, or every bad row with skip_bad_rows); otherwise a bad record raises.
  """

  examples: List[Any]
  source: str
  skipped: List[str] = dataclasses.field(default_factory=list)

  def report_skipped(self) -> None:
    """Logs one line: how many records of this source were skipped, and the first reason."""
    if self.skipped:
      logging.warning(
          "%s: skipped %d bad row(s) (first: %s)", self.source, len(self.skipped), self.skipped[0]
      )


def fingerprint(*parts: Any) -> str:
  """A stable hash of JSON-able parts (settings, example contents, vocab hash...)."""
  digest = hashlib.sha256()
  for part in parts:
    digest.update(
        json.dumps(part, sort_keys=True, default=repr, ensure_ascii=False).encode("utf-8")
    )
    digest.update(b"\0")
  return digest.hexdigest()


def file_fingerprint(path: str) -> str:
  """sha256 of a file's bytes (e.g. the vocabulary, so a new vocab invalidates a cache)."""
  digest = hashlib.sha256()
  with tf.io.gfile.GFile(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def _metadata_path(cache_path: str) -> str:
  return cache_path + ".json"


def _serialize_row(features: Features, row: int) -> bytes:
  feature = {}
  for name, array in features.items():
    values = array[row].reshape(-1)
    if np.issubdtype(array.dtype, np.floating):
      feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values.tolist()))
    else:
      feature[name] = tf.train.Feature(
          int64_list=tf.train.Int64List(value=values.astype(np.int64).tolist())
      )
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(
      deterministic=True
  )


def write_feature_cache(cache_path: str, features: Features, fingerprint_value: str) -> None:
  """Writes features (dict of arrays with one leading axis N) as a TFRecord cache.

  Creates `cache_path` (N records) and `cache_path + ".json"` (shapes, dtypes, N and the
  fingerprint), each atomically; the sidecar is written last and marks the cache valid.
  Float arrays are stored as float32, everything else as int64.
  """
  sizes = {name: array.shape[0] for name, array in features.items()}
  if len(set(sizes.values())) > 1:
    raise ValueError(f"feature arrays disagree on the number of rows: {sizes}")
  num_rows = next(iter(sizes.values()), 0)
  # Invalidate first: an old sidecar must never describe the new records.
  io_utils.remove_file(_metadata_path(cache_path))
  with io_utils.atomic_output(cache_path) as tmp, tf.io.TFRecordWriter(tmp) as writer:
    for row in range(num_rows):
      writer.write(_serialize_row(features, row))
  metadata = {
      "format_version": _CACHE_FORMAT_VERSION,
      "fingerprint": fingerprint_value,
      "num_records": int(num_rows),
      "features": {
          name: {
              "shape": list(array.shape[1:]),
              "dtype": "float32" if np.issubdtype(array.dtype, np.floating) else str(array.dtype),
          }
          for name, array in features.items()
      },
  }
  io_utils.atomic_write_json(_metadata_path(cache_path), metadata)


def read_cache_metadata(cache_path: str) -> Optional[Dict[str, Any]]:
  """The sidecar of a complete cache, or None if there is no (valid) cache at the path."""
  try:
    with tf.io.gfile.GFile(_metadata_path(cache_path)) as f:
      metadata = json.load(f)
  except (OSError, ValueError, tf.errors.OpError):
    return None
  if metadata.get("format_version") != _CACHE_FORMAT_VERSION or not tf.io.gfile.exists(cache_path):
    return None
  return metadata


def _feature_spec(metadata: Mapping[str, Any]) -> Dict[str, tf.io.FixedLenFeature]:
  return {
      name: tf.io.FixedLenFeature(
          info["shape"], tf.float32 if info["dtype"] == "float32" else tf.int64
      )
      for name, info in metadata["features"].items()
  }


def load_feature_dataset(cache_path: str, int_dtype=tf.int32) -> tf.data.Dataset:
  """Streams a feature cache.

  Args:
    cache_path: a cache written by `write_feature_cache`.
    int_dtype: integer features are cast to this (int32: what the task models take).

  Returns:
    A `tf.data.Dataset` of dicts, one per row, each feature with its per-row shape
    (e.g. input_ids [T], label_ids []); unbatched and in the order written.

  Raises:
    InputError: no complete cache at the path.
  """
  metadata = read_cache_metadata(cache_path)
  if metadata is None:
    raise InputError(
        f"no complete feature cache at {cache_path!r} "
        f"(missing or invalid {_metadata_path(cache_path)!r})"
    )
  spec = _feature_spec(metadata)

  def parse(serialized):
    parsed = tf.io.parse_single_example(serialized, spec)
    return {k: tf.cast(v, int_dtype) if v.dtype == tf.int64 else v for k, v in parsed.items()}

  return tf.data.TFRecordDataset(cache_path).map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def read_feature_cache(cache_path: str) -> Features:
  """Reads a whole cache back into numpy arrays [N, ...] (int features as int32)."""
  metadata = read_cache_metadata(cache_path)
  if metadata is None:
    raise InputError(f"no complete feature cache at {cache_path!r}")
  spec = _feature_spec(metadata)
  columns: Dict[str, List[np.ndarray]] = {name: [] for name in spec}
  for batch in tf.data.TFRecordDataset(cache_path).batch(4096):
    parsed = tf.io.parse_example(batch, spec)
    for name, value in parsed.items():
      columns[name].append(value.numpy())
  features = {}
  for name, info in metadata["features"].items():
    dtype = np.float32 if info["dtype"] == "float32" else np.int32
    parts = columns[name]
    features[name] = (
        np.concatenate(parts).astype(dtype) if parts else np.zeros([0, *info["shape"]], dtype)
    )
  if any(len(v) != metadata["num_records"] for v in features.values()):
    raise InputError(f"feature cache {cache_path!r} is truncated")
  return features


def cached_features(
    cache_path: Optional[str], fingerprint_value: str, build: Callable[[], Features]
) -> Features:
  """Returns the cached features if the cache matches `fingerprint_value`, else builds them.

  Args:
    cache_path: where the cache lives; None disables caching.
    fingerprint_value: identifies the inputs and settings (see `fingerprint`); a cache
      with a different fingerprint is rebuilt, never reused.
    build: computes the features (dict of arrays [N, ...]) on a cache miss.

  Returns:
    The features, int arrays as int32 when read from the cache.
  """
  if cache_path is None:
    return build()
  metadata = read_cache_metadata(cache_path)
  if metadata is not None and metadata["fingerprint"] == fingerprint_value:
    logging.info("Reading cached features from %s", cache_path)
    return read_feature_cache(cache_path)
  features = build()
  write_feature_cache(cache_path, features, fingerprint_value)
  logging.info("Wrote %d feature rows to %s", len(next(iter(features.values()), [])), cache_path)
  return features
