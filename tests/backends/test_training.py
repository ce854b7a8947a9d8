"""The training pieces under JAX and PyTorch: metric sums, objectives, schedules, LAMB and
`ObjectiveModel` training, against numpy and against TensorFlow's own training loop.

Run as `KERAS_BACKEND=jax pytest tests/backends/test_training.py` (and torch).
"""

import concurrent.futures
import math

import keras
import numpy as np
import pytest

from recurrent_bert.config import get_preset
from recurrent_bert.models import Pretrainer
from recurrent_bert.models import build_encoder
from recurrent_bert.training import metric_sums
from recurrent_bert.training import objectives
from recurrent_bert.training import optimizers
from recurrent_bert.training.keras_training import ObjectiveModel
from tests.backends.support import BACKEND
from tests.backends.support import run_python
from tests.backends.support import run_under_backend
from tests.backends.support import to_numpy
from tests.support import references

VOCAB, BATCH, LENGTH, PREDICTIONS = 40, 4, 8, 3
# JAX jits the step; torch.compile is not the CPU test's business.
JIT = BACKEND == "jax"


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _cross_entropy(logits, labels):
  return -np.take_along_axis(_log_softmax(logits.astype(np.float64)), labels[..., None], -1)[..., 0]


def test_importing_the_training_pieces_loads_no_tensorflow():
  result = run_python(
      """
      import sys
      import keras
      from recurrent_bert.training import keras_training, metric_sums, objectives, optimizers
      if keras.backend.backend() == "jax":  # the JAX commands' modules
        from recurrent_bert.training import jax_loop
      if keras.backend.backend() == "torch":
        from recurrent_bert.training import torch_loop
      if keras.backend.backend() != "tensorflow":  # pretraining's whole
        from recurrent_bert.training import backend_runs, driver, events, numpy_pretraining
        from recurrent_bert.training import pretraining_results
        from recurrent_bert.saving import training_state
        from recurrent_bert.data import example_decoder, record_batches
      print("tensorflow" in sys.modules)
      """,
      BACKEND,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip() == "False"


# -- metric sums and objectives against numpy --------------------------------------------


def test_pretraining_sums_match_numpy(rng):
  """MLM and NSP sums of padded predictions, padded evaluation rows and the word count."""
  logits = rng.normal(size=(3, 5, 11)).astype(np.float32) * 3
  ids = rng.integers(0, 11, size=(3, 5)).astype(np.int32)
  weights = np.array([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]], np.float32)
  nsp_logits = rng.normal(size=(3, 2)).astype(np.float32)
  labels = np.array([[0], [1], [1]], np.int32)
  example_weights = np.array([1, 1, 0], np.float32)
  mask = np.array([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4], np.int32)
  batch = {
      "input_ids": keras.ops.convert_to_tensor(np.zeros((3, 6), np.int32)),
      "input_mask": keras.ops.convert_to_tensor(mask),
      "masked_lm_ids": keras.ops.convert_to_tensor(ids),
      "masked_lm_weights": keras.ops.convert_to_tensor(weights),
      "next_sentence_labels": keras.ops.convert_to_tensor(labels),
      "example_weights": keras.ops.convert_to_tensor(example_weights),
  }
  outputs = {
      "mlm_logits": keras.ops.convert_to_tensor(logits),
      "nsp_logits": keras.ops.convert_to_tensor(nsp_logits),
  }
  sums = {k: float(to_numpy(v)) for k, v in metric_sums.pretraining_sums(batch, outputs).items()}
  nsp_ce = _cross_entropy(nsp_logits, labels[:, 0])
  expected = {
      "mlm_loss_sum": (weights * _cross_entropy(logits, ids)).sum(),
      "mlm_weight_sum": 9.0,
      "mlm_correct": ((logits.argmax(-1) == ids) * weights).sum(),
      "nsp_loss_sum": nsp_ce[0] + nsp_ce[1],
      "nsp_correct": float((nsp_logits.argmax(-1) == labels[:, 0])[:2].sum()),
      "num_examples": 2.0,
      "num_tokens": 12.0,
  }
  assert sums == pytest.approx(expected, rel=1e-5)
  starts = np.arange(11) % 3 == 0
  words = metric_sums.masked_word_count(batch["masked_lm_ids"], batch["masked_lm_weights"], starts)
  assert float(to_numpy(words)) == (weights * starts[ids]).sum()
  # Without NSP outputs the NSP terms are zeros, and every row counts.
  del batch["example_weights"], outputs["nsp_logits"]
  sums = metric_sums.pretraining_sums(batch, outputs)
  assert float(to_numpy(sums["nsp_loss_sum"])) == 0.0
  assert float(to_numpy(sums["num_examples"])) == 3.0


