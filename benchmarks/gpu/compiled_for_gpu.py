"""The kernels a training step launches on an H100, read on a machine without a GPU.

  benchmarks/gpu/fetch_cuda_plugin.sh          # once: JAX's CUDA plugin into .cuda_plugin/
  python benchmarks/gpu/compiled_for_gpu.py --presets=bert_base,trans_blstm_2_base
  python benchmarks/gpu/compiled_for_gpu.py --presets=trans_blstm_2_base \\
      --blstm_implementations portable pallas --hlo_dir=output/gpu_hlo

XLA compiles for a GPU it does not have when given the device's description (its
"deviceless" compilation): this script builds each preset's JAX training step as
`rbert-pretrain` runs it (training/jax_loop.py's jitted step: loss, gradients, global-norm
clipping, AdamW), at batch B x T in mixed bfloat16, with the layers choosing their CUDA
paths (`kernels.jax_target("gpu")`: the Pallas kernels compiled, cuDNN's attention and
LSTM), compiles it for an H100 SXM with JAX's CUDA plugin (which the package does not
install: `fetch_cuda_plugin.sh` puts the wheels of the installed jaxlib's version in
.cuda_plugin/, about 180 MB), and counts the kernels in the optimized program: per step
(each while loop's body counted once per trip), by kind, and for every while loop its
trip count and kernels per trip. Nothing runs, so nothing is timed: on a GPU each kernel
costs microseconds of launch and tail whatever its work, so a step of many small kernels
is slow for that alone, and the count says where. Beside the count: the bytes the kernels
outside while loops read and write (their operands and results added up, `KernelCount`;
at an H100's 3.35 TB/s, 1 GB is 0.3 ms), and how many kernels only transpose. XLA
autotunes nothing here (no device), so its GEMM choices may differ from a card's; the
fusions, layouts and loops do not.

Kinds: "gemm" (XLA's matmul fusions and cuBLAS calls), "triton" (Pallas kernels), "cudnn"
(cuDNN's attention and RNN calls), "loop" and "reduction" fusions (XLA's elementwise and
reducing kernels), "copy", "other".
"""

import argparse
import collections
import dataclasses
import json
import os
import re
import sys
import time
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGIN_DIR = os.path.join(ROOT, ".cuda_plugin")
# step_inputs.py (batches and preset variants) is imported once the backend is set.
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

# XLA's description of an H100 SXM (80 GB HBM3): what its deviceless compiler reads
# instead of asking a device (the values a CUDA driver reports for that card).
H100_TARGET = """
gpu_device_info {
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: 3352320000000
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: 84929347584
  shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 minor: 0 }
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
dnn_version_info { major: 9 minor: 8 }
runtime_version { major: 12 minor: 8 }
device_description_str: "NVIDIA H100 80GB HBM3"
"""
# The same card's name, for Pallas' lowering of the kernels (`lowering_for_a_gpu`).
H100_KIND = re.search(r'device_description_str: "([^"]+)"', H100_TARGET).group(1)

NOT_KERNELS = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant", "after-all"}
_COMPUTATION = re.compile(r"^(ENTRY )?%?([\w.\-]+) ")
_OPCODE = re.compile(r"[\]})] ([a-z][a-z\-]*)\(")
_ARRAY = re.compile(r"\b(pred|[subf]\d+|bf16)\[([\d,]*)\]")
_BITS = {"pred": 8, "bf16": 16}


@dataclasses.dataclass
class Loop:
  body: str
  trips: int  # -1 where XLA does not know the trip count
  per_trip: collections.Counter


@dataclasses.dataclass
class KernelCount:
  """The kernels of one compiled program: per step by kind, and its while loops.

  `bytes_per_step` adds up the operands and results of the kernels outside while loops,
  whole: what they would read from and write to the GPU's memory if each read every
  operand once (an upper bound: a kernel may read part of an operand, or read it through
  a cache; sliced and in-place operands of fusions count as their slices). Inside a
  loop a kernel takes a whole stack of which it touches one step, which the program text
  does not say for Pallas kernels, so loops add nothing here. A change that moves fewer
  bytes through memory shows here. `transposes` counts the kernels whose fusion is named
  for a transpose: data moved to another layout and nothing computed.
  """

  per_step: collections.Counter
  loops: List[Loop]
  bytes_per_step: int = 0
  transposes: int = 0

  @property
  def total(self) -> int:
    return sum(self.per_step.values())

  @property
  def in_loops(self) -> int:
    return sum(sum(loop.per_trip.values()) * max(loop.trips, 1) for loop in self.loops)


