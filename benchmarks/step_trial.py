"""One preset's timed training for step_time.py: its `Row` of results and its `Trial`.

A `Trial` builds the preset's pretrainer under `--dtype`, the pretraining objective and
the optimizer, and trains on one synthetic batch (step_inputs.make_batch) through Keras'
trainer or, with `--trainer=package`, the package's JAX or PyTorch loop; `call()` trains
K = `--steps_per_call` steps and waits for the device. step_time.py's flags configure it
(`args`); record_checks.py times it beside the input pipeline.
"""

import dataclasses
import itertools
import os
import statistics
import time
from typing import Dict, List, Optional

import numpy as np
from step_inputs import make_batch

from recurrent_bert.config import ModelConfig


@dataclasses.dataclass
class Row:
  """One measured (or failed) preset; `step_s` None with `error` set when it failed."""

  name: str
  config: ModelConfig
  flops: int
  times: List[float] = dataclasses.field(default_factory=list)
  loss: Optional[float] = None
  error: Optional[str] = None
  first_call_s: Optional[float] = None  # the first warm-up call: compilation + K steps
  profile: Optional[dict] = None  # kernel_profile.trace's, with --profile_top
  dtype_policy: Optional[str] = None  # the policy the model was built under
  # Under JAX, the warm-up's XLA programs: compiled, and read from the persistent cache.
  programs: Optional[Dict[str, int]] = None

  @property
  def step_s(self) -> Optional[float]:
    return statistics.median(self.times) if self.times and not self.error else None


class Trial:
  """A preset's trainer and synthetic batch; `call()` trains and times K steps.

  K = 1 (`--steps_per_call`) is one `train_on_batch`. Keras' per-call work (gathering and
  writing back every variable, the loss fetched at once) is then on the step's critical
  path: on a GPU a BERT-base step can take less time than that. K > 1 is one `fit` over
  the batch repeated K times, as training runs: the host queues step i + 1 while the
  device computes step i, and the per-call work is paid once per K steps.
  """

  def __init__(self, row: Row, args, jit_compile: bool):
    import keras

    from recurrent_bert.models import Pretrainer
    from recurrent_bert.models import build_encoder
    from recurrent_bert.training.keras_training import ObjectiveModel
    from recurrent_bert.training.objectives import PretrainingObjective
    from recurrent_bert.training.optimizers import create_optimizer

    self.keras = keras
    use_nsp = not args.no_nsp
    # Set for each model: `free_memory`'s clear_session resets Keras' global policy to
    # float32, and every preset after the first was once measured in float32.
    keras.config.set_dtype_policy(args.dtype)
    pretrainer = Pretrainer(build_encoder(row.config), use_nsp=use_nsp)
    row.dtype_policy = pretrainer.dtype_policy.name
    objective = PretrainingObjective(use_nsp=use_nsp)
    self.trainer = ObjectiveModel(pretrainer, objective)
    optimizer = create_optimizer(
        pretrainer.trainable_variables,
        learning_rate=1e-4,
        num_train_steps=10_000,
        warmup_steps=100,
        optimizer=args.optimizer,
    )
    self.batch = make_batch(
        row.config.vocab_size, args.batch_size, args.seq_length, args.max_predictions
    )
    self.package_loop = None
    if args.trainer == "package":
      if args.backend == "jax":
        from recurrent_bert.training.jax_loop import JaxTrainingLoop as PackageLoop
      else:
        from recurrent_bert.training.torch_loop import TorchTrainingLoop as PackageLoop

      self.package_loop = PackageLoop(
          pretrainer,
          optimizer,
          lambda skip_batches: itertools.repeat(self.batch),
          objective,
          model_dir=os.devnull,  # never written: the benchmark saves no checkpoint
          global_batch_size=args.batch_size,
          num_train_steps=10_000,
          jit_compile=jit_compile,
      )
    else:
      self.trainer.compile(optimizer=optimizer, jit_compile=jit_compile)
    self.batch_size, self.k = args.batch_size, args.steps_per_call
    self.repeated = {name: np.concatenate([x] * self.k) for name, x in self.batch.items()}

  def train(self, steps: int) -> float:
    """Trains `steps` steps as a call does (one fit of them, or train_on_batch each with
    K = 1) and waits until the device has finished them; their loss."""
    if self.package_loop is not None:
      _, values = self.package_loop.train_steps(steps)
      loss = values["loss"][-1]
    elif self.k == 1:
      for _ in range(steps):
        loss = self.keras.tree.flatten(self.trainer.train_on_batch(self.batch))[0]
    else:
      data = self.repeated
      if steps != self.k:
        data = {name: np.concatenate([x] * steps) for name, x in self.batch.items()}
      history = self.trainer.fit(
          data, batch_size=self.batch_size, epochs=1, shuffle=False, verbose=0
      )
      loss = history.history["loss"][-1]  # the mean over the steps
    # The loss is ready once the last step's gradients are; its update may still run.
    self.keras.ops.convert_to_numpy(self.trainer.trainable_variables[-1])
    return float(np.asarray(loss))

  def call(self):
    """(seconds per step, loss) of K steps, once the device has finished all of them."""
    start = time.perf_counter()
    loss = self.train(self.k)
    return (time.perf_counter() - start) / self.k, loss

  def warm_up(self, calls: int, row: Row) -> None:
    """`calls` untimed calls; the first one's seconds (it compiles) go to the row, and
    under JAX how many XLA programs they compiled or read from the persistent cache."""
    before = compilation_count()
    for _ in range(calls):
      seconds, _ = self.call()
      row.first_call_s = row.first_call_s or seconds * self.k
    after = compilation_count()
    if before is not None:
      row.programs = {key: after[key] - before[key] for key in after}


def compilation_count() -> Optional[Dict[str, int]]:
  """Under JAX, {"compiled", "from_cache"}: this process's XLA programs so far."""
  import keras

  if keras.backend.backend() != "jax":
    return None
  from recurrent_bert.training import jax_compilation

  count = jax_compilation.count()
  return {"compiled": count.compiled, "from_cache": count.from_cache}
