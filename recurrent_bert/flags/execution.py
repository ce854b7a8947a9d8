"""The execution flags every training command shares: strategy, precision, XLA, --run_dir.

`define_flags()` defines them; `make_strategy()` builds the tf.distribute strategy they
name and `apply_run_dir()` anchors the command's relative paths at --run_dir;
`check_output_path()` refuses an output path that cannot be written, before any work.
"""

import os
from typing import Optional, Sequence

from absl import flags

from recurrent_bert import cli
from recurrent_bert.errors import InputError

FLAGS = flags.FLAGS

MAX_CPU_DEVICES = 256
# Tensor dimensions are int32: a larger batch overflows a shape deep in Keras.
INT32_MAX = 2**31 - 1
# Examples a shuffle buffer holds in memory at most (about 2 KB each at 128 tokens).
MAX_SHUFFLE_BUFFER = 10**7
# --help group of the execution flags (see recurrent_bert/cli.py).
EXECUTION_HELP = (
    "distribution_strategy",
    "num_cpu_devices",
    "tpu",
    "mixed_precision",
    "jit_compile",
)


def define_flags() -> None:
  """--mixed_precision, --jit_compile, --distribution_strategy, --tpu, --num_cpu_devices
  and --run_dir."""
  flags.DEFINE_enum(
      "mixed_precision",
      "float32",
      ["float32", "mixed_bfloat16", "mixed_float16"],
      "Compute dtype policy; mixed_float16 adds dynamic loss scaling.",
  )
  flags.DEFINE_boolean(
      "jit_compile",
      False,
      "Compile the training step: XLA under TensorFlow (JAX always compiles), "
      "torch.compile under PyTorch.",
  )
  flags.DEFINE_enum(
      "distribution_strategy",
      "default",
      ["default", "one_device", "mirrored", "multi_worker_mirrored", "tpu"],
      "tf.distribute strategy; multi_worker_mirrored reads TF_CONFIG.",
  )
  flags.DEFINE_string("tpu", None, "TPU name or grpc:// address ('local' on a TPU VM).")
  flags.DEFINE_integer(
      "num_cpu_devices",
      1,
      "Split the CPU into this many logical devices (mirrored without GPUs).",
  )
  # A logical device per replica; TensorFlow makes each one up front (2**31 would never
  # finish starting), and more than this many CPU replicas only slow a run down.
  flags.register_validator(
      "num_cpu_devices",
      lambda v: 1 <= v <= MAX_CPU_DEVICES,
      f"--num_cpu_devices must be in [1, {MAX_CPU_DEVICES}]",
  )
  flags.register_multi_flags_validator(
      ["distribution_strategy", "tpu"],
      lambda f: f["distribution_strategy"] != "tpu" or f["tpu"],
      "--distribution_strategy=tpu needs --tpu",
  )
  flags.DEFINE_string(
      "run_dir",
      None,
      "Folder that relative paths in the other path flags (data, vocabulary, model "
      "dirs, checkpoints) are taken from; default: the working directory. Flagfiles "
      "name their run folder here once.",
  )


def register_range(name: str, low: int, high: int, optional: bool = False, why: str = "") -> None:
  """A parse-time check that integer flag `name` lies in [low, high] (None allowed if optional)."""
  flags.register_validator(
      name,
      lambda v: (v is None and optional) or (v is not None and low <= v <= high),
      f"--{name} must be in [{low}, {high}]{why}",
  )


def register_size_validators(batch_flags: Sequence[str], optional_batches: Sequence[str] = ()):
  """The limits every training command shares: int32 batch sizes, a shuffle buffer that fits
  in memory, and a seed numpy takes (keras.utils.set_random_seed)."""
  for name in batch_flags:
    register_range(name, 1, INT32_MAX, optional=name in optional_batches)
  register_range("shuffle_buffer_size", 1, MAX_SHUFFLE_BUFFER, why=" (examples held in memory)")
  register_range("seed", 0, 2**32 - 1)


def make_strategy(backends: Sequence[str] = ("tensorflow", "jax")):
  """The strategy the execution flags name.

  Call before any other TensorFlow op: logical CPU devices and MultiWorkerMirrored's
  collectives must be configured at start-up.

  Args:
    backends: the Keras backends the command runs under (another is refused in one line).
  Returns:
    (strategy: tf.distribute.Strategy, is_chief: bool, worker_id: int); under
    KERAS_BACKEND=jax or torch a `numpy_finetuning.Devices` in the strategy's place.
  """
  backend = cli.keras_backend(backends)
  if backend != "tensorflow":
    from recurrent_bert.training.numpy_finetuning import Devices

    count = backend_devices(backend)
    micro_batch = 0
    if "train_batch_size" in FLAGS and "gradient_accumulation_steps" in FLAGS:
      micro_batch = FLAGS.train_batch_size // FLAGS.gradient_accumulation_steps
    return Devices(count, micro_batch), True, 0
  from recurrent_bert.training import distribution

  distribution.configure_cpu_devices(FLAGS.num_cpu_devices)
  try:
    strategy = distribution.get_distribution_strategy(
        FLAGS.distribution_strategy, FLAGS.tpu, FLAGS.num_cpu_devices
    )
  except ValueError as e:
    cli.fail(str(e))
  return strategy, distribution.is_chief(strategy), distribution.worker_id(strategy)


