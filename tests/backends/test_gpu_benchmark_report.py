"""The GPU benchmark's report from known inputs: benchmarks/kernel_profile.py reading JAX's
and PyTorch's profiles, benchmarks/gpu/table.py's tables, goals and profiles.

The whole script (benchmarks/gpu/run.sh) is rehearsed on a CPU with RB_GPU_SMOKE=1, minutes
long, so not here; step_time.py's --profile_top is run in test_step_time_benchmark.py.
"""

import importlib.util
import json
import os

import pytest

from tests.backends.support import BACKEND
from tests.backends.support import REPO


def _load(relative):
  path = os.path.join(REPO, relative)
  spec = importlib.util.spec_from_file_location(os.path.basename(path)[: -len(".py")], path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


kernel_profile = _load("benchmarks/kernel_profile.py")
table = _load("benchmarks/gpu/table.py")

# -- kernel_profile ------------------------------------------------------------------------


def test_busy_time_is_the_union_and_nested_ops_count_once():
  events = [("a", 0, 10), ("b", 5, 10), ("c", 20, 5), ("d", 21, 1)]
  assert kernel_profile.busy_ns(events) == 20  # [0, 15] and [20, 25]
  # A while op (0..10) holding its body's two ops, then one op alone.
  thread = [("while", 0, 10), ("body", 1, 3), ("body", 5, 4), ("after", 12, 2)]
  assert kernel_profile.innermost(thread) == [("body", 1, 3), ("body", 5, 4), ("after", 12, 2)]
  profile = kernel_profile.summarize(events, "test", steps=2, traced_s=30e-9, keep=2)
  assert profile["ops"] == [["a", pytest.approx(1e-5), 1], ["b", pytest.approx(1e-5), 1]]
  assert profile["num_ops"] == 4
  assert profile["busy_ms"] == pytest.approx(20e-6) and profile["total_ms"] == pytest.approx(26e-6)


# Kernel names as an H100 profile of the base presets printed them (2026-11-27).
KERNEL_KINDS = {
    "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT": "matmul",
    "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize": "matmul",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>": "matmul",
    "gemm_fusion_dot_405": "matmul",
    "swish_rnn_backward_k2": "recurrence",
    "void elemWiseRNNcell<float, float, float, (cudnnRNNMode_t)2": "recurrence",
    "void LSTM_elementWise_bp1<float, float, float>(int, int, float*": "recurrence",
    "Memset 3": "copy",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel": "copy",
    "input_add_reduce_fusion_11": "other",
    "loop_convert_multiply_fusion_11": "other",
    "void at::native::(anonymous namespace)::cunn_SpatialSoftMaxForward<float": "other",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16": "attention",
}


def test_kernels_are_counted_by_the_kind_their_names_say():
  assert {name: kernel_profile.kind_of(name) for name in KERNEL_KINDS} == KERNEL_KINDS
  events = [(name, 10 * i, i + 1) for i, name in enumerate(KERNEL_KINDS)]
  profile = kernel_profile.summarize(events, "test", steps=1, traced_s=1e-6, keep=3)
  expected = {}
  for name, _, duration in events:
    kind = KERNEL_KINDS[name]
    expected[kind] = expected.get(kind, 0.0) + 1e-6 * duration
  assert profile["kinds"] == pytest.approx(expected)
  assert list(profile["kinds"]) == sorted(expected, key=lambda k: -expected[k])
  line = kernel_profile.describe(profile)[-1]
  assert line.startswith("  all ops by kind, ms/step: other 0.00, ") and "matmul 0.00" in line


# An XSpace as a GPU trace has it: a host plane, two device planes (DataParallel), each
# with its streams' kernels and a derived "XLA Ops" line repeating their time.
GPU_XSPACE = """
planes {
  id: 1 name: "/host:CPU"
  lines { id: 1 name: "python" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 0 duration_ps: 20000000 } }
  event_metadata { key: 1 value { id: 1 name: "fit" } }
}
planes {
  id: 3 name: "/device:GPU:1"
  lines { id: 1 name: "Stream #7(Compute)" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 0 duration_ps: 9000000 } }
  event_metadata { key: 1 value { id: 1 name: "on_the_other_card" } }
}
planes {
  id: 2 name: "/device:GPU:0"
  lines { id: 1 name: "Stream #13(Compute)" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 0 duration_ps: 5000000 }
    events { metadata_id: 2 offset_ps: 6000000 duration_ps: 2000000 }
    events { metadata_id: 1 offset_ps: 9000000 duration_ps: 5000000 } }
  lines { id: 2 name: "Stream #14(MemcpyH2D)" timestamp_ns: 1000
    events { metadata_id: 3 offset_ps: 1000000 duration_ps: 1000000 } }
  lines { id: 3 name: "XLA Ops" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 0 duration_ps: 14000000 } }
  event_metadata { key: 1 value { id: 1 name: "gemm_fusion_dot" } }
  event_metadata { key: 2 value { id: 2 name: "loop_add_fusion" } }
  event_metadata { key: 3 value { id: 3 name: "MemcpyH2D" } }
}
"""


def test_a_gpu_trace_is_read_from_the_first_device_planes_streams():
  import jax

  data = jax.profiler.ProfileData.from_text_proto(GPU_XSPACE)
  source, events = kernel_profile.xspace_events(data)
  assert source == "/device:GPU:0 (stream kernels)"
  assert sorted(events) == [
      ("MemcpyH2D", 2000, 1000),
      ("gemm_fusion_dot", 1000, 5000),
      ("gemm_fusion_dot", 10000, 5000),
      ("loop_add_fusion", 7000, 2000),
  ]
  profile = kernel_profile.summarize(events, source, steps=2, traced_s=20e-6, keep=10)
  assert profile["ops"] == [
      ["gemm_fusion_dot", pytest.approx(0.010), 2],
      ["loop_add_fusion", pytest.approx(0.002), 1],
      ["MemcpyH2D", pytest.approx(0.001), 1],
  ]
  assert profile["busy_ms"] == pytest.approx(0.012)  # the copy overlaps the first gemm
  # Without the timed step, shares are of the traced one (10 µs a step)...
  lines = kernel_profile.describe(profile)
  assert lines[0] == (
      "  profile of 2 steps, /device:GPU:0 (stream kernels): busy 0.01 ms per step, 60% of "
      "the traced 0.01 ms/step; top 3 of 3 ops"
  )
  # ms per step, share of the traced step, runs per step.
  assert lines[2].split() == ["0.005", "50.0%", "1.0", "gemm_fusion_dot"]
  # ...with it, of the timed step (8 µs): a GPU step runs its command buffers untraced.
  lines = kernel_profile.describe(profile, step_ms=0.008)
  assert lines[0] == (
      "  profile of 2 steps, /device:GPU:0 (stream kernels): busy 0.01 ms per step, 75% of "
      "the timed 0.01 ms step (traced 0.01); top 3 of 3 ops"
  )
  assert lines[2].split() == ["0.005", "62.5%", "1.0", "gemm_fusion_dot"]


def _traced_work():
  """Two steps of a chain of dependent matmuls on this session's backend (one thread of
  ops after another: their durations cannot overlap)."""
  if BACKEND == "jax":
    import jax
    import jax.numpy as jnp

    step = jax.jit(lambda x: jnp.tanh(jnp.tanh(x @ x) @ x))
    x = jnp.full((192, 192), 0.01)
    step(x).block_until_ready()
    return lambda: [step(x).block_until_ready() for _ in range(2)]
  import torch

  x = torch.full((192, 192), 0.01)
  return lambda: [torch.tanh(torch.tanh(x @ x) @ x) for _ in range(2)]


def test_a_real_trace_of_this_backend_lists_its_longest_ops():
  profile = kernel_profile.trace(BACKEND, _traced_work(), steps=2, keep=3)
  expected = {"jax": "/host:CPU (XLA ops)", "torch": "torch CPU operators (self time)"}
  assert profile["source"] == expected[BACKEND]
  ms = [op[1] for op in profile["ops"]]
  assert 0 < len(ms) <= 3 and ms == sorted(ms, reverse=True) and ms[-1] > 0
  # The ops ran within the traced call, one at a time.
  assert sum(ms) <= profile["total_ms"] <= profile["traced_ms"]
  assert 0 < profile["busy_ms"] <= profile["traced_ms"]
  lines = kernel_profile.describe(profile)
  assert profile["ops"][0][0][:60] in lines[2]


def test_a_failing_profiler_is_reported_not_raised(capsys):
  def broken():
    raise RuntimeError("no profiler plugin")

  profile = kernel_profile.trace_and_print(BACKEND, broken, steps=1, keep=3)
  assert profile == {"error": "RuntimeError: no profiler plugin"}
  assert "profile failed: RuntimeError: no profiler plugin" in capsys.readouterr().out


# -- table.py ------------------------------------------------------------------------------


def _write(path, backend, batch, rows, peak=989.0):
  """A step_time.py --json file; rows: {preset: (ms, x_bert, x_bert_rab, mfu)}."""
  meta = dict(backend=backend, batch_size=batch, seq_length=128, dtype="mixed_bfloat16")
  meta.update(peak_tflops=peak, device="gpu: H100", keras="3.15.1", jit_compile=True)
  entries = []
  for preset, (ms, x_bert, x_rab, mfu) in rows.items():
    entries.append(
        dict(preset=preset, step_ms=ms, x_bert=x_bert, x_bert_rab=x_rab, mfu=mfu, error=None)
    )
    entries[-1]["first_call_s"] = 30.0
  entries[0]["profile"] = {
      "source": "/device:GPU:0 (stream kernels)",
      "steps": 3,
      "traced_ms": 60.0,
      "busy_ms": 54.0,
      "total_ms": 54.0,
      "num_ops": 2,
      "ops": [["nvjet_gemm_bf16", 30.0, 216], ["loop_add_fusion", 24.0, 30]],
  }
  with open(path, "w") as f:
    json.dump(dict(meta, rows=entries), f)
  return str(path)


PRESETS = "bert_base,bert_rab_base,swishrnn_base,trans_blstm_2_base,trans_blstm_small_2_base"
PRESETS += ",blstm_base"


def test_the_report_checks_every_goal_from_known_numbers(tmp_path, capsys):
  jax = _write(
      tmp_path / "jax.json",
      "jax",
      64,
      {
          "bert_base": (20.0, 1.0, None, 0.35),  # exactly at its goal: met
          "bert_rab_base": (21.0, 1.05, 1.0, 0.33),  # exactly at its goal: met
          "swishrnn_base": (25.2, 1.26, 1.2, 0.28),
          "trans_blstm_2_base": (48.0, 2.4, 2.29, 0.2),
          "trans_blstm_small_2_base": (31.0, 1.55, 1.48, 0.2),
          "blstm_base": (29.0, 1.45, 1.38, 0.2),
      },
  )
  large = _write(tmp_path / "jax_large.json", "jax", 256, {"bert_base": (70.0, 1.0, None, 0.449)})
  package = tmp_path / "jax_package.json"  # the package's own loop, bert_base alone
  _write(package, "jax", 64, {"bert_base": (18.0, 1.0, None, 0.39)})
  package.write_text(json.dumps(dict(json.loads(package.read_text()), trainer="package")))
  # PyTorch's pass also timed swishrnn_base again on another implementation.
  torch = _write(
      tmp_path / "torch.json",
      "torch",
      64,
      {"bert_base": (28.0, 1.0, None, 0.25), "swishrnn_base [portable]": (90.0, 3.21, 3.0, 0.08)},
  )
  eager = str(tmp_path / "torch_eager.json")  # never written: its process did not run
  assert table.main(["--presets", PRESETS, jax, str(package), large, torch, eager]) == 0
  out = capsys.readouterr().out
  goals = out.split("\nGoals:\n")[1].split("\n\n")[0].splitlines()
  assert goals[:4] == [
      "JAX: bert_base MFU at 64x128 (goal >= 35%): 35.0% of 989 TFLOP/s: met",
      "JAX package loop: bert_base MFU at 64x128 (goal >= 35%): 39.0% of 989 TFLOP/s: met",
      "JAX: bert_base MFU at 256x128 (goal >= 45%): 44.9% of 989 TFLOP/s: NOT met",
      "PyTorch compiled: bert_base MFU at 64x128 (goal >= 25%): 25.0% of 989 TFLOP/s: met",
  ]
  for expected in (
      "JAX: bert_rab_base <= 1.05x bert_base at 64x128: 1.05x: met",
      "JAX: swishrnn_base <= 1.1x bert_rab_base at 64x128: 1.20x: NOT met",
      "JAX: trans_blstm_2_base <= 2.4x bert_base at 64x128: 2.40x: met",
      "JAX: trans_blstm_small_2_base <= 1.5x bert_base at 64x128: 1.55x: NOT met",
      "JAX: blstm_base <= 1.5x bert_base at 64x128: 1.45x: met",
  ):
    assert expected in goals, (expected, goals)
  # The ratio goals of the one pass that timed the presets: the package loop's pass and
  # PyTorch's timed bert_base alone (the missing file has none).
  assert len(goals) == 4 + 5
  # Two tables: 64x128 with every preset and the missing file's columns "not run", 256x128.
  assert "| preset | JAX ms | ×BERT | ×BERT-rab | MFU | JAX package loop ms |" in out
  assert "| bert_base | 20.0 | 1.00 | - | 35.0% | 18.0 | 1.00 | - | 39.0% | 28.0 |" in out
  assert "| torch_eager.json ms |" in out
  assert "| bert_rab_base | 21.0 | 1.05 | 1.00 | 33.0% | not run |" in out
  assert "batch 256x128 tokens" in out and "| bert_base | 70.0 | 1.00 | - | 44.9% |" in out
  # The extra row follows the presets' in the first table, and adds no goal.
  first_table = out.split("batch 256x128 tokens")[0]
  assert first_table.index("| blstm_base |") < first_table.index("| swishrnn_base [portable] |")
  assert "| 90.0 | 3.21 | 3.00 | 8.0% | not run |" in first_table
  assert "JAX 64x128: bert_base 30.0, bert_rab_base 30.0," in out
  profiles = out.split("each preset's longest kernels:\n")[1]
  assert profiles.startswith("JAX 64x128, bert_base:\n  profile of 3 steps, /device:GPU:0")
  assert "timed 20.00" in profiles and "nvjet_gemm_bf16" in profiles


def test_goals_of_a_backend_that_did_not_run_are_not_measured(tmp_path, capsys):
  rows = {"bert_base": (20.0, 1.0, None, None)}
  jax = _write(tmp_path / "jax.json", "jax", 64, rows, peak=0.0)
  table.main(["--presets=bert_base", jax])
  out = capsys.readouterr().out
  assert "JAX: bert_base MFU at 64x128 (goal >= 35%): not measured (no --peak_tflops)" in out
  assert "JAX: bert_base MFU at 256x128 (goal >= 45%): not measured (no JAX run)" in out
  assert "PyTorch: bert_base MFU at 64x128 (goal >= 25%): not measured (no PyTorch run)" in out
  assert (
      "bert_rab_base <= 1.05x bert_base at 64x128: not measured (no pass at that batch timed "
      "bert_rab_base)"
  ) in out


def test_rows_cut_off_or_built_under_another_policy_say_so(tmp_path, capsys):
  """A preset its pass never reached (in the JSON without a time or an error) is "not run";
  one whose model was built in float32 under --dtype=mixed_bfloat16 says so by its time."""
  path = tmp_path / "jax.json"
  _write(path, "jax", 64, {"bert_base": (20.0, 1.0, None, 0.35)})
  data = json.loads(path.read_text())
  data["rows"][0]["dtype_policy"] = "mixed_bfloat16"
  data["rows"].append(dict(data["rows"][0], preset="bert_rab_base", step_ms=34.0))
  data["rows"][1].update(dtype_policy="float32", x_bert=1.7, x_bert_rab=1.0, mfu=0.2)
  data["rows"].append(dict(preset="swishrnn_base", step_ms=None, error=None))
  path.write_text(json.dumps(data))
  table.main(["--presets=bert_base,bert_rab_base,swishrnn_base", str(path)])
  out = capsys.readouterr().out
  assert "| bert_base | 20.0 | 1.00 | - | 35.0% |" in out
  assert "| bert_rab_base | 34.0 (built in float32, not mixed_bfloat16) | 1.70 |" in out
  assert "| swishrnn_base | not run |" in out and "failed:" not in out


# -- compiled_for_gpu: the kernels of a program compiled for a GPU ---------------------------

compiled_for_gpu = _load("benchmarks/gpu/compiled_for_gpu.py")

# The shape of XLA's optimized HLO for a GPU (instructions cut short): an entry with a
# reduction, a copy and a while loop of 32 known trips whose body launches two Pallas
# kernels, a matmul fusion, an in-place update and its counter.
_COMPILED = """HloModule jit__step, entry_computation_layout={(f32[4]{0})->f32[]}

%fused_add (param_0: s32[]) -> s32[] {
  %param_0 = s32[] parameter(0)
  ROOT %add.1 = s32[] add(%param_0, %param_0)
}

%body.1 (arg_tuple.1: (s32[], f32[4])) -> (s32[], f32[4]) {
  %arg_tuple.1 = (s32[], f32[4]{0}) parameter(0)
  %get-tuple-element.1 = s32[] get-tuple-element(%arg_tuple.1), index=0
  %bitcast.1 = s32[1]{0} bitcast(%get-tuple-element.1)
  %pallas_call.1 = f32[4]{0} custom-call(%bitcast.1), custom_call_target="__gpu$xla.gpu.triton", api_version=API_VERSION_TYPED_FFI
  %pallas_call.2 = f32[4]{0} custom-call(%pallas_call.1), custom_call_target="__gpu$xla.gpu.triton", api_version=API_VERSION_TYPED_FFI
  %gemm_fusion_dot_general.0 = bf16[2,4]{1,0} fusion(%pallas_call.2), kind=kCustom, calls=%gemm_fusion_dot_general.0_computation
  %loop_dynamic_update_slice_fusion.1 = f32[4]{0} fusion(%pallas_call.2), kind=kCustom, calls=%fused_dynamic_update_slice.1
  %loop_add_fusion = s32[] fusion(%get-tuple-element.1), kind=kLoop, calls=%fused_add
  ROOT %tuple.1 = (s32[], f32[4]{0}) tuple(%loop_add_fusion, %loop_dynamic_update_slice_fusion.1)
}

ENTRY %main.9 (p.1: f32[4]) -> f32[] {
  %p.1 = f32[4]{0} parameter(0)
  %constant.1 = s32[] constant(0)
  %tuple.2 = (s32[], f32[4]{0}) tuple(%constant.1, %p.1)
  %while.1 = (s32[], f32[4]{0}) while(%tuple.2), condition=%cond.1, body=%body.1, backend_config={"known_trip_count":{"n":"32"},"known_init_step":{"init":"0","step":"1"}}
  %get-tuple-element.2 = f32[4]{0} get-tuple-element(%while.1), index=1
  %copy.1 = f32[4]{0} copy(%get-tuple-element.2)
  ROOT %input_reduce_fusion = f32[] fusion(%copy.1), kind=kInput, calls=%fused_reduce
}
"""  # noqa: E501


def test_compiled_program_kernels_are_counted_per_trip_of_each_loop():
  count = compiled_for_gpu.count_kernels(_COMPILED)
  assert [(loop.trips, dict(loop.per_trip)) for loop in count.loops] == [
      (32, {"triton": 2, "gemm": 1, "loop": 2})
  ]
  assert dict(count.per_step) == {"triton": 64, "gemm": 32, "loop": 64, "copy": 1, "reduction": 1}
  assert (count.total, count.in_loops) == (162, 160)
  lines = compiled_for_gpu.describe("p", count)
  assert lines[0].startswith("p: 162 kernels a step (") and "160 in while loops" in lines[0]
  assert "1 loop(s) of 32 trips, 5 kernels a trip" in lines[1]
  # Bytes outside the loop, by hand: the copy reads and writes 16 + 16, the reduction
  # 16 + 4.
  assert (count.bytes_per_step, count.transposes) == (52, 0)


# A transpose, reading and writing all of its [64, 128] bfloat16; a scan's in-place
# write of row t of a [32, 4] float32 stack, reading the row and t and writing the row;
# a read of row t, reading the row and t and writing it.
_STACKS_AND_A_TRANSPOSE = """HloModule m

%fused_update (param_0: f32[32,4], param_1: f32[1,4], param_2: s32[]) -> f32[32,4] {
  %param_0 = f32[32,4]{1,0} parameter(0)
  %param_1 = f32[1,4]{1,0} parameter(1)
  %param_2 = s32[] parameter(2)
  %constant.0 = s32[] constant(0)
  ROOT %dynamic-update-slice.1 = f32[32,4]{1,0} dynamic-update-slice(%param_0, %param_1, %param_2, %constant.0)
}

%fused_read (param_0.1: f32[32,4], param_1.1: s32[]) -> f32[1,4] {
  %param_0.1 = f32[32,4]{1,0} parameter(0)
  %param_1.1 = s32[] parameter(1)
  %constant.1 = s32[] constant(0)
  ROOT %dynamic-slice.1 = f32[1,4]{1,0} dynamic-slice(%param_0.1, %param_1.1, %constant.1), dynamic_slice_sizes={1,4}
}

ENTRY %main (p.1: bf16[64,128], stack: f32[32,4], row: f32[1,4], t: s32[]) -> bf16[128,64] {
  %p.1 = bf16[64,128]{1,0} parameter(0)
  %stack = f32[32,4]{1,0} parameter(1)
  %row = f32[1,4]{1,0} parameter(2)
  %t = s32[] parameter(3)
  %loop_dynamic_update_slice_fusion = f32[32,4]{1,0} fusion(%stack, %row, %t), kind=kCustom, calls=%fused_update
  %loop_dynamic_slice_fusion = f32[1,4]{1,0} fusion(%loop_dynamic_update_slice_fusion, %t), kind=kLoop, calls=%fused_read
  ROOT %input_transpose_fusion = bf16[128,64]{1,0} fusion(%p.1), kind=kInput, calls=%t
}
"""  # noqa: E501


def test_compiled_program_bytes_and_transposes():
  assert compiled_for_gpu.array_bytes("(bf16[8,4]{1,0}, f32[], pred[3], s64[2])") == 64 + 4 + 3 + 16
  count = compiled_for_gpu.count_kernels(_STACKS_AND_A_TRANSPOSE)
  assert (count.total, count.transposes) == (3, 1)
  assert count.bytes_per_step == 2 * 64 * 128 * 2 + (16 + 4 + 16) + (16 + 4 + 16)


# A multi-output fusion reading [64, 128] bfloat16 and writing two of them; a row
# statistic reading the first element of each of 64 rows through a conversion; a Pallas
# kernel reading one [8, 4] float32 array through two operands.
_MULTI_OUTPUT_AND_SLICES = """HloModule m

%fused_two (param_0: bf16[64,128]) -> (bf16[64,128], bf16[64,128]) {
  %param_0 = bf16[64,128]{1,0} parameter(0)
  %negate.1 = bf16[64,128]{1,0} negate(%param_0)
  ROOT %tuple.1 = (bf16[64,128]{1,0}, bf16[64,128]{1,0}) tuple(%param_0, %negate.1)
}

%fused_first (param_0.1: bf16[64,128]) -> f32[64,1] {
  %param_0.1 = bf16[64,128]{1,0} parameter(0)
  %convert.1 = f32[64,128]{1,0} convert(%param_0.1)
  ROOT %slice.1 = f32[64,1]{1,0} slice(%convert.1), slice={[0:64], [0:1]}
}

ENTRY %main (p.1: bf16[64,128], q.1: f32[8,4]) -> f32[8,4] {
  %p.1 = bf16[64,128]{1,0} parameter(0)
  %q.1 = f32[8,4]{1,0} parameter(1)
  %loop_negate_fusion = (bf16[64,128]{1,0}, bf16[64,128]{1,0}) fusion(%p.1), kind=kLoop, calls=%fused_two
  %loop_slice_fusion = f32[64,1]{1,0} fusion(%p.1), kind=kLoop, calls=%fused_first
  %pallas_call.1 = f32[8,4]{1,0} custom-call(%q.1, %q.1), custom_call_target="__gpu$xla.gpu.triton", api_version=API_VERSION_TYPED_FFI
  ROOT %pallas_call.2 = (f32[8,4]{1,0}, f32[2]{0}) custom-call(%q.1, %pallas_call.1), custom_call_target="__gpu$xla.gpu.triton", output_to_operand_aliasing={{0}: (1, {})}, api_version=API_VERSION_TYPED_FFI
}
"""  # noqa: E501


def test_compiled_program_bytes_count_every_result_and_each_array_once():
  count = compiled_for_gpu.count_kernels(_MULTI_OUTPUT_AND_SLICES)
  assert count.total == 4
  tile = 64 * 128 * 2
  # Two results written and one operand read; 64 bfloat16 elements read, 64 float32 ones
  # written; one [8, 4] float32 array read (named twice) and one written; then one read,
  # one filled in place (aliased: counted as written, not read too) and [2] written.
  matrix = 8 * 4 * 4
  assert count.bytes_per_step == 3 * tile + (64 * 2 + 64 * 4) + 2 * matrix + 2 * matrix + 2 * 4