def test_objective_losses_match_numpy(rng):
  """Pretraining (MLM weighted mean + NSP mean), span and tagging losses."""
  logits = rng.normal(size=(4, 3, 9)).astype(np.float32)
  ids = rng.integers(0, 9, size=(4, 3)).astype(np.int32)
  weights = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]], np.float32)
  nsp_logits = rng.normal(size=(4, 2)).astype(np.float32)
  nsp_labels = rng.integers(0, 2, size=4).astype(np.int32)
  mask = np.ones((4, 7), np.int32)
  as_backend = lambda d: {k: keras.ops.convert_to_tensor(v) for k, v in d.items()}
  batch = as_backend(
      dict(
          input_ids=mask,
          input_mask=mask,
          masked_lm_ids=ids,
          masked_lm_weights=weights,
          next_sentence_labels=nsp_labels,
      )
  )
  objective = objectives.PretrainingObjective(use_nsp=True)
  outputs = as_backend(dict(mlm_logits=logits, nsp_logits=nsp_logits))
  loss = objective.loss(objective.sums(batch, outputs), objective.normalizers(batch))
  mlm = (weights * _cross_entropy(logits, ids)).sum() / weights.sum()
  nsp = _cross_entropy(nsp_logits, nsp_labels).mean()
  assert float(to_numpy(loss)) == pytest.approx(mlm + nsp, rel=1e-5)

  starts, ends = ids[:, 0], ids[:, 1]
  span = objectives.SpanObjective()
  span_batch = as_backend(
      dict(input_ids=mask, input_mask=mask, start_positions=starts, end_positions=ends)
  )
  sums = span.sums(span_batch, as_backend(dict(start_logits=logits[:, 0], end_logits=logits[:, 1])))
  want = (_cross_entropy(logits[:, 0], starts) + _cross_entropy(logits[:, 1], ends)).mean() / 2
  assert float(to_numpy(span.loss(sums, span.normalizers(span_batch)))) == pytest.approx(
      want, rel=1e-5
  )
  both = (logits[:, 0].argmax(-1) == starts) & (logits[:, 1].argmax(-1) == ends)
  assert float(to_numpy(sums["correct"])) == both.sum()

  tagging = objectives.TaggingObjective()
  tag_batch = as_backend(
      dict(input_ids=mask, input_mask=mask, label_ids=ids, label_weights=weights)
  )
  sums = tagging.sums(tag_batch, keras.ops.convert_to_tensor(logits))
  assert float(to_numpy(tagging.loss(sums, tagging.normalizers(tag_batch)))) == pytest.approx(
      mlm, rel=1e-5
  )
  assert float(to_numpy(sums["correct"])) == ((logits.argmax(-1) == ids) * weights).sum()


# -- schedules and LAMB ------------------------------------------------------------------


def _schedule_formula(step, kind, peak=2e-3, warmup=10, total=110, end=1e-4, power=2.0):
  """The learning rate at `step`, from the schedules' definitions, one case at a time."""
  if step < warmup:
    return peak * step / warmup
  if kind == "constant":
    return peak
  left = min(max((total - step) / (total - warmup), 0.0), 1.0)
  decayed = {
      "linear": left,
      "polynomial": left**power,
      "cosine": (1 + math.cos(math.pi * (1 - left))) / 2,
  }[kind]
  return end + (peak - end) * decayed


