"""AdamW, LAMB, the warmup/decay schedules and the weight-decay exclusions."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.flags import optimization as optimization_flags
from recurrent_bert.models import Pretrainer
from recurrent_bert.models import build_encoder
from recurrent_bert.training import optimizers
from tests.support import references


def reference_learning_rate(step, peak, warmup, total, end):
  """BERT's schedule written out by hand, one step at a time."""
  if step < warmup:
    return peak * step / warmup
  if step >= total:
    return end
  fraction_left = (total - step) / (total - warmup)
  return end + (peak - end) * fraction_left


@pytest.mark.parametrize("warmup,total,end", [(10, 100, 0.0), (0, 50, 1e-5), (30, 40, 2e-6)])
def test_schedule_matches_closed_form(warmup, total, end):
  schedule = optimizers.WarmupLinearDecay(3e-4, warmup, total, end)
  for step in [
      0,
      1,
      warmup // 2,
      max(warmup - 1, 0),
      warmup,
      warmup + 1,
      (warmup + total) // 2,
      total - 1,
      total,
      total + 7,
  ]:
    expected = reference_learning_rate(step, 3e-4, warmup, total, end)
    assert float(schedule(step)) == pytest.approx(expected, rel=1e-5, abs=1e-12), step
  # Peak exactly at the end of warmup.
  assert float(schedule(warmup)) == pytest.approx(3e-4, rel=1e-6)


def test_schedule_rejects_warmup_not_below_total():
  with pytest.raises(ValueError, match="warmup_steps"):
    optimizers.WarmupLinearDecay(1e-4, 100, 100)


def _expected_no_decay(path):
  """Independent statement of the rule, from the last two path components."""
  parent, name = path.split("/")[-2:]
  if name in ("gamma", "beta") and parent.endswith("layer_norm"):
    return True
  if name in ("alpha", "beta") and parent == "swish_rnn":
    return True
  return name.endswith("bias") or name == "bias_table"


@pytest.mark.parametrize("preset", ["swishrnn_tiny", "trans_blstm_2_tiny", "bert_rab_tiny"])
def test_weight_decay_exclusions_by_name(preset):
  model = Pretrainer(build_encoder(preset), use_nsp=True)
  paths = [v.path for v in model.trainable_variables]
  excluded = {p for p in paths if optimizers.excluded_from_weight_decay(p)}
  assert excluded == {p for p in paths if _expected_no_decay(p)}
  # Spot checks against hand-written names.
  for path in (
      "embeddings/layer_norm/gamma",
      "block_0/attention_layer_norm/beta",
      "block_0/attention/query/bias",
      "mlm_head/output_bias",
  ):
    assert path in excluded
  for path in (
      "embeddings/token_embedding/embeddings",
      "embeddings/position_embeddings",
      "block_0/attention/query/kernel",
      "pooler/kernel",
  ):
    assert path not in excluded
  if preset.startswith("swishrnn"):
    assert {"block_0/swish_rnn/alpha", "block_0/swish_rnn/beta"} <= excluded
    assert not {"block_0/swish_rnn/x1_kernel", "block_0/swish_rnn/x2_kernel"} & excluded


def test_adamw_decays_only_included_variables():
  """With zero gradients Adam's step is 0, so only decoupled decay moves weights:
  w <- w (1 - lr wd) for decayed variables, unchanged for excluded ones."""
  model = Pretrainer(build_encoder("swishrnn_tiny"), use_nsp=False)
  variables = model.trainable_variables
  lr, wd = 0.1, 0.5
  optimizer = optimizers.create_optimizer(
      variables, learning_rate=lr, num_train_steps=10, warmup_steps=0, weight_decay=wd
  )
  before = [v.numpy().copy() for v in variables]
  optimizer.apply([tf.zeros_like(v) for v in variables], variables)
  for variable, old in zip(variables, before):
    factor = 1.0 if _expected_no_decay(variable.path) else 1.0 - lr * wd
    np.testing.assert_allclose(
        variable.numpy(), old * factor, rtol=1e-6, atol=1e-7, err_msg=variable.path
    )


# -- schedules -------------------------------------------------------------------------

# Closed forms written out per schedule, at hand-picked steps: peak 2e-3, warmup 10,
# 110 total steps (100 of decay), end 1e-4.
_PEAK, _WARMUP, _TOTAL, _END = 2e-3, 10, 110, 1e-4
CLOSED_FORMS = {
    # step: learning rate
    "linear": {
        0: 0.0,
        5: 1e-3,
        10: _PEAK,
        35: _END + (_PEAK - _END) * 0.75,
        60: _END + (_PEAK - _END) * 0.5,
        110: _END,
        500: _END,
    },
    "polynomial": {
        5: 1e-3,
        10: _PEAK,
        35: _END + (_PEAK - _END) * 0.75**2,
        60: _END + (_PEAK - _END) * 0.25,
        100: _END + (_PEAK - _END) * 0.01,
        110: _END,
        500: _END,
    },
    "cosine": {
        5: 1e-3,
        10: _PEAK,
        35: _END + (_PEAK - _END) * (1 + math.sqrt(0.5)) / 2,
        60: (_PEAK + _END) / 2,
        85: _END + (_PEAK - _END) * (1 - math.sqrt(0.5)) / 2,
        110: _END,
        500: _END,
    },
    "constant": {0: 0.0, 5: 1e-3, 10: _PEAK, 60: _PEAK, 110: _PEAK, 500: _PEAK},
}


