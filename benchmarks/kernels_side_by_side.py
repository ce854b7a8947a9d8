"""The recurrences and the attention under JAX, kernel against kernel, side by side in one run.

  python benchmarks/kernels_side_by_side.py          # the base presets' shapes, on a GPU
  python benchmarks/kernels_side_by_side.py --smoke  # tiny, Pallas interpreted: a CPU rehearsal
  python benchmarks/kernels_side_by_side.py --backend=torch  # SwishRNN under PyTorch:
      # the Triton kernels (TRITON_INTERPRET=1 at start interprets them) vs the portable loop

One forward + backward, with respect to every input, of

SwishRNN's gated recurrence `(c + b_c) * gate`, c[t] = Swish(c[t-k] - x1[t]) + x1[t], at
step sizes k = 1, 2, 4 (swishrnn_base: [B, T, d'] = [64, 128, 2048], float32 as the layer
runs it):
  portable        the `lax.scan` over T/k blocks with the hand-written reverse scan, the
                  gating outside it (what "auto" ran on a GPU before the kernels);
  pallas a/b/c    the Pallas kernels, tiling block_d/num_warps/unroll (the first row is
                  `pallas_swish_rnn.TILING`, the default), to choose the default on a card;
  floor           the gating alone (c = x1): the same memory passes, no recurrence.

The BLSTM's both directions (trans_blstm_2_base: [B, T, D] = [64, 128, 768], u = 768;
the SMALL variant u = 384), bfloat16 inputs and weights as under mixed precision:
  portable        the scan with float32 cell state and the hand-written backward (one
                  matmul a step; R's gradient one matmul after the loop); again with 8
                  steps per loop iteration (`portable_blstm.UNROLL`, to choose on a card);
  autodiff        the same forward scan differentiated by JAX (two matmuls a step);
  pallas u/b/k/s, n steps an iteration
                  the Pallas kernels, one per time step and pass (`pallas_blstm`), tiling
                  block_u/block_b/block_k/num_stages and steps_per_iteration (the first
                  row is `pallas_blstm.TILING`);
  cudnn           `jax.experimental.rnn` (float32; a GPU only), what "auto" runs there;
  floor           the input projections alone (x W of both directions): the FLOPs the
                  recurrence adds to, with no recurrence.

The attention of bert_base ([B, T, A, d] = [64, 128, 12, 64], bfloat16, with a [1, A, T, T]
relative bias and padded keys), without dropout and with the recipe's dropout 0.1:
  floor           `jax.nn.dot_product_attention`, no dropout (cuDNN's flash attention on
                  a GPU, XLA's form elsewhere): what attention costs without dropout;
  written-out     the layer's written-out form (logits, bias, float32 softmax, the
                  package's hashed dropout, context), what JAX trains with off a GPU;
  pallas          the package's Pallas kernels, dropout drawn inside them.
With dropout the three draw other masks (the floor none), so that group's rows compare
times only; without it, each is checked against the written-out form.

Each repetition times every candidate of a group once in turn; rows give the median ms and
ratios to the group's floor and first candidate, so the ratios survive a busy card. Each
row's outputs and gradients are compared with the group's first candidate (the largest
difference relative to the first's largest value, over the output and every gradient), so
a run on a card checks the compiled kernels' numbers as well as their time.
"""

import argparse
import json
import os
import statistics
import sys
import time

# Keras reads its backend once, at import: --backend's value ("torch" can only be that).
os.environ["KERAS_BACKEND"] = "torch" if {"torch", "--backend=torch"} & set(sys.argv[1:]) else "jax"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
from jax import numpy as jnp
import numpy as np

from recurrent_bert.layers import dropout as dropout_layer
from recurrent_bert.layers.kernels import jax_cudnn_lstm
from recurrent_bert.layers.kernels import pallas_attention
from recurrent_bert.layers.kernels import pallas_blstm
from recurrent_bert.layers.kernels import pallas_swish_rnn
from recurrent_bert.layers.kernels import portable_blstm
from recurrent_bert.layers.kernels import portable_swish_rnn

