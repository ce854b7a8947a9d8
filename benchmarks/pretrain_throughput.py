r"""Pretraining throughput of every base preset, side by side, with model FLOPs and MFU.

Each preset trains for a few steps through the real training loop
(recurrent_bert.training.loop: AdamW, clipping, MLM + NSP loss) on synthetic batches at
one sequence length; the table reports examples/s and tokens/s, their ratios to BERT-orig
(bert_base) and BERT-rab (bert_rab_base), the model FLOPs per token of a training step,
and the model FLOPs utilisation (MFU) that throughput implies at --peak_tflops.

Model FLOPs per token (training = 3 x forward; embedding lookups are free):
  forward = 2 * (weights of every matmul in the encoder: attention, FFN, LSTM kernels,
                 SwishRNN projections)
          + 4 * T * H per attention layer            (QK^T and AV)
          + (2 H^2 + 2 H V) * P / T                  (MLM head at P of T positions)
The SwishRNN/LSTM element-wise recurrences are not counted (as MFU conventions do).

  python benchmarks/pretrain_throughput.py                 # all base presets, seq 128
  python benchmarks/pretrain_throughput.py --presets=bert_base,swishrnn_base --steps=10 \
      --peak_tflops=312 --mixed_precision=mixed_bfloat16   # e.g. on an A100
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app
from absl import flags

BASE_PRESETS = (
    "bert_base",
    "bert_rab_base",
    "trans_blstm_1_base",
    "trans_blstm_2_base",
    "trans_blstm_small_1_base",
    "trans_blstm_small_2_base",
    "swishrnn_base",
    "blstm_base",
)

flags.DEFINE_list("presets", list(BASE_PRESETS), "Presets to compare.")
flags.DEFINE_integer("seq_length", 128, "Sequence length T.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions P per sequence.")
flags.DEFINE_integer("batch_size", 8, "Global batch size.")
flags.DEFINE_integer("warmup_steps", 2, "Untimed steps after compilation.")
flags.DEFINE_integer("steps", 5, "Timed steps.")
flags.DEFINE_boolean("jit_compile", False, "XLA-compile the step.")
flags.DEFINE_enum(
    "mixed_precision", "float32", ["float32", "mixed_bfloat16", "mixed_float16"], "Dtype policy."
)
flags.DEFINE_float(
    "peak_tflops",
    0.128,
    "Device peak for the MFU column, TFLOP/s. Default: 2 CPU cores x 2 GHz x "
    "32 FP32 FLOP/cycle (AVX-512, 2 FMA units); e.g. 312 for A100 bf16, "
    "275 for a TPU v4 chip.",
)
FLAGS = flags.FLAGS


def training_flops_per_token(config, seq_length: int, max_predictions: int) -> float:
  """Model FLOPs of one training step per token (module docstring)."""
  import keras

  # keras.src: no public API drops the initialisations a StatelessScope defers (see
  # models.count_parameters); keras.backend.clear_session would reset the caller's state too.
  from keras.src.backend.common import global_state

  from recurrent_bert.models import Encoder
  # Shapes only, as models.count_parameters does: no weight initialisation cost.
  with keras.StatelessScope():
    encoder = Encoder(config)
    matmul_weights = sum(
        _size(v.shape)
        for v in encoder.weights
        if len(v.shape) >= 2
        and not v.path.startswith(("embeddings/", "pooler/", "relative_attention_bias"))
    )
    global_state.set_global_attribute("uninitialized_variables", [])
  hidden, vocab = config.hidden_size, config.vocab_size
  forward = 2.0 * matmul_weights
  if config.use_attention:
    forward += 4.0 * seq_length * hidden * config.num_layers
  forward += (2.0 * hidden * hidden + 2.0 * hidden * vocab) * max_predictions / seq_length
  return 3.0 * forward


def _size(shape) -> int:
  size = 1
  for dim in shape:
    size *= int(dim)
  return size


def synthetic_batch(batch_size, seq_length, max_predictions, vocab_size):
  import numpy as np

  rng = np.random.default_rng(0)
  positions = np.sort(
      np.stack(
          [
              rng.choice(np.arange(1, seq_length), max_predictions, replace=False)
              for _ in range(batch_size)
          ]
      ),
      1,
  )
  return {
      "input_ids": rng.integers(5, vocab_size, (batch_size, seq_length)).astype(np.int32),
      "input_mask": np.ones((batch_size, seq_length), np.int32),
      "segment_ids": (np.arange(seq_length)[None] >= seq_length // 2)
      .astype(np.int32)
      .repeat(batch_size, 0),
      "masked_lm_positions": positions.astype(np.int32),
      "masked_lm_ids": rng.integers(5, vocab_size, positions.shape).astype(np.int32),
      "masked_lm_weights": np.ones(positions.shape, np.float32),
      "next_sentence_labels": rng.integers(0, 2, (batch_size,)).astype(np.int32),
  }


def measure(preset: str, model_dir: str) -> dict:
  """examples/s and tokens/s of `preset` over FLAGS.steps timed steps."""
  import keras
  import tensorflow as tf

  from recurrent_bert.config import get_preset
  from recurrent_bert.models import Pretrainer
  from recurrent_bert.models import build_encoder
  from recurrent_bert.training import loop
  from recurrent_bert.training import optimizers

  config = get_preset(preset)
  keras.config.set_dtype_policy(FLAGS.mixed_precision)
  keras.utils.set_random_seed(0)
  strategy = tf.distribute.get_strategy()
  total_steps = FLAGS.warmup_steps + FLAGS.steps + 1
  model = Pretrainer(build_encoder(config), use_nsp=True)
  optimizer = optimizers.create_optimizer(
      model.trainable_variables,
      learning_rate=1e-4,
      num_train_steps=total_steps + 1,
      warmup_steps=1,
      loss_scaling=FLAGS.mixed_precision == "mixed_float16",
  )
  batch = synthetic_batch(
      FLAGS.batch_size, FLAGS.seq_length, FLAGS.max_predictions_per_seq, config.vocab_size
  )
  trainer = loop.PretrainingLoop(
      strategy,
      model,
      optimizer,
      lambda ctx, skip: tf.data.Dataset.from_tensors(batch).repeat(),
      model_dir=model_dir,
      global_batch_size=FLAGS.batch_size,
      num_train_steps=total_steps,
      jit_compile=FLAGS.jit_compile,
      loss_scaling=FLAGS.mixed_precision == "mixed_float16",
  )
  start = time.perf_counter()
  trainer.train_steps(1 + FLAGS.warmup_steps)  # tracing, compilation, warm caches
  compile_seconds = time.perf_counter() - start
  start = time.perf_counter()
  sums, values = trainer.train_steps(FLAGS.steps)
  losses = values["loss"]
  seconds = time.perf_counter() - start
  if not all(math.isfinite(x) for x in losses):
    raise RuntimeError(f"{preset}: non-finite loss {losses}")
  examples = sums["num_examples"] / seconds
  flops_per_token = training_flops_per_token(
      config, FLAGS.seq_length, FLAGS.max_predictions_per_seq
  )
  tokens = examples * FLAGS.seq_length
  return {
      "preset": preset,
      "examples_per_second": examples,
      "tokens_per_second": tokens,
      "flops_per_token": flops_per_token,
      "mfu": tokens * flops_per_token / (FLAGS.peak_tflops * 1e12),
      "step_seconds": seconds / FLAGS.steps,
      "setup_seconds": compile_seconds,
  }


def format_table(rows) -> str:
  by_name = {r["preset"]: r for r in rows}

  def ratio(row, reference):
    ref = by_name.get(reference)
    return f"{row['examples_per_second'] / ref['examples_per_second']:.2f}" if ref else "-"

  header = (
      "| preset | ex/s | tokens/s | vs BERT-orig | vs BERT-rab | s/step | "
      "GFLOPs/token (train) | MFU |"
  )
  lines = [header, "|" + "---|" * 8]
  for r in rows:
    lines.append(
        f"| {r['preset']} | {r['examples_per_second']:.2f} | "
        f"{r['tokens_per_second']:.0f} | {ratio(r, 'bert_base')} | "
        f"{ratio(r, 'bert_rab_base')} | {r['step_seconds']:.2f} | "
        f"{r['flops_per_token'] / 1e9:.3f} | {100 * r['mfu']:.1f}% |"
    )
  return "\n".join(lines)


flags.DEFINE_string("_measure_one", None, "Internal: measure this preset, print JSON.")


def measure_in_subprocess(preset: str) -> dict:
  """One process per preset: memory is returned between presets (a base model with its
  AdamW slots and activations holds gigabytes that Keras does not release)."""
  argv = [sys.executable, os.path.abspath(__file__), f"--_measure_one={preset}"] + [
      FLAGS[name].serialize()
      for name in (
          "seq_length",
          "max_predictions_per_seq",
          "batch_size",
          "warmup_steps",
          "steps",
          "jit_compile",
          "mixed_precision",
          "peak_tflops",
      )
  ]
  result = subprocess.run(argv, capture_output=True, text=True)
  if result.returncode != 0:
    reason = "killed (out of memory?)" if result.returncode < 0 else result.stderr[-500:]
    print(f"{preset}: failed: {reason}", file=sys.stderr, flush=True)
    return None
  return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv):
  del argv
  if FLAGS._measure_one:
    with tempfile.TemporaryDirectory() as scratch:
      print(json.dumps(measure(FLAGS._measure_one, scratch)))
    return
  rows = []
  for preset in FLAGS.presets:
    row = measure_in_subprocess(preset)
    if row is None:
      continue
    rows.append(row)
    print(
        f"{preset}: {row['examples_per_second']:.2f} ex/s (setup {row['setup_seconds']:.0f}s)",
        file=sys.stderr,
        flush=True,
    )
  print(
      f"\nseq {FLAGS.seq_length}, batch {FLAGS.batch_size}, {FLAGS.steps} timed steps, "
      f"{FLAGS.mixed_precision}, jit_compile={FLAGS.jit_compile}, "
      f"MFU at {FLAGS.peak_tflops} TFLOP/s peak"
  )
  print(format_table(rows))


if __name__ == "__main__":
  app.run(main)
