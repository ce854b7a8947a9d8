r"""Step-time overhead of gradient accumulation at an equal global batch, side by side.

One update of a global batch B made of N micro-batches of B/N (N = 1, 2, 4 by default)
through the real training loop (recurrent_bert.training.loop: the MLM + NSP loss, the
accumulation loop, clipping, AdamW) on synthetic batches. The three loops live in one
process and are timed round-robin (--repeats rounds of --steps updates; median and
minimum per N), so machine load hits each alike; the ratios are to N = 1.

  python benchmarks/accumulation.py                        # bert_mini, B=32, seq 128
  python benchmarks/accumulation.py --preset=bert_base --batch_size=16 --jit_compile
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_loop(preset, accumulation_steps, args, model_dir):
  """A PretrainingLoop reading micro-batches of batch_size / N, traced and warm."""
  import keras
  import tensorflow as tf

  from benchmarks.pretrain_throughput import synthetic_batch
  from recurrent_bert.config import get_preset
  from recurrent_bert.models import Pretrainer
  from recurrent_bert.models import build_encoder
  from recurrent_bert.training import loop
  from recurrent_bert.training import optimizers

  config = get_preset(preset)
  keras.utils.set_random_seed(0)
  model = Pretrainer(build_encoder(config), use_nsp=True)
  total = 10**6
  optimizer = optimizers.create_optimizer(
      model.trainable_variables, learning_rate=1e-4, num_train_steps=total, warmup_steps=1
  )
  micro = synthetic_batch(
      args.batch_size // accumulation_steps,
      args.seq_length,
      args.max_predictions_per_seq,
      config.vocab_size,
  )
  trainer = loop.PretrainingLoop(
      tf.distribute.get_strategy(),
      model,
      optimizer,
      lambda ctx, skip: tf.data.Dataset.from_tensors(micro).repeat(),
      model_dir=model_dir,
      global_batch_size=args.batch_size,
      num_train_steps=total,
      jit_compile=args.jit_compile,
      gradient_accumulation_steps=accumulation_steps,
  )
  trainer.train_steps(args.steps)  # tracing (and XLA compilation) outside the timing
  return trainer


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--preset", default="bert_mini")
  parser.add_argument("--batch_size", type=int, default=32, help="Global batch B.")
  parser.add_argument("--seq_length", type=int, default=128)
  parser.add_argument("--max_predictions_per_seq", type=int, default=20)
  parser.add_argument("--accumulation_steps", type=int, nargs="+", default=[1, 2, 4])
  parser.add_argument("--steps", type=int, default=3, help="Updates per timed call.")
  parser.add_argument("--repeats", type=int, default=5, help="Round-robin rounds.")
  parser.add_argument("--jit_compile", action="store_true")
  args = parser.parse_args()
  if any(args.batch_size % n for n in args.accumulation_steps):
    parser.error(f"--batch_size={args.batch_size} must divide by every N")

  with tempfile.TemporaryDirectory() as scratch:
    loops = {
        n: build_loop(args.preset, n, args, os.path.join(scratch, str(n)))
        for n in args.accumulation_steps
    }
    seconds = {n: [] for n in loops}
    for _ in range(args.repeats):
      for n, trainer in loops.items():
        start = time.perf_counter()
        trainer.train_steps(args.steps)
        seconds[n].append((time.perf_counter() - start) / args.steps)
  load = os.getloadavg()
  base = statistics.median(seconds[args.accumulation_steps[0]])
  print(
      f"{args.preset}, global batch {args.batch_size}, seq {args.seq_length}, "
      f"jit_compile={args.jit_compile}; median of {args.repeats} round-robin rounds of "
      f"{args.steps} updates; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
  )
  # The minimum is the round least disturbed by other work on a shared machine.
  base_min = min(seconds[args.accumulation_steps[0]])
  print("| N | micro-batch | s/update (median) | ratio to N=1 | s/update (min) | ratio |")
  print("|---|---|---|---|---|---|")
  for n, values in seconds.items():
    median, fastest = statistics.median(values), min(values)
    print(
        f"| {n} | {args.batch_size // n} | {median:.3f} | {median / base:.2f} | "
        f"{fastest:.3f} | {fastest / base_min:.2f} |"
    )


if __name__ == "__main__":
  main()
