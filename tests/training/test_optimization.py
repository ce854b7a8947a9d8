"""AdamW, the warmup/decay schedule and the weight-decay exclusions."""

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.models import Pretrainer, build_encoder
from recurrent_bert.training import optimization


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
  schedule = optimization.WarmupLinearDecay(3e-4, warmup, total, end)
  for step in [0, 1, warmup // 2, max(warmup - 1, 0), warmup, warmup + 1, (warmup + total) // 2,
               total - 1, total, total + 7]:
    expected = reference_learning_rate(step, 3e-4, warmup, total, end)
    assert float(schedule(step)) == pytest.approx(expected, rel=1e-5, abs=1e-12), step
  # Peak exactly at the end of warmup.
  assert float(schedule(warmup)) == pytest.approx(3e-4, rel=1e-6)


def test_schedule_rejects_warmup_not_below_total():
  with pytest.raises(ValueError, match="warmup_steps"):
    optimization.WarmupLinearDecay(1e-4, 100, 100)


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
  excluded = {p for p in paths if optimization.excluded_from_weight_decay(p)}
  assert excluded == {p for p in paths if _expected_no_decay(p)}
  # Spot checks against hand-written names.
  for path in ("embeddings/layer_norm/gamma", "block_0/attention_layer_norm/beta",
               "block_0/attention/query/bias", "mlm_head/output_bias"):
    assert path in excluded
  for path in ("embeddings/token_embedding/embeddings", "embeddings/position_embeddings",
               "block_0/attention/query/kernel", "pooler/kernel"):
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
  optimizer = optimization.create_optimizer(variables, learning_rate=lr, num_train_steps=10,
                                            warmup_steps=0, weight_decay=wd)
  before = [v.numpy().copy() for v in variables]
  optimizer.apply([tf.zeros_like(v) for v in variables], variables)
  for variable, old in zip(variables, before):
    factor = 1.0 if _expected_no_decay(variable.path) else 1.0 - lr * wd
    np.testing.assert_allclose(variable.numpy(), old * factor, rtol=1e-6, atol=1e-7,
                               err_msg=variable.path)
