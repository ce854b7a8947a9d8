"""The one place that turns flags into a `tf.distribute.Strategy`.

  default                  tf.distribute.get_strategy(): no distribution, one device.
  one_device               OneDeviceStrategy on the first GPU, else the CPU.
  mirrored                 MirroredStrategy over the local GPUs; without GPUs over
                           `num_cpu_devices` logical CPU devices (tests, CPU experiments).
  multi_worker_mirrored    MultiWorkerMirroredStrategy; the cluster comes from TF_CONFIG.
  tpu                      TPUStrategy on the Cloud TPU named by `tpu` ("local" on a TPU VM).

Logical CPU devices must be configured before TensorFlow initialises its runtime, so
`configure_cpu_devices` runs first thing in an entry point.
"""

from typing import Optional

from absl import logging
import tensorflow as tf

from recurrent_bert.errors import InputError
from recurrent_bert.errors import first_line

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker_mirrored", "tpu")


def configure_cpu_devices(num_cpu_devices: int) -> None:
  """Splits the host CPU into `num_cpu_devices` logical devices (no-op for 1)."""
  if num_cpu_devices <= 1:
    return
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_cpu_devices)]
  )


def get_distribution_strategy(
    name: str, tpu_address: Optional[str] = None, num_cpu_devices: int = 1
) -> tf.distribute.Strategy:
  """Builds the strategy `name` (one of STRATEGIES).

  Args:
    name: strategy name, see the module docstring.
    tpu_address: for "tpu": the TPU name, grpc:// address or "local".
    num_cpu_devices: for "mirrored" without GPUs: how many logical CPU devices to
      mirror over (they must have been created by `configure_cpu_devices`).

  Raises:
    InputError: an unknown name, a TPU without an address, or no TPU at that address.
  """
  if name not in STRATEGIES:
    raise InputError(f"--distribution_strategy={name!r}: choose one of {STRATEGIES}")
  if name == "default":
    return tf.distribute.get_strategy()
  if name == "multi_worker_mirrored":
    # Before anything initialises the runtime (even listing devices does): the
    # strategy configures collective ops at start-up. NCCL on GPUs, ring otherwise.
    return tf.distribute.MultiWorkerMirroredStrategy()
  gpus = tf.config.list_logical_devices("GPU")
  if name == "one_device":
    return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
  if name == "mirrored":
    if gpus:
      return tf.distribute.MirroredStrategy()
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")][: max(1, num_cpu_devices)]
    return tf.distribute.MirroredStrategy(devices=cpus)
  if not tpu_address:
    raise InputError(
        "--distribution_strategy=tpu needs --tpu (a TPU name, grpc:// "
        "address, or 'local' on a TPU VM)"
    )
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address)
    if tpu_address not in ("", "local"):
      tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    logging.info("TPU devices: %s", tf.config.list_logical_devices("TPU"))
  except (ValueError, RuntimeError, OSError, tf.errors.OpError) as e:
    # Input, not a bug: no TPU by that name (the resolver asks the GCE metadata server,
    # an OSError off Google Cloud), or none attached. One line, not TensorFlow's op dump.
    raise InputError(
        f"--distribution_strategy=tpu: no TPU found at --tpu={tpu_address}: {first_line(e)}; "
        "give the name or grpc:// address of a Cloud TPU, or 'local' on a TPU VM"
    ) from None
  return tf.distribute.TPUStrategy(resolver)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
  """True on the worker that writes checkpoints, summaries and the export."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
    return True
  task_type, task_id = resolver.task_type, resolver.task_id
  # With TF_CONFIG listing "worker"s only, worker 0 is the chief.
  return task_type in (None, "chief") or (
      task_type == "worker" and task_id == 0 and "chief" not in resolver.cluster_spec().jobs
  )


def worker_id(strategy: tf.distribute.Strategy) -> int:
  resolver = getattr(strategy, "cluster_resolver", None)
  if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and resolver:
    return int(resolver.task_id or 0)
  return 0
