"""Example serialisation and TFRecord framing without TensorFlow, against TensorFlow's."""

import numpy as np
import tensorflow as tf

from recurrent_bert.data import example_codec


def reference_example(ints, floats, row):
  """The protobuf library's bytes (sorted map keys), independent of example_codec."""
  feature = {
      k: tf.train.Feature(int64_list=tf.train.Int64List(value=v[row].tolist()))
      for k, v in ints.items()
  }
  feature.update(
      {
          k: tf.train.Feature(float_list=tf.train.FloatList(value=v[row].tolist()))
          for k, v in floats.items()
      }
  )
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(
      deterministic=True
  )


def test_examples_and_records_equal_tensorflows(tmp_path):
  rng = np.random.default_rng(0)
  n = 200
  ints = {  # every varint width up to 5 bytes, and 1-byte fast paths
      "input_ids": rng.integers(0, 1 << 34, (n, 33)) >> rng.integers(0, 34, (n, 33)),
      "input_mask": rng.integers(0, 2, (n, 64)),
      "masked_lm_positions": rng.integers(0, 128, (n, 20)),
      "next_sentence_labels": rng.integers(0, 2, (n, 1)),
  }
  floats = {"masked_lm_weights": rng.integers(0, 2, (n, 20)).astype(np.float32)}
  data, offsets = example_codec.serialize_examples(ints, floats)
  for row in range(n):
    assert data[offsets[row] : offsets[row + 1]].tobytes() == reference_example(ints, floats, row)
  framed, framed_offsets = example_codec.frame_records(data, offsets)
  path = tmp_path / "x.tfrecord"
  path.write_bytes(framed)
  # TensorFlow's reader checks both CRCs of every record.
  read = list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())
  assert read == [data[offsets[r] : offsets[r + 1]].tobytes() for r in range(n)]
  assert framed_offsets[-1] == len(framed)
