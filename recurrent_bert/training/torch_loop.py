"""PyTorch's training loop: autograd steps over numpy batches, on one device.

The run itself (the schedule of loop calls, progress lines, metrics.jsonl, the NaN stop,
Ctrl-C) is `driver.TrainingDriver`'s; input and checkpoints are
`numpy_batch_loop.NumpyBatchLoop`'s, as under JAX. One update, as Keras' own PyTorch
trainer writes it:

  for each of the N micro-batches:
    outputs = model(inputs, training=True)               # Keras variables are torch
    loss share = objective.loss(objective.sums(batch, outputs), normalizers of all N)
    share.backward()                                     # adds into each variable's .grad
  the summed gradient clipped to `clip_norm` by its global norm (as tf.clip_by_global_norm)
  optimizer.apply(gradients) (AdamW or LAMB, Keras' optimizers on torch tensors)

so its losses are the JAX and TensorFlow loops' for the same weights and batches
(tests/backends/test_pretraining_without_tensorflow.py). Variables the loss does not
reach get a zero gradient, as under JAX.

`jit_compile=True` runs the forward pass and the loss through `torch.compile`
(TorchInductor: Triton kernels on a CUDA GPU, C++ on a CPU); autograd then runs the
compiled backward. The first step compiles (a minute or more on a CPU); each later
step with the same shapes reuses it. The dropout masks come from the layers' Keras seed
generators, whose states are variables: they are saved and restored with the step.
"""

from typing import Dict

from absl import logging
import keras
import torch

from recurrent_bert.training.numpy_batch_loop import NumpyBatchLoop


class TorchTrainingLoop(NumpyBatchLoop):
  """Trains `model` on `objective` with PyTorch's autograd (module docstring).

  Args:
    model, optimizer, batches_fn, objective, clip_norm, loss_scaling: `NumpyBatchLoop`'s.
    jit_compile: run the forward pass and loss through `torch.compile`.
    **kwargs: `TrainingDriver`'s (model_dir, global_batch_size, num_train_steps, ...).
  """

  def __init__(
      self, model, optimizer, batches_fn, objective, *, jit_compile: bool = False, **kwargs
  ):
    super().__init__(model, optimizer, batches_fn, objective, **kwargs)
    self._compiled = jit_compile
    self._compilation_said = ""
    self._scopes_named = not jit_compile
    self._forward = torch.compile(self._loss_share) if jit_compile else self._loss_share

  def _loss_share(self, batch, normalizers):
    outputs = self.model(self.objective.model_inputs(batch), training=True)
    sums = self.objective.sums(batch, outputs)
    return self.objective.loss(sums, normalizers), sums

  def _step(self, micro_batches) -> Dict[str, torch.Tensor]:
    """One update from `micro_batches` (a list of N batch dicts of tensors); its values
    {"loss", stats, step values}, still on the device."""
    normalizers = self._summed_normalizers(micro_batches)
    variables = self.model.trainable_variables
    if not self._scopes_named:
      # Keras names its layers' scopes on a model's first call; a compiled first call
      # would then be compiled again for the second (its guards read those names). An
      # eager inference call first (no dropout, so no random numbers drawn) names them.
      with torch.no_grad():
        self.model(self.objective.model_inputs(micro_batches[0]), training=False)
      self._scopes_named = True
    loss, sums = 0.0, None
    for batch in micro_batches:
      share, micro_sums = self._forward(batch, normalizers)
      share.backward()
      micro_sums = {k: v.detach() for k, v in micro_sums.items()}
      loss = loss + share.detach()
      sums = micro_sums if sums is None else {k: sums[k] + micro_sums[k] for k in sums}
    grads = [torch.zeros_like(v.value) if v.value.grad is None else v.value.grad for v in variables]
    grads = self._clipped(grads)
    with torch.no_grad():
      self.optimizer.apply(grads, variables)
    for v in variables:
      v.value.grad = None
    return dict(sums, loss=loss, **self.objective.step_values(sums, normalizers))

  def _clipped(self, grads):
    """The shared formula (`NumpyBatchLoop._clipped`: clip_norm / max(norm, clip_norm))
    in PyTorch's multi-tensor kernels: eager PyTorch launches each op separately, and the
    shared form is two ops per gradient for the norm and two for the scaling, about 800
    launches a step at base size, where these are a few."""
    if self.clip_norm <= 0:
      return grads
    # Accumulated in float64: PyTorch's float32 norm on a CPU measured 7.8e-5 off for the
    # 3.9M-value embedding gradient (the shared form's float32 sum, 2e-8). Apple's GPUs
    # have no float64.
    accumulate = torch.float32 if grads[0].device.type == "mps" else torch.float64
    norms = torch._foreach_norm(grads, 2, dtype=accumulate)  # [] each
    norm = torch.linalg.vector_norm(torch.stack(norms))
    scale = (self.clip_norm / torch.clamp(norm, min=self.clip_norm)).float()
    torch._foreach_mul_(grads, scale)
    return grads

  def train_steps(self, num_steps: int):
    self._start_input(self.current_step())
    per_step = []
    for _ in range(num_steps):
      micro_batches = [
          {k: keras.ops.convert_to_tensor(v) for k, v in batch.items()}
          for batch in self._next_micro_batches()
      ]
      per_step.append(self._step(micro_batches))
    # One wait for the whole call: the values stay on the device until here.
    per_step = [{k: keras.ops.convert_to_numpy(v) for k, v in d.items()} for d in per_step]
    if self._compiled:  # said after the first call, and again whenever it recompiled
      summary = compilation_summary()
      if summary != self._compilation_said:
        logging.info("%s", summary)
        self._compilation_said = summary
    return self._call_results(per_step)


def compilation_summary() -> str:
  """What torch.compile did in this process: graphs compiled and graph breaks (each
  break runs the code between two graphs eagerly, in Python)."""
  from torch._dynamo.utils import counters  # pylint: disable=g-import-not-at-top

  graphs = counters["stats"]["unique_graphs"]
  breaks = sum(counters["graph_break"].values())
  return f"torch.compile: {graphs} graph(s) compiled, {breaks} graph break(s)"
