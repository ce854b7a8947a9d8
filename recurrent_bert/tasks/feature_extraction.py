"""Per-token vectors of chosen encoder blocks for a file of texts (ELMo-style features).

The library side of `python -m recurrent_bert.extract_features`: reading the input file,
packing it, running the encoder for the chosen blocks on any strategy, and the writers.

Input: a UTF-8 text file, one input per line. A line "text ||| text_b" (the separator with
its spaces) is a pair, packed `[CLS] text [SEP] text_b [SEP]` (segment 1 for text_b);
any other line is one text, `[CLS] text [SEP]`. A blank line is an empty text (the output
keeps one row per input line). Pairs are cut longest first to `max_seq_length`
(`tasks/pair_features.py`, google-research/bert's packing).

Layers: indices into the encoder's L blocks (its `encoder_outputs`, the embeddings not
included), Python-style: -1 is the last block, 0 the first; valid in [-L, L-1].

Outputs, row n = input line n + 1 (k = the layers chosen, H = hidden size, T =
max_seq_length; vectors are float32 at every position, padding included, which readers
drop with input_mask):
  jsonl     one JSON object per input line:
              {"line_index": n, "features": [{"token": "[CLS]", "layers":
                [{"index": -1, "values": [H floats rounded to 6 places]}, ...]}, ...]}
            one entry per real (unpadded) word piece, layers in the order asked.
  npz       one numpy archive (everything is held in memory until it is written: use
            tfrecord for large inputs):
              features     float32 [N, T, k, H]
              input_ids, input_mask, segment_ids  int32 [N, T]
              layers       int32 [k], the indices as asked
  tfrecord  one tf.train.Example per input line, in input order, split into
            `num_shards` files of consecutive rows (`path-00000-of-00004`, ...; one
            shard: `path` itself):
              line_index   int64 [1]
              input_ids, input_mask, segment_ids  int64 [T]
              layers       int64 [k]
              features     float [T * k * H], row-major [T, k, H]
Every output appears complete or not at all (temp files beside it, renamed at the end).
"""

import contextlib
import json
import math
import time
from typing import Dict, Iterator, List, Sequence, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from recurrent_bert import io_utils
from recurrent_bert.errors import InputError
from recurrent_bert.progress import format_duration
from recurrent_bert.tasks.pair_features import PairExample
from recurrent_bert.tasks.pair_features import convert_pair_examples
from recurrent_bert.training.loop import Throughput

PAIR_SEPARATOR = " ||| "
OUTPUT_FORMATS = ("jsonl", "npz", "tfrecord")
INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")
ROW_ID = "row_id"
# JSONL values are rounded as google-research/bert's extract_features.py rounds them.
JSONL_DECIMALS = 6


# ----------------------------------------------------------------------------- input


def read_inputs(path: str) -> List[PairExample]:
  """The examples of an input file (module docstring), one per line.

  Raises:
    InputError: the file cannot be read, has no line, or a line is not UTF-8
      ("file:line: ...").
  """
  examples = []
  for line_number, line in io_utils.read_lines_checked(path):
    text_a, separator, text_b = line.partition(PAIR_SEPARATOR)
    examples.append(PairExample(f"line-{line_number}", text_a, text_b if separator else None, None))
  if not examples:
    raise InputError(f"{path}: empty; give one text (or 'text ||| text_b') per line")
  return examples


def resolve_layers(layers: Sequence[int], num_layers: int) -> List[int]:
  """Block positions 0..L-1 of the Python-style `layers` of an L-block encoder.

  Raises:
    InputError: an index outside [-L, L-1], or two naming one block; the message names L.
  """
  for index in layers:
    if not -num_layers <= index < num_layers:
      raise InputError(
          f"--layers: {index} is out of range for an encoder of {num_layers} blocks "
          f"(valid: {-num_layers}..{num_layers - 1})"
      )
  positions = [index % num_layers for index in layers]
  if len(set(positions)) != len(positions):
    raise InputError(
        f"--layers: {','.join(map(str, layers))} name a block twice in an encoder of "
        f"{num_layers} blocks (-1 and {num_layers - 1} are the same)"
    )
  return positions