TILINGS = (
    pallas_swish_rnn.TILING,
    pallas_swish_rnn.Tiling(block_d=128, num_warps=4, unroll=1),
    pallas_swish_rnn.Tiling(block_d=128, num_warps=4, unroll=16),
    pallas_swish_rnn.Tiling(block_d=128, num_warps=1, unroll=8),
    pallas_swish_rnn.Tiling(block_d=64, num_warps=2, unroll=8),
    pallas_swish_rnn.Tiling(block_d=256, num_warps=8, unroll=8),
)


def swish_rnn_candidates(k, interpret, tilings, kernel="pallas"):
  """{name: f(x1, gate, alpha, beta, state_bias) -> [B, T, D]}, the floor first; the
  kernels are `kernel`'s: "pallas" (JAX) or "triton" (PyTorch)."""

  def floor(x1, gate, alpha, beta, state_bias):
    return (x1 + state_bias) * gate

  def portable(x1, gate, alpha, beta, state_bias):
    return (portable_swish_rnn.recurrence(x1, None, alpha, beta, k) + state_bias) * gate

  def pallas(tiling):
    def run(x1, gate, alpha, beta, state_bias):
      return pallas_swish_rnn.recurrence(
          x1, None, alpha, beta, k, gate, state_bias, interpret=interpret, tiling=tiling
      )

    return run

  def triton(tiling):
    from recurrent_bert.layers.kernels import triton_swish_rnn

    def run(x1, gate, alpha, beta, state_bias):
      return triton_swish_rnn.recurrence(x1, None, alpha, beta, k, gate, state_bias, tiling)

    return run

  kernel_with = pallas if kernel == "pallas" else triton
  candidates = {"floor": floor, "portable": portable}
  for tiling in tilings:
    candidates[tiling_name(kernel, tiling)] = kernel_with(tiling)
  return candidates


def tiling_name(kernel, tiling):
  """A kernel candidate's row name: "pallas 128/4/8" (block_d/num_warps/unroll)."""
  return f"{kernel} " + "{}/{}/{}".format(*tiling)


def write_rows(path, device, rows, **meta):
  """The rows as JSON at `path`, atomically (rewritten after every group: a run cut short
  keeps what it finished)."""
  with open(path + ".tmp", "w") as f:
    json.dump(dict(device=device, **meta, rows=rows), f, indent=1)
  os.replace(path + ".tmp", path)


# At trans_blstm_2_base's size (batch 64, u = 768) the default runs 2 x 24 = 48 programs a
# step, on a card of 132 SMs; half the units or half the rows a program make 96.
BLSTM_TILINGS = (
    pallas_blstm.TILING,
    pallas_blstm.TILING._replace(block_u=16),
    pallas_blstm.TILING._replace(block_b=32),
    pallas_blstm.TILING._replace(block_u=64),
    pallas_blstm.TILING._replace(num_stages=1),
    pallas_blstm.TILING._replace(steps_per_iteration=4),
)


def blstm_candidates(lengths, on_gpu, interpret, tilings=BLSTM_TILINGS):
  """{name: f(x, kernel, recurrent_kernel, bias, kernel_b, recurrent_kernel_b, bias_b)
  -> [B, T, 2u] or the floor's projections}, the floor first."""

  def floor(x, kernel, recurrent_kernel, bias, kernel_b, recurrent_kernel_b, bias_b):
    return jnp.concatenate([x @ kernel + bias, x @ kernel_b + bias_b], axis=-1)

  def portable(unroll):
    def run(x, *weights):
      return portable_blstm.bidirectional_lstm(x, lengths, weights[:3], weights[3:], unroll)

    return run

  def autodiff(x, *weights):
    original = portable_blstm.recurrence

    def differentiated(steps, recurrent_kernels, batch, units, length, unroll):
      return portable_blstm._states(steps, recurrent_kernels, batch, units, length)[0]

    portable_blstm.recurrence = differentiated  # traced once, inside jit
    try:
      return portable(1)(x, *weights)
    finally:
      portable_blstm.recurrence = original

  def cudnn(x, *weights):
    return jax_cudnn_lstm.bidirectional_lstm(x, lengths, weights[:3], weights[3:])

  def pallas(tiling):
    def run(x, *weights):
      return pallas_blstm.bidirectional_lstm(
          x, lengths, weights[:3], weights[3:], interpret=interpret, tiling=tiling
      )

    return run

  candidates = {
      "floor": floor,
      "portable": portable(1),
      "portable, 8 steps an iteration": portable(8),
  }
  candidates["autodiff"] = autodiff
  for tiling in tilings:
    sizes = (tiling.block_u, tiling.block_b, tiling.block_k, tiling.num_stages)
    name = f"pallas {'/'.join(map(str, sizes))}, {tiling.steps_per_iteration} steps an iteration"
    candidates[name] = pallas(tiling)
  if on_gpu:
    candidates["cudnn"] = cudnn
  return candidates