def computations(hlo_text: str) -> Dict[str, List[str]]:
  """Optimized HLO text -> {computation name: its instruction lines}; "ENTRY" names the
  entry computation too."""
  out, name = {}, None
  for line in hlo_text.splitlines():
    if line and not line[0].isspace():
      match = _COMPUTATION.match(line)
      name = match.group(2) if match and line.rstrip().endswith("{") else None
      if name:
        out[name] = []
        if match.group(1):
          out["ENTRY"] = out[name]
    elif name and line.strip():
      out[name].append(line.strip())
  return out


def _arrays(type_text: str) -> List[tuple]:
  """(bits per element, elements) of each array in an HLO type."""
  arrays = []
  for dtype, dims in _ARRAY.findall(type_text):
    elements = 1
    for size in filter(None, dims.split(",")):
      elements *= int(size)
    arrays.append((_BITS.get(dtype, int(dtype[1:]) if dtype[1:].isdigit() else 32), elements))
  return arrays


def array_bytes(type_text: str) -> int:
  """Bytes of the arrays in an HLO type, e.g. "(bf16[8,4]{1,0}, f32[])" -> 68."""
  return sum(bits * elements // 8 for bits, elements in _arrays(type_text))


def _elements(type_text: str) -> int:
  """Elements of the arrays in an HLO type."""
  return sum(elements for _, elements in _arrays(type_text))


def _operands(instruction: str) -> List[str]:
  """The names an instruction line takes as operands, in order."""
  if " = " not in instruction:
    return []
  rest = instruction.split(" = ", 1)[1]
  opcode = _OPCODE.search(rest)
  return re.findall(r"%[\w.\-]+", rest[opcode.end() :].split(")", 1)[0]) if opcode else []


def _result_type(rest: str) -> str:
  """The result type at the start of an instruction's right-hand side: one array type, or
  a tuple "(bf16[8]{0}, f32[])" whole (a multi-output fusion writes every element)."""
  if not rest.startswith("("):
    return rest.split(" ", 1)[0]
  depth = 0
  for end, char in enumerate(rest):
    depth += {"(": 1, ")": -1}.get(char, 0)
    if depth == 0:
      return rest[: end + 1]
  return rest


def _types(lines: List[str]) -> Dict[str, str]:
  """Each instruction's name -> its result type, for a computation's lines."""
  types = {}
  for line in lines:
    if " = " in line:
      result, rest = line.removeprefix("ROOT ").split(" = ", 1)
      types[result] = _result_type(rest)
  return types


# Ops through which a fused parameter's elements pass one for one: a slice after them reads
# only the sliced elements of the parameter.
_ELEMENTWISE = re.compile(r" (convert|bitcast|copy|negate|reshape)\(")
_SLICING = re.compile(r" (dynamic-slice|slice|gather)\(")


def _sliced_elements(value: str, body: List[str], inner: Dict[str, str]) -> Optional[int]:
  """How many elements of fused value `value` its users read, when every path from it
  ends in a slice (through element-for-element ops); None when some user reads it whole."""
  users = [line.removeprefix("ROOT ") for line in body if value in _operands(line)]
  if not users:
    return None
  total = 0
  for user in users:
    name = user.split(" = ")[0]
    if _SLICING.search(user) and _operands(user)[0] == value:
      total += _elements(inner[name])
    elif _ELEMENTWISE.search(user):
      further = _sliced_elements(name, body, inner)
      if further is None:
        return None
      total += further
    else:
      return None
  return total


def _aliasing(instruction: str) -> str:
  """An instruction's `output_to_operand_aliasing={...}` text, "" where it has none."""
  start = instruction.find("output_to_operand_aliasing={")
  if start < 0:
    return ""
  depth = 0
  for end in range(start + len("output_to_operand_aliasing="), len(instruction)):
    depth += {"{": 1, "}": -1}.get(instruction[end], 0)
    if depth == 0:
      return instruction[start : end + 1]
  return instruction[start:]


def _traffic(instruction: str, types: Dict[str, str], comps: Dict[str, List[str]]) -> int:
  """An instruction's result and operands in bytes (`KernelCount.bytes_per_step`). In a
  fusion, an operand that is only sliced (directly or through element-for-element ops)
  counts as the slices it gives, and one updated in place (a dynamic-update-slice: a scan
  writing step t of its stack) as the update written, not the whole stack read and
  written. An operand named twice counts once, and one aliased to a result not at all
  (the result is its buffer)."""
  name = instruction.split(" = ", 1)[0]
  operands = _operands(instruction)
  read = [array_bytes(types.get(o, "")) for o in operands]
  written = array_bytes(types.get(name, ""))
  called = re.search(r"calls=%?([\w.\-]+)", instruction)
  body = comps.get(called.group(1), []) if " fusion(" in instruction and called else []
  inner = _types(body)
  parameters = {}  # fused parameter name -> operand index
  for line in body:
    match = re.match(r"(%[\w.\-]+) = .* parameter\((\d+)\)", line)
    if match:
      parameters[match.group(1)] = int(match.group(2))
  for parameter, index in parameters.items():
    users = [line.removeprefix("ROOT ") for line in body if parameter in _operands(line)]
    if not users or index >= len(read):
      continue
    if all(" dynamic-update-slice(" in u and _operands(u)[0] == parameter for u in users):
      update = sum(array_bytes(inner.get(_operands(u)[1], "")) for u in users)
      written -= read[index] - update  # the stack is written where updated, not read
      read[index] = 0
    else:
      sliced = _sliced_elements(parameter, body, inner)
      whole = _elements(inner[parameter])
      if sliced is not None and whole:
        read[index] = min(read[index], read[index] * sliced // whole)
  # An operand aliased to a result (a kernel filling part of an array another wrote, in
  # place) is the result's buffer: counted once, as written.
  for operand_index in re.findall(r"\{[\d,]*\}: \((\d+), \{", _aliasing(instruction)):
    read[int(operand_index)] = 0
  # An array passed as several operands (a Pallas kernel reading q, k and v from one
  # array, each through its own block spec) is one buffer: counted once, at its largest.
  largest = {}
  for operand, size in zip(operands, read):
    largest[operand] = max(largest.get(operand, 0), size)
  return written + sum(largest.values())


def kind(instruction: str) -> Optional[str]:
  """The kind of kernel an instruction launches, or None where it launches none."""
  match = _OPCODE.search(instruction.split("=", 1)[1] if "=" in instruction else instruction)
  opcode = match.group(1) if match else "other"
  if opcode in NOT_KERNELS:
    return None
  if opcode == "custom-call":
    target = re.search(r'custom_call_target="([^"]+)"', instruction)
    target = target.group(1) if target else ""
    if target == "AllocateBuffer":  # `jax.lax.empty`: memory, no kernel
      return None
    if "triton" in target:
      return "triton"
    if "cudnn" in target:
      return "cudnn"
    return "gemm" if "cublas" in target else "other"
  if opcode == "fusion":
    fusion_kind = re.search(r"kind=(\w+)", instruction).group(1)
    called = re.search(r"calls=%?([\w.\-]+)", instruction).group(1)
    if fusion_kind == "kCustom":
      if "gemm" in called or "cublas" in instruction:
        return "gemm"
      if "cudnn" in called or "cudnn" in instruction:
        return "cudnn"
      return "loop"  # XLA's in-place dynamic-update-slice and other emitters
    return {"kLoop": "loop", "kInput": "reduction", "kOutput": "gemm"}.get(fusion_kind, "other")
  if opcode in ("copy", "copy-start"):
    return "copy"
  return "other"


def count_kernels(hlo_text: str) -> KernelCount:
  """Counts the kernels of an optimized HLO program (module docstring)."""
  comps = computations(hlo_text)

  def walk(name: str, loops: List[Loop]) -> KernelCount:
    """The kernels of computation `name`, its loops' trips multiplied out."""
    count = KernelCount(collections.Counter(), [])
    types = _types(comps[name])

    def add(inner: KernelCount, times: int, in_a_loop: bool) -> None:
      for k, v in inner.per_step.items():
        count.per_step[k] += v * times
      count.bytes_per_step += 0 if in_a_loop else inner.bytes_per_step
      count.transposes += inner.transposes * times

    for instruction in comps[name]:
      instruction = instruction.removeprefix("ROOT ")
      if " while(" in instruction:
        body = re.search(r"body=%?([\w.\-]+)", instruction).group(1)
        trips = re.search(r'"known_trip_count":\{"n":"(\d+)"', instruction)
        trips = int(trips.group(1)) if trips else -1
        per_trip = walk(body, loops)
        loops.append(Loop(body, trips, per_trip.per_step))
        add(per_trip, max(trips, 1), in_a_loop=True)
        continue
      if re.search(r"[\]})] (conditional|call)\(", instruction):
        for called in re.findall(r"(?:calls|branch_computations)=\{?%?([\w.\-]+)", instruction):
          if called in comps:
            add(walk(called, loops), 1, in_a_loop=False)
        continue
      k = kind(instruction)
      if k:
        count.per_step[k] += 1
        count.bytes_per_step += _traffic(instruction, types, comps)
        count.transposes += "transpose" in instruction.split(" = ", 1)[0]
    return count

  loops: List[Loop] = []
  count = walk("ENTRY", loops)
  return KernelCount(count.per_step, loops, count.bytes_per_step, count.transposes)


def describe(preset: str, count: KernelCount) -> List[str]:
  kinds = ", ".join(f"{k} {v}" for k, v in count.per_step.most_common())
  lines = [
      f"{preset}: {count.total} kernels a step ({kinds}); {count.in_loops} in while loops; "
      f"{count.bytes_per_step / 1e9:.2f} GB read and written outside them, "
      f"{count.transposes} transposes"
  ]
  same = collections.Counter(
      (loop.trips, tuple(sorted(loop.per_trip.items()))) for loop in count.loops
  )
  for (trips, per_trip), n in same.items():
    per = ", ".join(f"{k} {v}" for k, v in per_trip)
    lines.append(
        f"  {n} loop(s) of {trips} trips, {sum(v for _, v in per_trip)} kernels a trip ({per})"
    )
  return lines


# -- compiling a preset's step for the H100 -----------------------------------------------


def _fail(message: str) -> None:
  """Bad input: one line on stderr, exit status 2."""
  print(f"compiled_for_gpu.py: {message}", file=sys.stderr)
  sys.exit(2)


def _use_the_plugin() -> None:
  """JAX's CUDA plugin from .cuda_plugin/, with no GPU: before JAX's first device query,
  when it looks for plugins."""
  if not os.path.isdir(os.path.join(PLUGIN_DIR, "jax_plugins")):
    _fail(f"JAX's CUDA plugin is not in {PLUGIN_DIR}: run benchmarks/gpu/fetch_cuda_plugin.sh")
  sys.path.insert(0, PLUGIN_DIR)
  # No CUDA runtime here: the plugin's version check would refuse to load.
  os.environ["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = "1"


def compiled_step_text(config, batch_size: int, seq_length: int, dtype: str) -> str:
  """The optimized HLO text of `config`'s JAX training step compiled for an H100."""
  import jax
  from jax.experimental import topologies
  import keras
  import numpy as np
  import step_inputs  # pylint: disable=import-outside-toplevel

  from recurrent_bert.layers import kernels
  from recurrent_bert.layers.kernels import pallas_support
  from recurrent_bert.models import Pretrainer
  from recurrent_bert.models import build_encoder
  from recurrent_bert.training.jax_loop import JaxTrainingLoop
  from recurrent_bert.training.objectives import PretrainingObjective
  from recurrent_bert.training.optimizers import create_optimizer

  topology = topologies.get_topology_desc(
      platform="cuda", target_config=H100_TARGET, topology="1x1x1"
  )
  mesh = topologies.make_mesh(topology, (1,), ("device",))
  on_the_gpu = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  abstract = lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=on_the_gpu)
  with kernels.jax_target("gpu"), pallas_support.lowering_for_a_gpu(H100_KIND):
    keras.config.set_dtype_policy(dtype)
    pretrainer = Pretrainer(build_encoder(config), use_nsp=True)
    optimizer = create_optimizer(
        pretrainer.trainable_variables, learning_rate=1e-4, num_train_steps=10_000, warmup_steps=100
    )
    batch = step_inputs.make_batch(
        config.vocab_size, batch_size, seq_length, -(-seq_length * 15 // 100)
    )
    loop = JaxTrainingLoop(
        pretrainer,
        optimizer,
        lambda skip_batches: iter([batch]),
        PretrainingObjective(use_nsp=True),
        model_dir=os.devnull,
        global_batch_size=batch_size,
        num_train_steps=10_000,
    )
    state = loop._step_state((batch,))  # pylint: disable=protected-access
    state = tuple([abstract(x) for x in arrays] for arrays in state)
    micro_batches = ({name: abstract(x) for name, x in batch.items()},)
    lowered = loop._jitted_step.lower(*state, micro_batches)  # pylint: disable=protected-access
  return lowered.compile().as_text()


def main(argv: Optional[List[str]] = None) -> int:
  os.environ.setdefault("KERAS_BACKEND", "jax")  # before step_inputs imports the package
  import step_inputs  # pylint: disable=import-outside-toplevel

  from recurrent_bert.config import PRESETS

  parser = argparse.ArgumentParser(
      prog="compiled_for_gpu.py",
      description=__doc__,
      formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  parser.add_argument("--presets", default="bert_base,trans_blstm_2_base")
  parser.add_argument("--batch_size", type=int, default=64)
  parser.add_argument("--seq_length", type=int, default=128)
  parser.add_argument("--dtype", default="mixed_bfloat16")
  step_inputs.add_implementation_flags(parser, "compile")
  parser.add_argument("--hlo_dir", default="", help="also write each optimized program here")
  parser.add_argument("--json", default="", help="write the counts here")
  parser.error = _fail  # a bad value (e.g. --batch_size=x): one line, not the usage
  args = parser.parse_args(sys.argv[1:] if argv is None else argv)
  presets = [n for n in args.presets.split(",") if n]
  unknown = next((f"--presets: unknown {n!r}" for n in presets if n not in PRESETS), None)
  if unknown or step_inputs.unknown_implementation(args):
    _fail(unknown or step_inputs.unknown_implementation(args))
  _use_the_plugin()
  rows = []
  for name in presets:
    for label, variant in step_inputs.implementation_variants(name, PRESETS[name], args):
      started = time.time()
      try:
        text = compiled_step_text(variant, args.batch_size, args.seq_length, args.dtype)
      except Exception as e:  # pylint: disable=broad-except
        # cuDNN's LSTM ("auto" for the BLSTMs) asks cuDNN for its workspace while tracing.
        lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(e).splitlines()]
        lines = [line for line in lines if line] or [type(e).__name__]
        why = next((line for line in lines if "INTERNAL" in line or "Error" in line), lines[0])
        print(f"{label}: not compiled: {why}", flush=True)
        rows.append(dict(preset=label, error=why))
        continue
      count = count_kernels(text)
      print(
          "\n".join(describe(label, count)) + f"  (compiled in {time.time() - started:.0f} s)",
          flush=True,
      )
      if args.hlo_dir:
        os.makedirs(args.hlo_dir, exist_ok=True)
        with open(
            os.path.join(args.hlo_dir, label.replace(" ", "_") + ".hlo"), "w", encoding="utf-8"
        ) as f:
          f.write(text)
      rows.append(
          dict(
              preset=label,
              kernels_per_step=count.total,
              in_loops=count.in_loops,
              bytes_per_step=count.bytes_per_step,
              transposes=count.transposes,
              by_kind=dict(count.per_step),
              loops=[dict(trips=loop.trips, per_trip=dict(loop.per_trip)) for loop in count.loops],
          )
      )
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump(dict(batch=args.batch_size, seq_length=args.seq_length, rows=rows), f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
