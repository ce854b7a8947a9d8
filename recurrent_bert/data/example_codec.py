"""tf.train.Example serialisation and TFRecord framing in numpy, without TensorFlow.

The generator's workers serialise a whole batch at once: every record's bytes are laid out
by array operations (varints included), with no Python loop per record or feature; the
bytes equal `tf.train.Example(...).SerializeToString(deterministic=True)` (features in key
order), and the TFRecord framing is TensorFlow's (length, masked CRC-32C of the length,
data, masked CRC-32C of the data; CRCs by crcmod's C extension).

Wire format (protobuf): Example{features=1: Features{feature=1: map<string, Feature>}},
a map entry being {key=1, value=2}; Feature{float_list=2, int64_list=3}; both lists hold
one packed field 1.
"""

import struct
from typing import Dict, List, Sequence, Tuple

import numpy as np

_MAX_VARINT_BYTES = 5  # values < 2**35: ids, positions, labels, lengths

# (flat uint8 bytes, bytes per record [n]): a column of every record's bytes.
Column = Tuple[np.ndarray, np.ndarray]


def _varints(values: np.ndarray) -> Column:
  """Varint bytes of non-negative ints [rows, k], flattened row-major; per-row lengths."""
  values = np.asarray(values)
  rows = len(values)
  top = int(values.max()) if values.size else 0
  if values.size and (values.min() < 0 or top >= 1 << (7 * _MAX_VARINT_BYTES)):
    raise ValueError("example_codec encodes ints in [0, 2**35) only")
  width = 1  # bytes of the largest value: the arrays below are only that wide
  while top >= 1 << (7 * width):
    width += 1
  if width == 1:  # labels, masks, small ids: the bytes are the values
    return values.astype(np.uint8).reshape(-1), np.full(rows, values[0].size, np.int64)
  values = values.astype(np.int64)
  num_bytes = np.ones(values.shape, np.int64)
  for k in range(1, width):
    num_bytes += values >= (1 << (7 * k))
  encoded = np.empty(values.shape + (width,), np.uint8)
  for k in range(width):
    encoded[..., k] = ((values >> (7 * k)) & 0x7F) | ((num_bytes > k + 1) << 7)
  present = np.arange(width) < num_bytes[..., None]
  return encoded[present], num_bytes.reshape(rows, -1).sum(axis=1)


def _constant(data: bytes, n: int) -> Column:
  return np.tile(np.frombuffer(data, np.uint8), n), np.full(n, len(data), np.int64)


def _varint_length(lengths: np.ndarray) -> np.ndarray:
  return 1 + sum((lengths >= (1 << (7 * k))).astype(np.int64) for k in range(1, _MAX_VARINT_BYTES))


def _interleave(columns: Sequence[Column], n: int) -> Tuple[np.ndarray, np.ndarray]:
  """Record r = columns[0][r] + columns[1][r] + ...; returns (bytes, offsets [n + 1])."""
  lengths = np.stack([c[1] for c in columns])  # [columns, n]
  offsets = np.zeros(n + 1, np.int64)
  np.cumsum(lengths.sum(axis=0), out=offsets[1:])
  out = np.empty(int(offsets[-1]), np.uint8)
  within = np.cumsum(lengths, axis=0) - lengths  # where column c starts inside record r
  for (flat, size), start in zip(columns, within):
    source_start = np.cumsum(size) - size
    shift = np.repeat(offsets[:-1] + start - source_start, size)
    out[shift + np.arange(len(flat))] = flat
  return out, offsets


def serialize_examples(
    int_features: Dict[str, np.ndarray], float_features: Dict[str, np.ndarray]
) -> Tuple[np.ndarray, np.ndarray]:
  """Serialises n tf.train.Examples at once.

  Args:
    int_features: name -> int array [n, length] (non-negative), stored as int64_list.
    float_features: name -> float array [n, length], stored as float_list.

  Returns:
    (bytes uint8 [total], offsets int64 [n + 1]): record r is bytes[offsets[r]:offsets[r+1]].
  """
  n = len(next(iter({**int_features, **float_features}.values())))
  entries: List[List[Column]] = []
  entry_lengths = []
  for name in sorted({**int_features, **float_features}):
    if name in float_features:
      values = np.asarray(float_features[name], "<f4").reshape(n, -1)
      payload = (
          np.ascontiguousarray(values).view(np.uint8).reshape(-1),
          np.full(n, values.shape[1] * 4, np.int64),
      )
      feature_tag = b"\x12"
    else:
      payload = _varints(np.asarray(int_features[name]).reshape(n, -1))
      feature_tag = b"\x1a"
    list_length = 1 + _varint_length(payload[1]) + payload[1]
    feature_length = 1 + _varint_length(list_length) + list_length
    key = name.encode("utf-8")
    if len(key) >= 128:  # its length is written as a one-byte varint
      raise ValueError(f"feature name too long: {name!r}")
    head = b"\x0a" + bytes([len(key)]) + key + b"\x12"
    entry_length = len(head) + _varint_length(feature_length) + feature_length
    entries.append(
        [
            _varints(entry_length[:, None]),
            _constant(head, n),
            _varints(feature_length[:, None]),
            _constant(feature_tag, n),
            _varints(list_length[:, None]),
            _constant(b"\x0a", n),
            _varints(payload[1][:, None]),
            payload,
        ]
    )
    entry_lengths.append(entry_length)
  features_length = sum(1 + _varint_length(e) + e for e in entry_lengths)
  columns = [_constant(b"\x0a", n), _varints(features_length[:, None])]
  for entry in entries:
    columns.append(_constant(b"\x0a", n))
    columns.extend(entry)
  return _interleave(columns, n)


_CRC32C = None


def _crc32c():
  global _CRC32C
  if _CRC32C is None:
    import crcmod.predefined

    _CRC32C = crcmod.predefined.mkPredefinedCrcFun("crc-32c")
  return _CRC32C


def masked_crc(data) -> int:
  """TFRecord's masked CRC-32C of `data` (what a frame stores after its length and data)."""
  crc = _crc32c()(data)
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_records(data: np.ndarray, offsets: np.ndarray) -> Tuple[bytes, np.ndarray]:
  """TFRecord framing of serialised records.

  Args:
    data, offsets: as returned by serialize_examples.

  Returns:
    (framed bytes, offsets [n + 1] of each framed record in them).
  """
  buffer = data.tobytes()
  parts = []
  for begin, end in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
    record = buffer[begin:end]
    length = struct.pack("<Q", end - begin)
    parts.append(
        length
        + struct.pack("<I", masked_crc(length))
        + record
        + struct.pack("<I", masked_crc(record))
    )
  framed_offsets = offsets + 16 * np.arange(len(offsets))
  return b"".join(parts), framed_offsets