# Keras' backends the training commands run under.
TRAINING_BACKENDS = ("tensorflow", "jax", "torch")

# What each --distribution_strategy is under Keras' JAX backend: a device count for
# `jax_loop.set_up_devices` (None: every local device), or why it is refused.
_JAX_STRATEGIES = {"default": 1, "one_device": 1, "mirrored": None}


def backend_devices(backend: str) -> Optional[int]:
  """The devices the execution flags give a run under Keras' JAX or PyTorch backend: 1,
  or (JAX) None for every local device. PyTorch trains on one device: any other
  strategy is refused in one line."""
  if backend == "jax":
    return jax_devices()
  if FLAGS.distribution_strategy not in ("default", "one_device") or FLAGS.num_cpu_devices > 1:
    cli.fail(
        f"--distribution_strategy={FLAGS.distribution_strategy}"
        f"{' --num_cpu_devices' if FLAGS.num_cpu_devices > 1 else ''}: under "
        "KERAS_BACKEND=torch the package trains on one device (--distribution_strategy="
        "default); for several, use KERAS_BACKEND=jax or tensorflow"
    )
  return 1


def jax_devices() -> Optional[int]:
  """The devices the execution flags give a JAX run: 1, or None for every local device.

  --num_cpu_devices=N splits the host into N XLA devices (XLA_FLAGS, read when JAX
  starts its CPU backend: call before anything asks JAX for devices).
  """
  strategy = FLAGS.distribution_strategy
  if strategy not in _JAX_STRATEGIES:
    cli.fail(
        f"--distribution_strategy={strategy} is TensorFlow's; under KERAS_BACKEND=jax use "
        "--distribution_strategy=mirrored (every local device: GPUs, a TPU VM's chips, or "
        "--num_cpu_devices CPU devices, through keras.distribution.DataParallel) or "
        "default (one device); several hosts: README's JAX section"
    )
  if FLAGS.num_cpu_devices > 1:
    flag = f"--xla_force_host_platform_device_count={FLAGS.num_cpu_devices}"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
  return _JAX_STRATEGIES[strategy]


def _under(run_dir: str, path: str) -> str:
  if not path or os.path.isabs(path) or "://" in path or path == "builtin":
    return path
  return os.path.join(run_dir, path)


def apply_run_dir(path_flags: Sequence[str]) -> None:
  """Joins --run_dir before every relative value of `path_flags` (lists item by item).

  Args:
    path_flags: names of the command's path flags.
  """
  run_dir = FLAGS.run_dir
  if not run_dir:
    return
  for name in path_flags:
    value = FLAGS[name].value
    if isinstance(value, list):
      FLAGS[name].value = [_under(run_dir, item) for item in value]
    elif value is not None:
      FLAGS[name].value = _under(run_dir, value)


def check_output_path(name: str, folder: bool = True) -> None:
  """Refuses the output path flag `name` when it cannot be written, naming the flag.

  Called after `apply_run_dir`, before any work: an empty value, or a path under (or at)
  a regular file, would otherwise fail deep in TensorFlow's file layer. Paths with a
  scheme (gs://) are left to that layer. Unset (None) is the command's to handle.

  Args:
    name: the flag (a list flag: each of its paths).
    folder: True when the path is a folder the command makes, False for a file.

  Raises:
    InputError: "--name=value: what is wrong".
  """
  value = FLAGS[name].value
  for item in value if isinstance(value, list) else [value]:
    _check_output_item(name, item, folder)


def _check_output_item(name: str, value: Optional[str], folder: bool) -> None:
  if value is None or "://" in value:
    return
  if not value.strip():
    raise InputError(f"--{name}={value!r}: empty; give a {'folder' if folder else 'file'} path")
  path = os.path.abspath(value)
  existing = path
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if existing != path and not os.path.isdir(existing):
    raise InputError(f"--{name}={value}: {existing} is a file, not a folder")
  if existing == path and folder and not os.path.isdir(path):
    raise InputError(f"--{name}={value}: is a file; give a folder")
  if existing == path and not folder and os.path.isdir(path):
    raise InputError(f"--{name}={value}: is a folder; give a file path")
