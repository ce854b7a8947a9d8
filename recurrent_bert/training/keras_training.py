"""Training a model on an objective through Keras' own trainers, on every Keras backend.

The custom loop (training/loop.py) is TensorFlow's: tf.distribute, tf.data, checkpoints.
Under JAX and PyTorch a model trains through Keras' trainers instead, and
`ObjectiveModel` is the bridge: it wraps a built model (a `Pretrainer`, a task model) and
an objective (training/objectives.py) into a `keras.Model` whose loss is the objective's,
so that `compile` / `fit` / `train_on_batch` / `evaluate` work on TensorFlow, JAX (jitted)
and PyTorch alike:

  trainer = ObjectiveModel(pretrainer, PretrainingObjective(use_nsp=True))
  trainer.compile(optimizer=create_optimizer(pretrainer.trainable_variables, ...,
                                             clip_norm=1.0),
                  jit_compile=True)
  trainer.fit(dataset)              # batches: dicts of feature arrays, no labels
  loss = trainer.train_on_batch(batch)

A batch is the objective's feature dict, e.g. for pretraining `input_ids`, `input_mask`,
`segment_ids`, `masked_lm_positions` int [B, T] / [B, P], `masked_lm_ids` int [B, P],
`masked_lm_weights` float32 [B, P] and `next_sentence_labels` int [B] (or [B, 1]), as numpy
arrays or backend tensors. The model sees only `objective.model_inputs(batch)`.

One step is the custom loop's step on one replica without accumulation: the loss is
`objective.loss(objective.sums(batch, outputs), objective.normalizers(batch))` (e.g. the
weighted-mean MLM cross-entropy plus the mean NSP cross-entropy), its gradient is clipped
to a global norm by the optimizer (`create_optimizer(clip_norm=...)`; the loop clips the
same way with `clip_norm`) and AdamW or LAMB applies it. Mixed precision is the model's:
build it under the "mixed_bfloat16" dtype policy (JAX, PyTorch, TPU), or "mixed_float16"
with `create_optimizer(loss_scaling=True)`; Keras' trainers scale the loss for a
`LossScaleOptimizer` themselves. Differences from the loop: variables the loss does not
reach (the pooler without NSP) get a zero gradient, so AdamW still decays them; and the
normalizers are this batch's, so multi-replica TensorFlow training stays with the loop.

The trainer owns no variables: its weights are the wrapped model's, in the same order and
with the same paths (`embeddings/...`, `block_0/...`), so checkpoints keyed by path and the
optimizer built by `create_optimizer(model.trainable_variables)` match it, and
`save_weights` / `load_weights` read and write the wrapped model's own `.weights.h5`.
"""

from typing import Any, Dict

import keras
from keras import ops


class ObjectiveModel(keras.Model):
  """A built `model` trained on `objective`'s loss by Keras' fit / train_on_batch.

  Calling it on a batch dict returns the wrapped model's outputs on
  `objective.model_inputs(batch)`; `compute_loss` turns them into the objective's loss.

  Args:
    model: a built Keras model (e.g. `Pretrainer`, `Classifier`); its variables are the
      trainer's, untouched.
    objective: an objective of training/objectives.py (model_inputs, normalizers, sums,
      loss).
    **kwargs: `keras.Model`'s (name, ...).
  """

  def __init__(self, model: keras.Model, objective, **kwargs):
    if not model.built:
      raise ValueError(
          f"ObjectiveModel needs a built model (its variable paths are fixed when it is "
          f"built), got an unbuilt {type(model).__name__}: call it on a batch first"
      )
    # float32 whatever the global policy: Keras casts a layer's float inputs to its
    # compute dtype, and the objective's weights and normalizers must stay float32.
    kwargs.setdefault("dtype", "float32")
    super().__init__(**kwargs)
    self.model = model
    self.objective = objective
    # The wrapped model is built, and this wrapper has no variables of its own: Keras'
    # symbolic build before the first step has nothing to create.
    self.built = True

  def call(self, inputs: Dict[str, Any], training: bool = False):
    return self.model(self.objective.model_inputs(inputs), training=training)

  def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
    """The objective's float32 scalar loss of batch `x` with model outputs `y_pred`.

    `y` and `sample_weight` are unused: the labels and weights are features of `x`.
    """
    del y, sample_weight, training
    sums = self.objective.sums(x, y_pred)
    loss = self.objective.loss(sums, self.objective.normalizers(x))
    # Losses the layers add (activity regularisers); none in this package's models.
    for extra in self.losses:
      loss = loss + ops.cast(ops.sum(extra), loss.dtype)
    return loss

  def save_weights(self, filepath, overwrite=True, **kwargs):
    """Writes the wrapped model's `.weights.h5` (loadable without this wrapper)."""
    return self.model.save_weights(filepath, overwrite=overwrite, **kwargs)

  def load_weights(self, filepath, skip_mismatch=False, **kwargs):
    """Reads a `.weights.h5` of the wrapped model."""
    return self.model.load_weights(filepath, skip_mismatch=skip_mismatch, **kwargs)