def attention_candidates(rate, interpret):
  """{name: f(q, k, v, bias, key_is_real) -> [B, T, A, d]}, the floor first."""
  scale = lambda q: 1.0 / q.shape[-1] ** 0.5
  seed = jnp.array([1, 2], jnp.uint32)

  def floor(q, k, v, bias, key_is_real):
    on_gpu = jax.devices()[0].platform == "gpu"
    return jax.nn.dot_product_attention(
        q,
        k,
        v,
        bias=bias,
        mask=key_is_real[:, None, None, :],
        scale=scale(q),
        implementation="cudnn" if on_gpu else None,
    )

  def written_out(q, k, v, bias, key_is_real):
    logits = jnp.einsum("bqnh,bknh->bnqk", q * jnp.asarray(scale(q), q.dtype), k) + bias
    logits = jnp.where(key_is_real[:, None, None, :], logits.astype(jnp.float32), -3e38)
    probs = jax.nn.softmax(logits, axis=-1).astype(q.dtype)
    if rate:
      probs = dropout_layer._jax_dropout(probs, rate, None, seed)  # pylint: disable=protected-access
    return jnp.einsum("bnqk,bknh->bqnh", probs, v)

  def pallas(one_pass_max_length=None):
    return lambda q, k, v, bias, key_is_real: pallas_attention.attention(
        q, k, v, key_is_real, bias, scale(q), rate, seed, interpret, one_pass_max_length
    )

  # "pallas" takes the one-pass backward at T <= 128; the last, the two backward kernels.
  return {
      "floor": floor,
      "written-out": written_out,
      "pallas": pallas(),
      "pallas, two backward kernels": pallas(0),
  }


def _step(function):
  """jitted (upstream, inputs) -> (output, gradients of sum(output · upstream) on every
  input); the upstream is an argument, so XLA cannot fold it into the program."""

  def loss(upstream, *inputs):
    out = function(*inputs)
    return (out.astype(jnp.float32) * upstream[..., : out.shape[-1]]).sum(), out

  def step(upstream, *inputs):
    floating = lambda x: jnp.issubdtype(x.dtype, jnp.floating)  # not a mask
    argnums = tuple(i + 1 for i, x in enumerate(inputs) if floating(x))
    (_, out), grads = jax.value_and_grad(loss, argnums=argnums, has_aux=True)(upstream, *inputs)
    return out, grads

  return jax.jit(step)


def _relative_difference(a, b):
  """The largest |a - b| / max |b| over the leaves (outputs and each gradient)."""
  pairs = zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))
  as_f32 = lambda t: t.astype(jnp.float32)
  return max(
      float(
          jnp.max(jnp.abs(as_f32(x) - as_f32(y))) / jnp.maximum(jnp.max(jnp.abs(as_f32(y))), 1e-30)
      )
      for x, y in pairs
  )


class JaxRuntime:
  """What `measure` needs of a backend: arrays, a differentiated step, waiting, comparing."""

  def array(self, values, dtype="float32"):
    return jnp.asarray(values, dtype)

  step = staticmethod(_step)
  difference = staticmethod(_relative_difference)
  ready = staticmethod(jax.block_until_ready)