@pytest.mark.parametrize("kind", optimizers.DECAY_SCHEDULES)
def test_schedules_match_their_formulas(kind):
  schedule = optimizers.WarmupDecay(2e-3, 10, 110, 1e-4, decay_schedule=kind, decay_power=2.0)
  steps = [0, 1, 5, 9, 10, 11, 35, 60, 85, 109, 110, 111, 500]
  # As Keras' optimizers call it, on an int tensor (their step counter); and on an int.
  got = [to_numpy(schedule(keras.ops.convert_to_tensor(s, "int32"))) for s in steps]
  want = [_schedule_formula(s, kind) for s in steps]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-10)
  assert float(to_numpy(schedule(60))) == pytest.approx(want[7], rel=1e-5)


def test_lamb_matches_numpy_algorithm_2(rng):
  """Four updates with random gradients equal references.lamb (decay, trust ratio and the
  LayerNorm/bias exclusions included). The loss-scale wrapper is Keras' (float16 `fit`
  below; tests/training/test_optimizers.py checks its numbers on TensorFlow)."""
  inputs = keras.Input((3,))
  hidden = keras.layers.Dense(4, name="dense")(inputs)
  hidden = keras.layers.Dense(4, name="zero", kernel_initializer="zeros", use_bias=False)(hidden)
  model = keras.Model(inputs, keras.layers.LayerNormalization(name="out_layer_norm")(hidden))
  variables = model.trainable_variables
  paths = [v.path for v in variables]
  lr, wd, b1, b2, eps = 0.01, 0.3, 0.8, 0.95, 1e-6
  optimizer = optimizers.create_optimizer(
      variables,
      learning_rate=lr,
      num_train_steps=1000,
      warmup_steps=0,
      weight_decay=wd,
      beta_1=b1,
      beta_2=b2,
      epsilon=eps,
      optimizer="lamb",
      decay_schedule="constant",
  )
  initial = {v.path: to_numpy(v).astype(np.float64) for v in variables}
  steps = [
      {p: rng.normal(size=initial[p].shape) * 10.0 ** rng.integers(-3, 1) for p in paths}
      for _ in range(4)
  ]
  excluded = {"dense/bias", "out_layer_norm/gamma", "out_layer_norm/beta"}
  expected = references.lamb(initial, steps, lr, b1, b2, eps, wd, excluded=excluded)
  for step, want in zip(steps, expected):
    optimizer.apply([keras.ops.convert_to_tensor(step[p], "float32") for p in paths], variables)
    for variable in variables:
      np.testing.assert_allclose(
          to_numpy(variable), want[variable.path], rtol=2e-5, atol=1e-6, err_msg=variable.path
      )


# -- training a tiny Pretrainer, and its first updates against TensorFlow's loop ---------


def _tiny_pretrainer(seed=0):
  """A 1-layer bert_tiny without dropout, so steps are deterministic."""
  config = get_preset("bert_tiny").replace(
      vocab_size=VOCAB,
      hidden_size=16,
      num_heads=2,
      intermediate_size=32,
      num_layers=1,
      max_position_embeddings=16,
      dropout_rate=0.0,
      attention_dropout_rate=0.0,
  )
  keras.utils.set_random_seed(seed)
  return Pretrainer(build_encoder(config), use_nsp=True)


def _pretraining_batch(seed=0):
  """Pretraining features as numpy: row 1 is padding from position 5, padded predictions."""
  rng = np.random.default_rng(seed)
  mask = np.ones((BATCH, LENGTH), np.int32)
  mask[1, 5:] = 0
  return {
      "input_ids": rng.integers(5, VOCAB, (BATCH, LENGTH)).astype(np.int32),
      "input_mask": mask,
      "segment_ids": (np.arange(LENGTH) >= 4).astype(np.int32)[None].repeat(BATCH, 0),
      "masked_lm_positions": rng.integers(1, 5, (BATCH, PREDICTIONS)).astype(np.int32),
      "masked_lm_ids": rng.integers(5, VOCAB, (BATCH, PREDICTIONS)).astype(np.int32),
      "masked_lm_weights": np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], np.float32),
      "next_sentence_labels": rng.integers(0, 2, (BATCH, 1)).astype(np.int32),
  }


