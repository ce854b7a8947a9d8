"""tf.train.Example without TensorFlow: protobuf's own parser on a descriptor built here.

`raw_example(data)` gives each feature's kind and packed payload ({feature: (kind,
payload)}), `count_values` its number of values, `values` decodes the payloads of many
records at once (one vectorized varint decode), `decode_example` one record whole. The
pretraining reader (`pretraining_records`) and the damaged-record diagnosis
(`record_errors`) read records through these.
"""

from typing import Dict, Optional, Sequence, Tuple

import numpy as np


def _example_class():
  """tf.train.Example's message class, from a descriptor built here (no TensorFlow).

  The same fields, numbers and types as tensorflow/core/example/{example,feature}.proto,
  in a pool of its own (TensorFlow registers its own "tensorflow.Example" in the default
  one); protobuf's C parser (upb) then reads the bytes.
  """
  from google.protobuf import descriptor_pb2  # pylint: disable=g-import-not-at-top
  from google.protobuf import descriptor_pool  # pylint: disable=g-import-not-at-top
  from google.protobuf import message_factory  # pylint: disable=g-import-not-at-top

  field = descriptor_pb2.FieldDescriptorProto
  proto = descriptor_pb2.FileDescriptorProto(
      name="recurrent_bert_example.proto", package="recurrent_bert_example", syntax="proto3"
  )

  def message(name, *fields, map_entry=False):
    msg = proto.message_type.add(name=name)
    if map_entry:
      msg.options.map_entry = True
    for number, (field_name, kind, label, type_name, oneof) in enumerate(fields, 1):
      f = msg.field.add(name=field_name, number=number, type=kind, label=label)
      if type_name:
        f.type_name = f".recurrent_bert_example.{type_name}"
      if oneof:
        if not msg.oneof_decl:
          msg.oneof_decl.add(name="kind")
        f.oneof_index = 0
    return msg

  repeated, optional = field.LABEL_REPEATED, field.LABEL_OPTIONAL
  message("BytesList", ("value", field.TYPE_BYTES, repeated, "", False))
  message("FloatList", ("value", field.TYPE_FLOAT, repeated, "", False))
  message("Int64List", ("value", field.TYPE_INT64, repeated, "", False))
  message(
      "Feature",
      ("bytes_list", field.TYPE_MESSAGE, optional, "BytesList", True),
      ("float_list", field.TYPE_MESSAGE, optional, "FloatList", True),
      ("int64_list", field.TYPE_MESSAGE, optional, "Int64List", True),
  )
  features = message(
      "Features", ("feature", field.TYPE_MESSAGE, repeated, "Features.FeatureEntry", False)
  )
  entry = features.nested_type.add(name="FeatureEntry")
  entry.options.map_entry = True
  entry.field.add(name="key", number=1, type=field.TYPE_STRING, label=optional)
  entry.field.add(
      name="value",
      number=2,
      type=field.TYPE_MESSAGE,
      label=optional,
      type_name=".recurrent_bert_example.Feature",
  )
  message("Example", ("features", field.TYPE_MESSAGE, optional, "Features", False))
  pool = descriptor_pool.DescriptorPool()
  pool.Add(proto)
  return message_factory.GetMessageClass(
      pool.FindMessageTypeByName("recurrent_bert_example.Example")
  )


_EXAMPLE = None
_LISTS = {"bytes_list": "string", "float_list": "float", "int64_list": "int64"}
_CONTINUATION_BYTES = bytes(range(0x80, 0x100))  # a varint's bytes but its last


def _payload(values_list) -> bytes:
  """The packed values of an Int64List / FloatList / BytesList message: its one field's
  bytes (protobuf writes repeated numbers packed, however they were read)."""
  data = values_list.SerializeToString()
  position = 1  # the field's tag, then its length as a varint
  while position < len(data) and data[position] & 0x80:
    position += 1
  return data[position + 1 :]


def count_values(kind: str, payload: bytes) -> int:
  if kind == "int64":
    return len(payload.translate(None, _CONTINUATION_BYTES))
  return len(payload) // 4 if kind == "float" else -1


def raw_example(data: bytes) -> Dict[str, Tuple[Optional[str], bytes]]:
  """{feature: (kind "int64" | "float" | "string", or None for no value list; payload)}.

  Raises:
    ValueError: `data` is not a tf.train.Example.
  """
  global _EXAMPLE
  if _EXAMPLE is None:
    _EXAMPLE = _example_class()
  from google.protobuf import message  # pylint: disable=g-import-not-at-top

  try:
    example = _EXAMPLE.FromString(data)
  except message.DecodeError as e:
    raise ValueError(str(e)) from None
  raw = {}
  for key, feature in example.features.feature.items():
    kind = feature.WhichOneof("kind")
    raw[key] = (None, b"") if kind is None else (_LISTS[kind], _payload(getattr(feature, kind)))
  return raw


def values(kind: str, payloads: Sequence[bytes]) -> np.ndarray:
  """The values of payloads of one kind, concatenated: int64 or float32 [n]."""
  joined = b"".join(payloads)
  return _packed_varints(joined) if kind == "int64" else np.frombuffer(joined, "<f4")


def _packed_varints(data: bytes) -> np.ndarray:
  """int64 [n] of packed varints, without a Python loop per value."""
  raw = np.frombuffer(data, np.uint8)
  if not raw.size:
    return np.zeros(0, np.int64)
  ends = raw < 0x80
  starts = np.flatnonzero(np.concatenate([[True], ends[:-1]]))
  index = np.cumsum(np.concatenate([[0], ends[:-1]]))  # which value each byte is of
  shift = (np.arange(raw.size) - starts[index]).astype(np.uint64) * np.uint64(7)
  parts = (raw & 0x7F).astype(np.uint64) << np.minimum(shift, 63)
  return np.add.reduceat(parts, starts).view(np.int64)  # two's complement, as int64


def decode_example(data: bytes) -> Dict[str, Tuple[Optional[str], np.ndarray]]:
  """{feature: (kind "int64" | "float" | "string", or None for no value list; values)}
  (strings are not decoded: the schema has none).

  Raises:
    ValueError: `data` is not a tf.train.Example.
  """
  return {
      key: (kind, values(kind, [payload]) if kind in ("int64", "float") else np.zeros(0))
      for key, (kind, payload) in raw_example(data).items()
  }
