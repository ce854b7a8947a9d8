"""Cost of the recurrent mixers relative to the feed-forward block they replace.

One block (the whole sublayer, projections included; `--dropout` adds dropout on its
output) forward + backward with respect to its input and weights, as a ratio to a
FeedForward block of the same shape, for

  base shape:      batch 8, T 128, H 768, d' 2048  (compute-bound)
  latency-bound:   batch 1, T 512, H 256, d' 688   (per-step overhead dominates, the
                   accelerator regime modelled on a CPU)

in graph mode (`tf.function`) and under XLA (`jit_compile=True`). Rows: SwishRNN at step
sizes 1, 2, 4 for each `--implementations` (`scan` is the plain `tf.scan` recurrence the
layer started from; `fused` is what the default `auto` runs), and the TRANS-BLSTM mixers
(SMALL: u = H/2, no projection; full: u = H, 2H -> H projection) for each
`--blstm_implementations` (multiply-adds per token vs the FFN's 8H²: SMALL 0.75×, full
2.25×; `--no-blstm` leaves them out, `--implementations` with no value leaves SwishRNN
out). `floor` rows time the
block with no recurrence at all (same memory traffic): how far a faster loop could go.
Every candidate of one (regime, mode) is timed in the same run: each repetition times the
FFN right before every candidate, and the table gives the median over repetitions of those
paired ratios, so the ratios survive a noisy shared machine.

`--memory` also reports each block's peak allocator memory for one forward + backward
relative to the FFN's (TF's CPU BFC allocator statistics; set before TensorFlow loads).

  .venv/bin/python benchmarks/recurrence.py                       # full table
  .venv/bin/python benchmarks/recurrence.py --regimes latency --modes xla --reps 5
  .venv/bin/python benchmarks/recurrence.py --regimes base --implementations \
      --blstm_implementations scan fused block --memory   # the BLSTM blocks only
"""

import argparse
import contextlib
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if "--memory" in sys.argv:
  os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"  # enables CPU allocator statistics

import keras
import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from recurrent_bert.layers import BidirectionalLSTM
from recurrent_bert.layers import FeedForward
from recurrent_bert.layers import SwishRNN
from recurrent_bert.layers import kernels
from recurrent_bert.layers import swish_rnn

REGIMES = {
    "base": dict(batch=8, length=128, hidden=768, inner=2048),
    "latency": dict(batch=1, length=512, hidden=256, inner=688),
}
STEP_SIZES = (1, 2, 4)