STEPS = 24
# (dtype policy, create_optimizer settings): AdamW and LAMB, every schedule once, with and
# without warmup, float32 and mixed precision. Every clip norm is below the gradient's
# global norm at the start (2.8), so clipping acts in the updates compared with TensorFlow.
RUNS = {
    "adamw_linear": ("float32", dict(optimizer="adamw", warmup_steps=0, clip_norm=0.5)),
    "lamb_cosine": (
        "float32",
        dict(optimizer="lamb", decay_schedule="cosine", warmup_steps=2, clip_norm=0.2),
    ),
    "adamw_polynomial_bfloat16": (
        "mixed_bfloat16",
        dict(optimizer="adamw", decay_schedule="polynomial", decay_power=2.0, warmup_steps=1),
    ),
    "lamb_constant_float16": (
        "mixed_float16",
        dict(optimizer="lamb", decay_schedule="constant", warmup_steps=0, loss_scaling=True),
    ),
}
for _, _settings in RUNS.values():
  _settings.update(num_train_steps=STEPS, clip_norm=_settings.get("clip_norm", 1.0))
  _settings["learning_rate"] = 0.1 if _settings["optimizer"] == "lamb" else 1e-2
# The float32 runs whose first updates TensorFlow's loop repeats.
COMPARED = ("adamw_linear", "lamb_cosine")

# Their first 3 updates by TensorFlow's custom loop, from the same weights and batch:
# PretrainingLoop.train_steps (GradientTape, clip_by_global_norm, optimizer.apply).
_TF_LOOP_STEPS = """
import tempfile
import tensorflow as tf
from recurrent_bert.training import loop, optimizers
from tests.backends.test_training import COMPARED, RUNS, _tiny_pretrainer
batch = {k[len("batch:"):]: v for k, v in inputs.items() if k.startswith("batch:")}
for name in COMPARED:
  model = _tiny_pretrainer()
  for variable in model.trainable_variables:
    variable.assign(inputs["weight:" + variable.path])
  settings = dict(RUNS[name][1])
  clip_norm = settings.pop("clip_norm")  # the loop clips, not the optimizer
  optimizer = optimizers.create_optimizer(model.trainable_variables, **settings)
  with tempfile.TemporaryDirectory() as model_dir:
    training = loop.PretrainingLoop(
        tf.distribute.get_strategy(),
        model,
        optimizer,
        lambda context, skip: tf.data.Dataset.from_tensors(batch).repeat(),
        model_dir=model_dir,
        global_batch_size=len(batch["input_ids"]),
        num_train_steps=3,
        clip_norm=clip_norm,
    )
    _, values = training.train_steps(3)
  outputs[name + ":loss"] = values["loss"]
  for variable in model.trainable_variables:
    outputs[name + ":" + variable.path] = variable.numpy()
"""


@pytest.fixture(scope="module")
def initial_weights():
  return {v.path: to_numpy(v) for v in _tiny_pretrainer().trainable_variables}


@pytest.fixture(scope="module")
def tensorflow_updates(initial_weights):
  """A future of the TensorFlow loop's results: the TensorFlow process runs while this
  process compiles its own steps."""
  arrays = {f"batch:{k}": v for k, v in _pretraining_batch().items()}
  arrays.update({f"weight:{k}": v for k, v in initial_weights.items()})
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    yield pool.submit(run_under_backend, _TF_LOOP_STEPS, **arrays)


def _fit(trainer, batch, start, stop):
  """`fit` from epoch `start` to `stop` (one step each, the same batch): the losses."""
  history = trainer.fit(
      batch, batch_size=BATCH, epochs=stop, initial_epoch=start, shuffle=False, verbose=0
  )
  return history.history["loss"]