class TorchRuntime:
  """`JaxRuntime`'s four under PyTorch, eagerly (autograd), on the GPU where there is one."""

  def __init__(self):
    import torch

    self.torch = torch
    self.device = "cuda" if torch.cuda.is_available() else "cpu"

  def array(self, values, dtype="float32"):
    return self.torch.tensor(
        np.asarray(values), dtype=getattr(self.torch, dtype), device=self.device
    )

  def step(self, function):
    """(upstream, inputs) -> (output, gradients of sum(output · upstream) on every float
    input), as `_step`'s."""

    def step(upstream, *inputs):
      leaves = [x.detach().requires_grad_() if x.is_floating_point() else x for x in inputs]
      out = function(*leaves)
      loss = (out.float() * upstream[..., : out.shape[-1]]).sum()
      floats = [x for x in leaves if x.requires_grad]
      # The floor leaves alpha and beta unused: zeros, as JAX gives.
      grads = self.torch.autograd.grad(loss, floats, allow_unused=True, materialize_grads=True)
      return out.detach(), grads

    return step

  def ready(self, result):
    if self.device == "cuda":
      self.torch.cuda.synchronize()
    return result

  def difference(self, a, b):
    """`_relative_difference` of two steps' (output, gradients)."""
    pairs = zip([a[0], *a[1]], [b[0], *b[1]])
    return max(
        float((x.float() - y.float()).abs().max() / y.float().abs().max().clamp(min=1e-30))
        for x, y in pairs
    )


def measure(group, candidates, inputs, upstream_shape, reps, compare=True, runtime=None):
  """Rows {group, name, ms, x_floor, x_first, max_diff, first_call_s}; 'first' is the
  candidate after the floor, the one the others are compared with. Each candidate's first
  call (its compilation, or its read from a persistent compilation cache) is timed and
  printed as it ends, so a slow one shows which it is; `reps` 0 stops there. `runtime`:
  a `JaxRuntime` (the default) or `TorchRuntime`."""
  runtime = runtime or JaxRuntime()
  upstream = runtime.array(np.random.default_rng(0).normal(size=upstream_shape))
  steps = {name: runtime.step(f) for name, f in candidates.items()}
  results, first_call_s = {}, {}
  for name, step in steps.items():
    start = time.perf_counter()
    results[name] = runtime.ready(step(upstream, *inputs))
    first_call_s[name] = time.perf_counter() - start
    print(f"  {group}, {name}: first call {first_call_s[name]:.1f} s", flush=True)
  if not reps:
    return []
  times = {name: [] for name in steps}
  for _ in range(reps):
    for name, step in steps.items():
      start = time.perf_counter()
      runtime.ready(step(upstream, *inputs))
      times[name].append(time.perf_counter() - start)
  ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
  floor, first = list(steps)[:2]
  return [
      dict(
          group=group,
          name=name,
          ms=ms[name],
          x_floor=ms[name] / ms[floor],
          x_first=ms[name] / ms[first],
          max_diff=None
          if name == floor or not compare
          else runtime.difference(results[name], results[first]),
          first_call_s=first_call_s[name],
      )
      for name in steps
  ]


def swish_rnn_rows(shape, reps, interpret, tilings, runtime=None, kernel="pallas"):
  runtime = runtime or JaxRuntime()
  rng = np.random.default_rng(0)
  depth = shape[-1]
  sequence = lambda: runtime.array(rng.normal(size=shape))
  vector = lambda low, high: runtime.array(rng.uniform(low, high, size=depth))
  inputs = (sequence(), sequence(), vector(0.5, 1.5), vector(-1, 1), vector(-1, 1))
  rows = []
  for k in (1, 2, 4):
    # The tilings compared at k = 1; the default alone at k = 2 and 4 (each tiling is two
    # more kernels to compile, seconds each on a card).
    candidates = swish_rnn_candidates(k, interpret, tilings if k == 1 else tilings[:1], kernel)
    rows += measure(f"swishrnn k={k}", candidates, inputs, shape, reps, runtime=runtime)
  return rows