def pack_examples(examples: Sequence[PairExample], tokenizer, max_seq_length: int):
  """The encoder inputs of `examples`: {input_ids, input_mask, segment_ids} int32 [N, T]."""
  features = convert_pair_examples(examples, tokenizer, max_seq_length)
  return {name: features[name] for name in INPUT_NAMES}


# ------------------------------------------------------------------------- the encoder


class LayerExtractor:
  """Runs an encoder (inference mode) over packed rows on any strategy, in input order.

  Every replica runs the same static batch shape: the N rows are numbered and padded
  with copies of row 0 (numbered -1) to a multiple of the global batch; each step's
  outputs are gathered from all replicas with their numbers and put back in order on
  the host, so rows come out in input order whatever the strategy.

  Args:
    strategy: the strategy the encoder was built under.
    encoder: an `Encoder`.
    layers: block positions 0..L-1 (`resolve_layers`), in output order.
    jit_compile: XLA-compile the per-replica step.
  """

  def __init__(self, strategy, encoder, layers: Sequence[int], jit_compile: bool = False):
    self.strategy = strategy
    self.encoder = encoder
    self.layers = list(layers)
    self._replica_step = tf.function(self._replica_step_fn, jit_compile=jit_compile)
    self._step = tf.function(self._step_fn)

  def _replica_step_fn(self, batch):
    blocks = self.encoder({k: batch[k] for k in INPUT_NAMES}, training=False)["encoder_outputs"]
    chosen = tf.stack([blocks[i] for i in self.layers], axis=2)  # [B, T, k, H]
    return {"features": tf.cast(chosen, tf.float32), ROW_ID: batch[ROW_ID]}

  def _step_fn(self, batch):
    per_replica = self.strategy.run(self._replica_step, args=(batch,))
    return {k: self.strategy.gather(v, axis=0) for k, v in per_replica.items()}

  def _dataset(self, inputs, global_batch_size, context: tf.distribute.InputContext):
    num_rows = len(inputs["input_ids"])
    padded = math.ceil(num_rows / global_batch_size) * global_batch_size
    rows = {k: np.asarray(inputs[k], np.int32) for k in INPUT_NAMES}
    rows = {
        k: np.concatenate([v, np.repeat(v[:1], padded - num_rows, axis=0)]) for k, v in rows.items()
    }
    rows[ROW_ID] = np.concatenate(
        [np.arange(num_rows, dtype=np.int32), np.full(padded - num_rows, -1, np.int32)]
    )
    dataset = tf.data.Dataset.from_tensor_slices(rows)
    dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
    per_replica = context.get_per_replica_batch_size(global_batch_size)
    return dataset.batch(per_replica, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

  def __call__(
      self, inputs: Dict[str, np.ndarray], global_batch_size: int, log_steps: int = 100
  ) -> Iterator[Tuple[int, np.ndarray]]:
    """Yields (first row, features float32 [n, T, k, H]) of consecutive rows, in order.

    Logs a progress line (rows/s, ETA) every `log_steps` batches.

    Args:
      inputs: {input_ids, input_mask, segment_ids} int32 [N, T].
      global_batch_size: rows per step over all replicas (divisible by the replicas).
    """
    num_rows = len(inputs["input_ids"])
    num_steps = math.ceil(num_rows / global_batch_size)
    dataset = self.strategy.distribute_datasets_from_function(
        lambda context: self._dataset(inputs, global_batch_size, context),
        tf.distribute.InputOptions(experimental_fetch_to_device=True),
    )
    pending: Dict[int, np.ndarray] = {}
    next_row = 0
    throughput = Throughput()
    start = time.monotonic()
    for step, batch in enumerate(dataset, start=1):
      outputs = {k: v.numpy() for k, v in self._step(batch).items()}
      for row, vectors in zip(outputs[ROW_ID], outputs["features"]):
        if row >= 0:
          pending[int(row)] = vectors
      first = next_row
      while next_row in pending:
        next_row += 1
      if next_row > first:
        yield first, np.stack([pending.pop(row) for row in range(first, next_row)])
      end = time.monotonic()
      throughput.call_done(start, end, 1, global_batch_size, 0)
      start = end
      if step % log_steps == 0 or step == num_steps:
        _log_progress(step, num_steps, next_row, num_rows, throughput)
    if next_row != num_rows or pending:
      raise RuntimeError("distributed extraction lost or duplicated rows")


def _log_progress(step, num_steps, rows_done, num_rows, throughput) -> None:
  rates = throughput.take()
  parts = [f"batch {step}/{num_steps}", f"rows {rows_done}/{num_rows}"]
  if rates:
    eta = (num_steps - step) / rates["steps_per_second"]
    parts += [f"{rates['examples_per_second']:.1f} rows/s", f"ETA {format_duration(eta)}"]
  else:
    parts.append(f"(first batch, with tracing: {format_duration(throughput.first_call_seconds)})")
  logging.info(" ".join(parts))


# ---------------------------------------------------------------------------- writers


def shard_paths(path: str, num_shards: int) -> List[str]:
  """The TFRecord files of `path`: itself for one shard, else path-SSSSS-of-NNNNN."""
  if num_shards == 1:
    return [path]
  return [f"{path}-{s:05d}-of-{num_shards:05d}" for s in range(num_shards)]


def _jsonl_line(row: int, tokens: Sequence[str], vectors: np.ndarray, layers: Sequence[int]):
  """One JSONL object: the real pieces of a row and their vectors [n, k, H]."""
  features = [
      {
          "token": token,
          "layers": [
              {"index": index, "values": [round(float(x), JSONL_DECIMALS) for x in vector]}
              for index, vector in zip(layers, piece)
          ],
      }
      for token, piece in zip(tokens, vectors)
  ]
  return json.dumps({"line_index": row, "features": features}, ensure_ascii=False)


def _int_feature(values) -> tf.train.Feature:
  return tf.train.Feature(int64_list=tf.train.Int64List(value=np.asarray(values).tolist()))


def write_features(
    path: str,
    output_format: str,
    inputs: Dict[str, np.ndarray],
    batches: Iterator[Tuple[int, np.ndarray]],
    layers: Sequence[int],
    tokenizer=None,
    num_shards: int = 1,
) -> List[str]:
  """Writes what `LayerExtractor` yields in `output_format` (module docstring); atomic.

  Args:
    path: the output file (tfrecord: its shards' prefix when num_shards > 1).
    output_format: one of OUTPUT_FORMATS.
    inputs: the packed rows {input_ids, input_mask, segment_ids} [N, T].
    batches: (first row, features [n, T, k, H]) in input order, covering every row.
    layers: the layer indices as asked (recorded in the output).
    tokenizer: jsonl: the tokenizer whose vocabulary names the pieces.
    num_shards: tfrecord files.

  Returns:
    The files written.
  """
  if output_format not in OUTPUT_FORMATS:
    raise ValueError(f"output_format must be one of {OUTPUT_FORMATS}, got {output_format!r}")
  num_rows = len(inputs["input_ids"])
  if output_format == "npz":
    features = None
    for first, vectors in batches:
      if features is None:
        features = np.zeros((num_rows,) + vectors.shape[1:], np.float32)
      features[first : first + len(vectors)] = vectors
    with io_utils.atomic_write(path, "wb") as f:
      np.savez(
          f,
          features=features,
          layers=np.asarray(layers, np.int32),
          **{k: np.asarray(inputs[k], np.int32) for k in INPUT_NAMES},
      )
    return [path]
  if output_format == "jsonl":
    with io_utils.atomic_write(path) as f:
      for first, vectors in batches:
        for offset, row_vectors in enumerate(vectors):
          row = first + offset
          length = int(inputs["input_mask"][row].sum())
          tokens = tokenizer.convert_ids_to_tokens(inputs["input_ids"][row][:length])
          f.write(_jsonl_line(row, tokens, row_vectors[:length], layers) + "\n")
    return [path]
  paths = shard_paths(path, num_shards)
  # Shard s holds rows [bounds[s], bounds[s + 1]): reading the shards in order reads the
  # input in order.
  bounds = [num_rows * s // num_shards for s in range(num_shards + 1)]
  with contextlib.ExitStack() as stack:
    writers = [
        stack.enter_context(tf.io.TFRecordWriter(stack.enter_context(io_utils.atomic_output(p))))
        for p in paths
    ]
    shard = 0
    for first, vectors in batches:
      for offset, row_vectors in enumerate(vectors):
        row = first + offset
        while row >= bounds[shard + 1]:
          shard += 1
        example = tf.train.Example(
            features=tf.train.Features(
                feature={
                    "line_index": _int_feature([row]),
                    **{k: _int_feature(inputs[k][row]) for k in INPUT_NAMES},
                    "layers": _int_feature(layers),
                    "features": tf.train.Feature(
                        float_list=tf.train.FloatList(value=row_vectors.reshape(-1))
                    ),
                }
            )
        )
        writers[shard].write(example.SerializeToString())
  return paths


def parse_tfrecord_example(serialized, max_seq_length: int, num_layers: int, hidden_size: int):
  """A tfrecord output row as tensors: features [T, k, H] float32, ids [T] int64, ...

  Args:
    serialized: one record (string scalar).
    max_seq_length, num_layers, hidden_size: T, k and H of the output.
  """
  t, k, h = max_seq_length, num_layers, hidden_size
  spec = {
      "line_index": tf.io.FixedLenFeature([1], tf.int64),
      **{name: tf.io.FixedLenFeature([t], tf.int64) for name in INPUT_NAMES},
      "layers": tf.io.FixedLenFeature([k], tf.int64),
      "features": tf.io.FixedLenFeature([t * k * h], tf.float32),
  }
  parsed = tf.io.parse_single_example(serialized, spec)
  parsed["features"] = tf.reshape(parsed["features"], [t, k, h])
  return parsed


def extract_features(
    strategy,
    encoder,
    tokenizer,
    examples: Sequence[PairExample],
    output_file: str,
    output_format: str,
    layers: Sequence[int],
    max_seq_length: int,
    batch_size: int,
    num_shards: int = 1,
    jit_compile: bool = False,
    log_steps: int = 100,
    is_chief: bool = True,
) -> Tuple[int, List[str]]:
  """Runs `encoder` for `layers` on `examples` (`read_inputs`), writes `output_file`.

  Args:
    strategy: the strategy `encoder` was built under.
    encoder: an `Encoder`.
    tokenizer: its `BertWordpieceTokenizer`.
    layers: Python-style block indices (module docstring), in output order.
    batch_size: global batch (a multiple of the replicas).
    is_chief: write the output; other workers of a multi-worker run only compute their
      share (every worker takes part in every gather).

  Returns:
    (rows written, files written).
  Raises:
    InputError: a layer index, batch size or sequence length the model does not allow.
  """
  positions = resolve_layers(layers, encoder.config.num_layers)
  replicas = strategy.num_replicas_in_sync
  if batch_size % replicas:
    raise InputError(f"--batch_size={batch_size} must divide by the {replicas} replicas")
  encoder.config.check_sequence_length(max_seq_length, "--max_seq_length")
  inputs = pack_examples(examples, tokenizer, max_seq_length)
  extractor = LayerExtractor(strategy, encoder, positions, jit_compile=jit_compile)
  batches = extractor(inputs, batch_size, log_steps)
  if not is_chief:
    for _ in batches:
      pass
    return len(examples), []
  files = write_features(output_file, output_format, inputs, batches, layers, tokenizer, num_shards)
  return len(examples), files