def _candidates(regime, implementations, blstm_implementations, unroll):
  h, d = regime["hidden"], regime["inner"]
  out = {"ffn": lambda: FeedForward(h, 4 * h)}
  for impl in implementations:
    for k in STEP_SIZES:
      kwargs = {"implementation": "fused" if impl == "floor" else impl}
      if unroll is not None:
        kwargs["unroll"] = unroll
      out[f"swishrnn {impl} k={k}"] = lambda k=k, kwargs=kwargs: SwishRNN(
          h, d, step_size=k, **kwargs
      )
  for impl in blstm_implementations:
    out[f"blstm {impl} SMALL"] = lambda impl=impl: BidirectionalLSTM(h // 2, implementation=impl)
    out[f"blstm {impl} full"] = lambda impl=impl: BidirectionalLSTM(
        h, projection_size=h, implementation=impl
    )
  return out


@contextlib.contextmanager
def _recurrence_replaced():
  """While tracing: SwishRNN's recurrence becomes position-wise work with the same memory
  reads and writes (x1, residual, gate in; the gated output out), i.e. the cost of the
  block without any recurrence: the floor a faster loop could reach (`floor` rows)."""
  original = swish_rnn.swish_rnn_recurrence

  def position_wise(
      x1,
      residual,
      alpha,
      beta,
      step_size=1,
      implementation="auto",
      unroll=None,
      gate=None,
      state_bias=None,
  ):
    del step_size, implementation, unroll
    c = x1 * tf.sigmoid(alpha * x1 + beta) + (x1 if residual is None else residual)
    return (c + state_bias) * gate

  swish_rnn.swish_rnn_recurrence = position_wise
  try:
    yield
  finally:
    swish_rnn.swish_rnn_recurrence = original


def _train_step(layer, xla, dropout_rate):
  # --dropout: on the sublayer output, as in a training step of the transformer block. Its
  # seed is state, which under XLA changes what the compiler can do (a tf.ensure_shape in
  # the block once cost 5x there and nothing without dropout). Off by default: on CPU,
  # XLA's random-number generation alone costs several FFNs, which hides the blocks.
  dropout = keras.layers.Dropout(dropout_rate)

  def step(x, mask, upstream):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = dropout(layer(x, mask), training=dropout_rate > 0)
      loss = tf.reduce_sum(y * upstream)
    return tape.gradient(loss, [x] + layer.trainable_weights)

  return tf.function(step, jit_compile=xla)


def measure(
    regime_name,
    mode,
    implementations,
    reps,
    blstm_implementations=("auto",),
    unroll=None,
    memory=False,
    dropout_rate=0.0,
):
  regime = REGIMES[regime_name]
  shape = (regime["batch"], regime["length"], regime["hidden"])
  rng = np.random.default_rng(0)
  x = tf.constant(rng.normal(size=shape).astype("float32"))
  upstream = tf.constant(rng.normal(size=shape).astype("float32"))
  mask = tf.ones(shape[:2], tf.int32)
  steps = {}
  candidates = _candidates(regime, implementations, blstm_implementations, unroll)
  for name, make in candidates.items():
    layer = make()
    layer.build(shape)
    steps[name] = _train_step(layer, mode == "xla", dropout_rate)
    with _recurrence_replaced() if " floor " in name else contextlib.nullcontext():
      for _ in range(2):  # trace / compile, warm up
        [g.numpy() for g in steps[name](x, mask, upstream)]

  def timed(step):
    start = time.perf_counter()
    [g.numpy() for g in step(x, mask, upstream)]
    return time.perf_counter() - start

  # Interleaved and paired: each round times the FFN right before every candidate, and
  # a candidate's ratio is the median over rounds of (its time / the FFN time just
  # before), so machine noise that drifts on a scale of seconds cancels.
  ffn_times, ratios = [], {name: [] for name in steps if name != "ffn"}
  for _ in range(reps):
    for name in ratios:
      ffn_times.append(timed(steps["ffn"]))
      ratios[name].append(timed(steps[name]) / ffn_times[-1])
  medians = {name: float(np.median(r)) for name, r in ratios.items()}
  medians["ffn"] = float(np.median(ffn_times))
  peaks = {}
  if memory:
    for name, step in steps.items():
      tf.config.experimental.reset_memory_stats("CPU:0")
      before = tf.config.experimental.get_memory_info("CPU:0")["current"]
      [g.numpy() for g in step(x, mask, upstream)]
      peaks[name] = tf.config.experimental.get_memory_info("CPU:0")["peak"] - before
  return medians, peaks


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=REGIMES)
  parser.add_argument("--modes", nargs="+", default=["graph", "xla"], choices=["graph", "xla"])
  parser.add_argument(
      "--implementations",
      nargs="*",
      default=["scan", "fused"],
      choices=["scan", "loop", "fused", "auto", "floor"],
      help="floor: the block with its recurrence replaced by position-wise "
      "work of the same memory traffic (not a real implementation)",
  )
  parser.add_argument("--reps", type=int, default=10)
  parser.add_argument(
      "--unroll",
      type=int,
      default=None,
      help="blocks of k positions per loop iteration, implementation loop "
      "(default: the layer's)",
  )
  parser.add_argument(
      "--blstm_implementations",
      nargs="*",
      default=["auto"],
      choices=kernels.offered(kernels.BLSTM_FIELD),  # TensorFlow's
      help="BLSTM rows (SMALL and full) for each; none: no BLSTM rows",
  )
  parser.add_argument("--no-blstm", dest="blstm_implementations", action="store_const", const=[])
  parser.add_argument(
      "--dropout",
      type=float,
      default=0.0,
      help="dropout rate on every block's output (training mode)",
  )
  parser.add_argument(
      "--memory", action="store_true", help="also report peak allocator memory relative to the FFN"
  )
  args = parser.parse_args(argv)

  print(
      f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs; forward + backward; "
      f"median of {args.reps} paired ratios to the FFN block of the same shape"
      + (f"; dropout {args.dropout} on every output" if args.dropout else "")
      + ("; peak memory: k=1 rows" if args.memory else "")
  )
  for regime in args.regimes:
    r = REGIMES[regime]
    for mode in args.modes:
      medians, peaks = measure(
          regime,
          mode,
          args.implementations,
          args.reps,
          blstm_implementations=args.blstm_implementations,
          unroll=args.unroll,
          memory=args.memory,
          dropout_rate=args.dropout,
      )
      print(
          f"\n{regime} (batch {r['batch']}, T {r['length']}, H {r['hidden']}, "
          f"d' {r['inner']}) — {mode}: ffn {medians['ffn'] * 1e3:.1f} ms"
      )
      names = [n for n in medians if n != "ffn"]
      rows = {}
      for name in names:
        ratio = medians[name]
        if name.startswith("swishrnn"):
          impl, k = name.split()[1], name.split("=")[1]
          rows.setdefault(f"swishrnn {impl}", {})[f"k={k}"] = ratio
        else:
          rows[name] = {"": ratio}
      print("| block | k=1 | k=2 | k=4 |" + (" peak mem vs ffn |" if peaks else ""))
      print("|---|---|---|---|" + ("---|" if peaks else ""))
      for row, cells in rows.items():
        if "" in cells:
          line = f"| {row} | {cells['']:.2f}× | | |"
          key = row
        else:
          line = (
              "| " + row + " | " + " | ".join(f"{cells[f'k={k}']:.2f}×" for k in STEP_SIZES) + " |"
          )
          key = f"{row} k=1"
        if peaks:
          line += f" {peaks[key] / max(peaks['ffn'], 1):.2f}× |"
        print(line)
      sys.stdout.flush()


if __name__ == "__main__":
  main()
