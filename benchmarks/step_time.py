"""Forward + backward step time of every family, side by side in one run.

  python benchmarks/step_time.py            # base presets, batch 8, seq 128
  python benchmarks/step_time.py --quick    # tiny presets, for a smoke check
  python benchmarks/step_time.py --families=bert,bert_rab,swishrnn --no_xla

Each step is the pretraining loss (MLM at 20 positions + NSP) and its gradients for
every weight, no optimizer update. Models are timed round-robin (one step of each, then
the next round) so machine noise hits all of them alike; the table gives the median
per model and its ratio to BERT-orig and BERT-rab, in graph mode and under XLA.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from recurrent_bert.config import FAMILIES  # noqa: E402
from recurrent_bert.models import Pretrainer  # noqa: E402
from recurrent_bert.models import build_encoder  # noqa: E402


def make_step(model, jit_compile):
  def step(inputs, mlm_labels, nsp_labels):
    with tf.GradientTape() as tape:
      out = model(inputs, training=True)
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
          mlm_labels, out["mlm_logits"])) + tf.reduce_mean(
              tf.nn.sparse_softmax_cross_entropy_with_logits(nsp_labels, out["nsp_logits"]))
    grads = tape.gradient(loss, model.trainable_variables)
    return loss, tf.add_n([tf.reduce_sum(tf.convert_to_tensor(g)) for g in grads])
  return tf.function(step, jit_compile=jit_compile)


def make_batch(vocab_size, batch, length, predictions=20, seed=0):
  rng = np.random.default_rng(seed)
  inputs = {
      "input_ids": tf.constant(rng.integers(5, vocab_size, (batch, length)), tf.int32),
      "input_mask": tf.ones((batch, length), tf.int32),
      "segment_ids": tf.constant(np.repeat([[0] * (length // 2) + [1] * (length - length // 2)],
                                           batch, 0), tf.int32),
      "masked_lm_positions": tf.constant(
          np.sort(rng.choice(np.arange(1, length), (batch, predictions)), -1), tf.int32),
  }
  mlm_labels = tf.constant(rng.integers(5, vocab_size, (batch, predictions)), tf.int32)
  nsp_labels = tf.constant(rng.integers(0, 2, (batch,)), tf.int32)
  return inputs, mlm_labels, nsp_labels


def measure(presets, batch, length, jit_compile, repeats, warmup):
  """Median seconds per step for each preset, timed round-robin.

  A preset that fails to compile or run (e.g. out of memory) is reported as the error
  text instead of a time, and the others are still measured.
  """
  steps, batches, failures = {}, {}, {}
  for name in presets:
    try:
      model = Pretrainer(build_encoder(name), use_nsp=True)
      steps[name] = make_step(model, jit_compile)
      batches[name] = make_batch(model.encoder.config.vocab_size, batch, length)
      for _ in range(warmup):  # trace/compile outside the timing
        [t.numpy() for t in steps[name](*batches[name])]
    except (tf.errors.OpError, ValueError) as e:
      failures[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
      steps.pop(name, None)
      print(f"  {name}: {failures[name]}", flush=True)
  times = {name: [] for name in steps}
  for _ in range(repeats):
    for name in steps:
      start = time.perf_counter()
      [t.numpy() for t in steps[name](*batches[name])]
      times[name].append(time.perf_counter() - start)
  results = {name: statistics.median(t) for name, t in times.items()}
  results.update(failures)
  return results


def print_table(mode, results, presets, size, batch, length):
  print(f"\n{mode}: forward+backward step time, batch {batch}, seq {length} "
        f"({os.cpu_count()} CPU cores)")
  print("| preset | ms | ×BERT | ×BERT-rab |")
  print("|---|---|---|---|")
  for name in presets:
    r = results[name]
    if isinstance(r, str):
      print(f"| {name} | failed: {r} | | |")
      continue
    ratio = lambda ref: (f"{r / results[ref]:.2f}"
                         if not isinstance(results.get(ref), str) else "-")
    print(f"| {name} | {1000 * r:.0f} | {ratio(f'bert_{size}')} | "
          f"{ratio(f'bert_rab_{size}')} |")
  print(flush=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--quick", action="store_true", help="tiny presets, batch 8, seq 64")
  parser.add_argument("--size", default=None, help="preset size (default base)")
  parser.add_argument("--families", default=",".join(FAMILIES))
  parser.add_argument("--batch_size", type=int, default=8)
  parser.add_argument("--seq_length", type=int, default=None)
  parser.add_argument("--repeats", type=int, default=None)
  parser.add_argument("--no_xla", action="store_true", help="graph mode only")
  args = parser.parse_args()
  size = args.size or ("tiny" if args.quick else "base")
  length = args.seq_length or (64 if args.quick else 128)
  repeats = args.repeats or (10 if args.quick else 5)
  families = [f for f in args.families.split(",") if f]
  unknown = sorted(set(families) - set(FAMILIES))
  if unknown:
    parser.error(f"--families: unknown {unknown}; choose from {sorted(FAMILIES)}")
  for reference in ("bert", "bert_rab"):
    if reference not in families:
      families.insert(0, reference)
  presets = [f"{f}_{size}" for f in families]

  modes = [("graph", False)] + ([] if args.no_xla else [("xla", True)])
  for mode, jit in modes:
    print(f"measuring {mode}: {len(presets)} presets, batch {args.batch_size}, "
          f"seq {length}, median of {repeats} ...", flush=True)
    results = measure(presets, args.batch_size, length, jit, repeats, warmup=2)
    print_table(mode, results, presets, size, args.batch_size, length)
    keras.backend.clear_session()


if __name__ == "__main__":
  main()