@pytest.fixture(scope="module")
def fitted(initial_weights, tensorflow_updates):
  """Per run: `fit`'s per-step losses, the trainable weights after 3 updates and more."""
  del tensorflow_updates  # started first, to overlap
  batch = _pretraining_batch()
  results = {}
  for name, (policy, settings) in RUNS.items():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
      pretrainer = _tiny_pretrainer()
    finally:
      keras.config.set_dtype_policy(previous)
    for variable in pretrainer.trainable_variables:
      variable.assign(initial_weights[variable.path])
    trainer = ObjectiveModel(pretrainer, objectives.PretrainingObjective(use_nsp=True))
    optimizer = optimizers.create_optimizer(pretrainer.trainable_variables, **settings)
    trainer.compile(optimizer=optimizer, jit_compile=JIT)
    losses = _fit(trainer, batch, 0, 3)
    after_3 = {v.path: to_numpy(v) for v in pretrainer.trainable_variables}
    losses += _fit(trainer, batch, 3, STEPS)
    results[name] = dict(
        losses=losses,
        after_3=after_3,
        iterations=int(to_numpy(optimizer.iterations)),
        compute_dtype=pretrainer.compute_dtype,
        variable_dtypes={v.dtype for v in pretrainer.trainable_variables},
    )
  return results


def test_objective_model_keeps_the_wrapped_models_variables(tmp_path):
  pretrainer = _tiny_pretrainer()
  trainer = ObjectiveModel(pretrainer, objectives.PretrainingObjective(use_nsp=True))
  assert [v.path for v in trainer.weights] == [v.path for v in pretrainer.weights]
  assert all(a is b for a, b in zip(trainer.trainable_variables, pretrainer.trainable_variables))
  assert "block_0/attention/query/kernel" in {v.path for v in trainer.weights}
  trainer.save_weights(str(tmp_path / "model.weights.h5"))
  other = _tiny_pretrainer(seed=1)
  other.load_weights(str(tmp_path / "model.weights.h5"))
  for a, b in zip(pretrainer.weights, other.weights):
    np.testing.assert_array_equal(to_numpy(a), to_numpy(b), err_msg=a.path)


@pytest.mark.parametrize("name", RUNS)
def test_fit_decreases_the_loss(fitted, name):
  """24 steps of `fit` on one fixed batch: the loss falls well below its start, in
  float32 and in mixed precision (float32 variables, bfloat16 / float16 compute)."""
  run = fitted[name]
  losses = run["losses"]
  assert len(losses) == STEPS and np.all(np.isfinite(losses))
  # Untrained: near-uniform MLM (ln V) and NSP (ln 2) predictions.
  assert losses[0] == pytest.approx(math.log(VOCAB) + math.log(2), abs=0.3)
  assert losses[-1] < losses[0] - 1.0, losses
  policy = RUNS[name][0]
  assert run["compute_dtype"] == keras.DTypePolicy(policy).compute_dtype
  assert run["variable_dtypes"] == {"float32"}
  # float16 steps whose gradients overflow are skipped while the loss scale falls.
  if policy != "mixed_float16":
    assert run["iterations"] == STEPS


@pytest.mark.parametrize("name", COMPARED)
def test_first_three_updates_equal_the_tensorflow_loops(
    fitted, tensorflow_updates, initial_weights, name
):
  reference = tensorflow_updates.result()
  np.testing.assert_allclose(
      fitted[name]["losses"][:3], reference[name + ":loss"], rtol=1e-5, err_msg=name
  )
  moved = 0.0
  for path, value in fitted[name]["after_3"].items():
    np.testing.assert_allclose(value, reference[f"{name}:{path}"], rtol=0, atol=1e-5, err_msg=path)
    moved = max(moved, np.abs(value - initial_weights[path]).max())
  assert moved > 1e-3  # the updates are far larger than the tolerance