def attention_rows(shape, reps, interpret):
  """Both attention groups at q's `shape` [B, T, A, d]: no dropout, then dropout 0.1."""
  rng = np.random.default_rng(2)
  batch, length, heads, _ = shape
  cast = lambda a: jnp.asarray(a, jnp.bfloat16)
  q, k, v = (cast(rng.normal(size=shape)) for _ in range(3))
  bias = cast(rng.normal(size=(1, heads, length, length)))
  key_is_real = jnp.asarray(
      np.arange(length)[None, :] < rng.integers(length // 2, length + 1, (batch, 1))
  )
  inputs = (q, k, v, bias, key_is_real)
  rows = []
  for rate in (0.0, 0.1):
    group = f"attention, dropout {rate:g}"
    candidates = attention_candidates(rate, interpret)
    rows += measure(group, candidates, inputs, shape, reps, compare=not rate)
  return rows


def blstm_rows(shape, units, reps, on_gpu, interpret, tilings=BLSTM_TILINGS):
  rng = np.random.default_rng(1)
  batch, length, depth = shape
  cast = lambda a: jnp.asarray(a, jnp.bfloat16)
  x = cast(rng.normal(size=shape))
  weights = []
  for _ in range(2):
    weights += [cast(rng.normal(scale=0.02, size=(depth, 4 * units)))]
    weights += [cast(rng.normal(scale=0.02, size=(units, 4 * units)))]
    weights += [cast(np.zeros(4 * units))]
  lengths = jnp.full((batch,), length, jnp.int32)
  candidates = blstm_candidates(lengths, on_gpu, interpret, tilings)
  return measure(f"blstm u={units}", candidates, (x, *weights), (batch, length, 8 * units), reps)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch_size", type=int, default=64)
  parser.add_argument("--seq_length", type=int, default=128)
  parser.add_argument("--swish_rnn_size", type=int, default=2048, help="d' (swishrnn_base)")
  parser.add_argument("--hidden_size", type=int, default=768, help="H (the BLSTM's u: H, H/2)")
  parser.add_argument("--reps", type=int, default=20, help="0: compile (first calls) only")
  parser.add_argument("--smoke", action="store_true", help="tiny shapes, Pallas interpreted")
  parser.add_argument("--heads", type=int, default=12, help="attention heads (of H)")
  parser.add_argument("--only", choices=("swishrnn", "blstm", "attention"), help="one group")
  parser.add_argument("--json", help="also write the rows here")
  parser.add_argument(
      "--backend",
      choices=("jax", "torch"),
      default="jax",
      help="torch: SwishRNN's group alone, the Triton kernels (interpreted where the process "
      "started with TRITON_INTERPRET=1) against PyTorch's portable loop",
  )
  args = parser.parse_args(argv)
  if args.backend == "torch":
    return torch_main(args)
  device = jax.devices()[0]
  on_gpu = device.platform == "gpu"
  interpret = args.smoke or not on_gpu
  batch, length, hidden = args.batch_size, args.seq_length, args.hidden_size
  swish_shape, reps, tilings = (batch, length, args.swish_rnn_size), args.reps, TILINGS
  blstm_tilings = BLSTM_TILINGS
  if args.smoke:
    batch, length, hidden, reps, tilings = 2, 16, 8, min(reps, 2), TILINGS[:2]
    blstm_tilings = BLSTM_TILINGS[:1]
    swish_shape = (batch, length, 8)
  heads = 2 if args.smoke else args.heads
  attention_shape = (batch, length, heads, 16 if args.smoke else hidden // heads)
  print(
      f"One forward + backward on {device.device_kind} ({device.platform})"
      f"{', Pallas interpreted' if interpret else ''}: SwishRNN [B, T, d'] = "
      f"{list(swish_shape)} float32; BLSTM [B, T, H] = {[batch, length, hidden]} bfloat16; "
      f"attention [B, T, A, d] = {list(attention_shape)} bfloat16"
  )
  rows = []

  def keep(new_rows):
    rows.extend(new_rows)
    if args.json:
      write_rows(args.json, device.device_kind, rows)

  if args.only in (None, "swishrnn"):
    keep(swish_rnn_rows(swish_shape, reps, interpret, tilings))
  if args.only in (None, "blstm"):
    for units in (hidden, hidden // 2):
      keep(blstm_rows((batch, length, hidden), units, reps, on_gpu, interpret, blstm_tilings))
  if args.only in (None, "attention"):
    keep(attention_rows(attention_shape, reps, interpret))
  if reps:
    print_rows(rows, args.only, tiling_name("pallas", pallas_swish_rnn.TILING))


def torch_main(args):
  """--backend=torch: SwishRNN's group under PyTorch, eagerly, with the Triton kernels at
  the same tilings as Pallas' (where they can run here) against the portable loop."""
  from recurrent_bert.layers import kernels

  if args.only not in (None, "swishrnn"):
    sys.exit(f"kernels_side_by_side.py: --backend=torch times swishrnn only, not {args.only}")
  runtime = TorchRuntime()
  device = runtime.torch.cuda.get_device_name(0) if runtime.device == "cuda" else "cpu"
  shape, reps, tilings = (args.batch_size, args.seq_length, args.swish_rnn_size), args.reps, TILINGS
  if args.smoke:
    shape, reps, tilings = (2, 16, 8), min(reps, 2), TILINGS[:2]
  default = None
  if kernels.triton_runs():  # the sweep starts from the Triton kernels' own default
    from recurrent_bert.layers.kernels import triton_swish_rnn

    default = triton_swish_rnn.TILING
    tilings = (default,) + tuple(t for t in tilings if t != default)
  else:
    print(f"Triton's kernels cannot run here: they need {kernels.triton_missing()}")
    tilings = ()
  interpreted = kernels.triton_interpreted()
  print(
      f"One forward + backward under PyTorch on {device}"
      f"{', Triton interpreted' if interpreted else ''}: SwishRNN [B, T, d'] = {list(shape)} "
      "float32"
  )
  rows = swish_rnn_rows(shape, reps, interpreted, tilings, runtime, kernel="triton")
  if args.json:
    write_rows(args.json, device, rows, backend="torch")
  if reps:
    print_rows(rows, "swishrnn", default and tiling_name("triton", default))


def print_rows(rows, only, default):
  """The table, and swishrnn_base's recurrences per step: portable, and the `default`
  kernel's row name (None: no kernel ran)."""
  print("\n| group | candidate | ms | × floor | × first | max difference vs first (relative) |")
  print("|---|---|---|---|---|---|")
  for r in rows:
    diff = "-" if r["max_diff"] is None else f"{r['max_diff']:.1e}"
    print(
        f"| {r['group']} | {r['name']} | {r['ms']:.3f} | {r['x_floor']:.2f} | "
        f"{r['x_first']:.2f} | {diff} |"
    )
  # What to set as the defaults: each group's fastest row, the floor (no recurrence) aside.
  print("\n| group | fastest | ms |\n|---|---|---|")
  for group in dict.fromkeys(r["group"] for r in rows):
    best = min(
        (r for r in rows if r["group"] == group and r["name"] != "floor"),
        key=lambda r: r["ms"],
        default=None,
    )
    if best:
      print(f"| {group} | {best['name']} | {best['ms']:.3f} |")
  per_step = {
      name: 4 * sum(r["ms"] for r in rows if r["name"] == name and r["group"].startswith("swish"))
      for name in ("portable", default)
  }
  if only != "blstm":
    kernel_part = f", {default} {per_step[default]:.1f} ms" if default else ""
    print(
        f"\nswishrnn_base's 12 layers (k = 1, 2, 4, four times each): portable "
        f"{per_step['portable']:.1f} ms{kernel_part} a step"
    )


if __name__ == "__main__":
  main()
