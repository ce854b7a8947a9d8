"""TensorBoard scalars, written with tf.summary where TensorFlow is installed.

TensorBoard is not a dependency: its scalar dashboard reads the events tf.summary writes
with the metadata below. The TensorFlow loop writes through its own summary writers
(`write_scalar` on the default writer); JAX runs and the fine-tuning evaluation on both
backends call `write_scalars`, which imports TensorFlow on first use (kept off the GPUs
when JAX holds them) and, where it is not installed, logs once that no events are
written: metrics.jsonl has the same numbers.
"""

import os
from typing import Dict, Optional

from absl import logging

from recurrent_bert import model_dir as layout

_writers: Dict[str, object] = {}
_missing_logged = False


def _scalar_metadata():
  from tensorflow.core.framework import summary_pb2

  return summary_pb2.SummaryMetadata(
      plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
      data_class=summary_pb2.DATA_CLASS_SCALAR,
  )


def write_scalar(name: str, value: float, step: int) -> None:
  """A TensorBoard scalar on tf.summary's default writer."""
  import tensorflow as tf

  tf.summary.write(name, tf.constant(value, tf.float32), step=step, metadata=_scalar_metadata())


def _writer(directory: str) -> Optional[object]:
  global _missing_logged
  if directory in _writers:
    return _writers[directory]
  try:
    import tensorflow as tf
  except ImportError:
    if not _missing_logged:
      logging.warning(
          "TensorFlow is not installed: no TensorBoard events are written (metrics.jsonl "
          "has every logged value)"
      )
      _missing_logged = True
    return None
  import keras

  if keras.backend.backend() != "tensorflow":
    # JAX holds the accelerators; TensorFlow, here for its writer alone, stays off them.
    # A TensorFlow run keeps its GPUs: they are its own, and its runtime has started.
    tf.config.set_visible_devices([], "GPU")
  _writers[directory] = tf.summary.create_file_writer(directory)
  return _writers[directory]


def write_scalars(
    model_dir: str,
    scalars: Dict[str, float],
    step: int,
    is_chief: bool = True,
    events_dir: str = layout.TRAIN_EVENTS_DIR,
) -> None:
  """Writes `scalars` at `step` to model_dir/<events_dir>/ (the chief only)."""
  writer = _writer(os.path.join(model_dir, events_dir)) if is_chief else None
  if writer is None:
    return
  with writer.as_default():
    for name, value in scalars.items():
      write_scalar(name, value, step)
  writer.flush()
