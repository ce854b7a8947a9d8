"""Forward + backward step time of every family, side by side in one run.

  python benchmarks/step_time.py            # base presets, batch 8, seq 128
  python benchmarks/step_time.py --quick    # tiny presets, for a smoke check
  python benchmarks/step_time.py --families=bert,bert_rab,swishrnn --no_xla
  python benchmarks/step_time.py --families=blstm --blstm_implementations scan fused

Each step is the pretraining loss (MLM at 20 positions + NSP, or MLM only with
`--no_nsp`) and its gradients for every weight, no optimizer update. Models are timed
round-robin (one step of each, then the next round) so machine noise hits all of them
alike; the table gives the median per model and its ratio to BERT-orig and BERT-rab, in
graph mode and under XLA, with the ratio of multiply-adds to BERT-orig's beside the
measured one (`flops_per_token`). `--blstm_implementations` times every preset with a
BLSTM once per implementation (rows `preset [implementation]`), e.g. before and after.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from recurrent_bert.config import BLSTM_IMPLEMENTATIONS
from recurrent_bert.config import FAMILIES
from recurrent_bert.config import resolve_config
from recurrent_bert.models import Pretrainer
from recurrent_bert.models import build_encoder


def flops_per_token(config, length, predictions=20):
  """Multiply-adds per token of the encoder and the MLM head (the issue-20 count).

  Per layer: attention 4H² + 2TH (projections; scores and context), the FFN 2·H·I, a
  BLSTM of u units per direction 8·H·u (input) + 8u² (recurrent) + 2u·H (projection),
  SwishRNN 3·H·d'. The MLM head's H² + H·V runs at `predictions` of T positions.
  Embedding lookups, LayerNorms, activations, the pooler and NSP are left out.
  """
  h, c = config.hidden_size, config
  layer = (4 * h * h + 2 * length * h) if c.use_attention else 0
  if c.mixer in ("ffn", "parallel_blstm"):
    layer += 2 * h * c.intermediate_size
  if c.mixer in ("blstm", "parallel_blstm"):
    u = c.resolved_blstm_units
    layer += 8 * h * u + 8 * u * u + (2 * u * h if c.blstm_projection else 0)
  if c.mixer == "swishrnn":
    layer += 3 * h * c.resolved_swish_rnn_size
  head = predictions / length * (h * h + h * c.vocab_size)
  return c.num_layers * layer + head


def make_step(model, jit_compile):
  def step(inputs, mlm_labels, nsp_labels):
    with tf.GradientTape() as tape:
      out = model(inputs, training=True)
      loss = tf.reduce_mean(
          tf.nn.sparse_softmax_cross_entropy_with_logits(mlm_labels, out["mlm_logits"])
      )
      if "nsp_logits" in out:
        loss += tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(nsp_labels, out["nsp_logits"])
        )
    grads = tape.gradient(loss, model.trainable_variables)
    # Without NSP the pooler gets no gradient (None).
    return loss, tf.add_n([tf.reduce_sum(tf.convert_to_tensor(g)) for g in grads if g is not None])

  return tf.function(step, jit_compile=jit_compile)


def make_batch(vocab_size, batch, length, predictions=20, seed=0):
  rng = np.random.default_rng(seed)
  inputs = {
      "input_ids": tf.constant(rng.integers(5, vocab_size, (batch, length)), tf.int32),
      "input_mask": tf.ones((batch, length), tf.int32),
      "segment_ids": tf.constant(
          np.repeat([[0] * (length // 2) + [1] * (length - length // 2)], batch, 0), tf.int32
      ),
      "masked_lm_positions": tf.constant(
          np.sort(rng.choice(np.arange(1, length), (batch, predictions)), -1), tf.int32
      ),
  }
  mlm_labels = tf.constant(rng.integers(5, vocab_size, (batch, predictions)), tf.int32)
  nsp_labels = tf.constant(rng.integers(0, 2, (batch,)), tf.int32)
  return inputs, mlm_labels, nsp_labels


def measure(configs, batch, length, jit_compile, repeats, warmup, use_nsp=True):
  """Median seconds per step for each {row name: ModelConfig}, timed round-robin.

  A model that fails to compile or run (e.g. out of memory) is reported as the error
  text instead of a time, and the others are still measured.
  """
  steps, batches, failures = {}, {}, {}
  for name, config in configs.items():
    try:
      model = Pretrainer(build_encoder(config), use_nsp=use_nsp)
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


def print_table(mode, results, configs, size, batch, length):
  load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
  print(
      f"\n{mode}: forward+backward step time, batch {batch}, seq {length} "
      f"({os.cpu_count()} CPU cores, load average now {load})"
  )
  print("| preset | ms | ×BERT | FLOPs ×BERT | ×BERT-rab |")
  print("|---|---|---|---|---|")
  bert_flops = flops_per_token(configs[f"bert_{size}"], length)
  for name, config in configs.items():
    r = results[name]
    flops = f"{flops_per_token(config, length) / bert_flops:.2f}"
    if isinstance(r, str):
      print(f"| {name} | failed: {r} | | {flops} | |")
      continue
    ratio = lambda ref, r=r: (
        f"{r / results[ref]:.2f}" if not isinstance(results.get(ref), str) else "-"
    )
    print(
        f"| {name} | {1000 * r:.0f} | {ratio(f'bert_{size}')} | {flops} | "
        f"{ratio(f'bert_rab_{size}')} |"
    )
  print(flush=True)


def main():
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
  )
  parser.add_argument("--quick", action="store_true", help="tiny presets, batch 8, seq 64")
  parser.add_argument("--size", default=None, help="preset size (default base)")
  parser.add_argument("--families", default=",".join(FAMILIES))
  parser.add_argument("--batch_size", type=int, default=8)
  parser.add_argument("--seq_length", type=int, default=None)
  parser.add_argument("--repeats", type=int, default=None)
  parser.add_argument("--no_xla", action="store_true", help="graph mode only")
  parser.add_argument("--no_nsp", action="store_true", help="MLM loss only")
  parser.add_argument(
      "--blstm_implementations",
      nargs="+",
      default=["auto"],
      choices=BLSTM_IMPLEMENTATIONS,
      help="time presets with a BLSTM once per implementation",
  )
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
  configs = {}
  for family in families:
    config = resolve_config(f"{family}_{size}")
    implementations = (
        args.blstm_implementations if config.mixer in ("blstm", "parallel_blstm") else ["auto"]
    )
    for impl in implementations:
      name = f"{family}_{size}" + (f" [{impl}]" if len(implementations) > 1 else "")
      configs[name] = config if impl == "auto" else config.replace(blstm_implementation=impl)

  modes = [("graph", False)] + ([] if args.no_xla else [("xla", True)])
  for mode, jit in modes:
    print(
        f"measuring {mode}: {len(configs)} models, batch {args.batch_size}, "
        f"seq {length}, median of {repeats}" + (", MLM loss only" if args.no_nsp else "") + " ...",
        flush=True,
    )
    results = measure(
        configs, args.batch_size, length, jit, repeats, warmup=2, use_nsp=not args.no_nsp
    )
    print_table(mode, results, configs, size, args.batch_size, length)
    keras.backend.clear_session()


if __name__ == "__main__":
  main()
