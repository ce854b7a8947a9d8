"""The running Keras backend's pieces of a JAX or PyTorch training run.

Pretraining (`numpy_pretraining`) and fine-tuning (`numpy_finetuning`) ask here, and
nowhere else, what differs between the two backends: the devices (`set_up_devices`), the
processes (`process_index_and_count`), the loop (`loop_class`: `jax_loop.JaxTrainingLoop`
or `torch_loop.TorchTrainingLoop`, both `numpy_batch_loop.NumpyBatchLoop`s) and how an
inference function runs (`inference_function`). Each backend's module is imported only
when that backend runs.
"""

from typing import Callable, Optional, Tuple

from absl import logging
import keras

from recurrent_bert.errors import InputError


def _on_jax() -> bool:
  return keras.backend.backend() == "jax"


def set_up_devices(devices: Optional[int], micro_batch_size: int) -> int:
  """The devices of the run, set up; returns their count. Under JAX one (`devices=1`) or
  every local one (`devices=None`, Keras' DataParallel: `jax_loop.set_up_devices`); under
  PyTorch one, the device Keras' PyTorch backend picks (a CUDA GPU where there is one).

  Raises:
    InputError: PyTorch asked for several devices, or the micro-batch does not split
      over JAX's.
  """
  if _on_jax():
    from recurrent_bert.training import jax_loop  # pylint: disable=g-import-not-at-top

    return jax_loop.set_up_devices(devices, micro_batch_size)
  if devices != 1:
    raise InputError(
        "under KERAS_BACKEND=torch the package trains on one device: use "
        "--distribution_strategy=default (several devices: KERAS_BACKEND=jax or tensorflow)"
    )
  import torch  # pylint: disable=g-import-not-at-top

  logging.info("PyTorch: one device, %s", "cuda" if torch.cuda.is_available() else "cpu")
  return 1


def process_index_and_count() -> Tuple[int, int]:
  """(this process's index, the processes of the run): JAX's hosts; PyTorch's one."""
  if _on_jax():
    import jax  # pylint: disable=g-import-not-at-top

    return jax.process_index(), jax.process_count()
  return 0, 1


def loop_class():
  """The running backend's loop: `jax_loop.JaxTrainingLoop` or `torch_loop.TorchTrainingLoop`."""
  # pylint: disable=g-import-not-at-top
  if _on_jax():
    from recurrent_bert.training.jax_loop import JaxTrainingLoop

    return JaxTrainingLoop
  from recurrent_bert.training.torch_loop import TorchTrainingLoop

  return TorchTrainingLoop


def inference_function(fn: Callable) -> Callable:
  """`fn`, a pure function of variables' values and a batch, for inference: jitted under
  JAX; under PyTorch run without recording gradients."""
  if _on_jax():
    import jax  # pylint: disable=g-import-not-at-top

    return jax.jit(fn)
  import torch  # pylint: disable=g-import-not-at-top

  return torch.no_grad()(fn)