@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
def test_each_schedule_matches_its_closed_form(name):
  schedule = optimizers.WarmupDecay(
      _PEAK, _WARMUP, _TOTAL, _END, decay_schedule=name, decay_power=2.0
  )
  for step, expected in CLOSED_FORMS[name].items():
    assert float(schedule(step)) == pytest.approx(expected, rel=1e-5, abs=1e-10), step
    assert float(schedule(tf.constant(step, tf.int64))) == pytest.approx(
        expected, rel=1e-5, abs=1e-10
    ), step


def test_polynomial_power_one_is_linear_and_schedules_round_trip():
  linear = optimizers.WarmupDecay(1e-3, 5, 50, 1e-5)
  polynomial = optimizers.WarmupDecay(1e-3, 5, 50, 1e-5, "polynomial", 1.0)
  for step in range(0, 60, 3):
    assert float(polynomial(step)) == pytest.approx(float(linear(step)), rel=1e-6)
  schedule = optimizers.WarmupDecay(1e-3, 5, 50, 1e-5, "cosine", 0.5)
  restored = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
  assert isinstance(restored, optimizers.WarmupDecay)
  assert restored.get_config() == schedule.get_config()
  with pytest.raises(ValueError, match="decay_schedule"):
    optimizers.WarmupDecay(1e-3, 5, 50, decay_schedule="exponential")


# -- LAMB ------------------------------------------------------------------------------


def _lamb_test_model():
  """Two decayed kernels (one all zeros: ||w|| = 0), a bias and a LayerNorm."""
  inputs = keras.Input((3,))
  hidden = keras.layers.Dense(4, name="dense")(inputs)
  hidden = keras.layers.Dense(4, name="zero", kernel_initializer="zeros", use_bias=False)(hidden)
  outputs = keras.layers.LayerNormalization(name="out_layer_norm")(hidden)
  return keras.Model(inputs, outputs)


@pytest.mark.parametrize("loss_scaling", [False, True])
def test_lamb_matches_numpy_algorithm_2(rng, loss_scaling):
  """Six updates with random gradients equal references.lamb, decay, trust ratio and
  exclusions included; through the float16 loss-scale wrapper too."""
  model = _lamb_test_model()
  variables = model.trainable_variables
  paths = [v.path for v in variables]
  assert set(paths) == {
      "dense/kernel",
      "dense/bias",
      "zero/kernel",
      "out_layer_norm/gamma",
      "out_layer_norm/beta",
  }
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
      loss_scaling=loss_scaling,
  )
  # LayerNorm gamma starts at ones: make it differ from what Adam alone would give.
  initial = {v.path: v.numpy().astype(np.float64) for v in variables}
  steps = [
      {p: rng.normal(size=initial[p].shape) * 10.0 ** rng.integers(-3, 1) for p in paths}
      for _ in range(6)
  ]
  expected = references.lamb(
      initial,
      steps,
      lr,
      b1,
      b2,
      eps,
      wd,
      excluded={"dense/bias", "out_layer_norm/gamma", "out_layer_norm/beta"},
  )
  scale = float(optimizer.scale_loss(tf.constant(1.0))) if loss_scaling else 1.0
  for grads, want in zip(steps, expected):
    optimizer.apply([tf.constant(grads[p] * scale, tf.float32) for p in paths], variables)
    for variable in variables:
      np.testing.assert_allclose(
          variable.numpy(), want[variable.path], rtol=2e-5, atol=1e-6, err_msg=variable.path
      )
  # The zero kernel moved by lr · r (trust ratio 1), then by the ratio of its new norm.
  assert np.abs(model.get_layer("zero").kernel.numpy()).max() > 0


def test_lamb_slots_checkpoint_and_restore(tmp_path, rng):
  """Moments and the step counter come back: the resumed optimizer continues exactly."""

  def build():
    keras.utils.set_random_seed(7)
    model = _lamb_test_model()
    return model, optimizers.create_optimizer(
        model.trainable_variables,
        learning_rate=0.01,
        num_train_steps=100,
        warmup_steps=2,
        optimizer="lamb",
    )

  grads = [
      [
          tf.constant(rng.normal(size=v.shape), tf.float32)
          for v in _lamb_test_model().trainable_variables
      ]
      for _ in range(4)
  ]
  model, optimizer = build()
  state = lambda m, o: tf.train.Checkpoint(
      model={v.path: v for v in m.trainable_variables}, optimizer=o
  )
  for g in grads[:2]:
    optimizer.apply(g, model.trainable_variables)
  prefix = state(model, optimizer).write(str(tmp_path / "ckpt"))
  for g in grads[2:]:
    optimizer.apply(g, model.trainable_variables)

  resumed_model, resumed = build()
  state(resumed_model, resumed).read(prefix).assert_consumed()
  assert int(resumed.iterations.numpy()) == 2
  for g in grads[2:]:
    resumed.apply(g, resumed_model.trainable_variables)
  for a, b in zip(model.trainable_variables, resumed_model.trainable_variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
  config = optimizer.get_config()
  assert isinstance(optimizers.Lamb.from_config(config), optimizers.Lamb)


def test_flag_choices_are_the_optimizers_and_schedules():
  """The flags module names them without importing TensorFlow: the lists must agree."""
  assert optimization_flags.OPTIMIZERS == optimizers.OPTIMIZERS
  assert optimization_flags.DECAY_SCHEDULES == optimizers.DECAY_SCHEDULES
