"""JAX's training loop (training/jax_loop.py) donates the state its step updates, and
clips by a global norm that equals numpy's.

The jitted step gives XLA the buffers of the weights, the seed states and the optimizer's
slots to write the new values into (on a GPU the state is then held once, not twice).
In-process, on a 1-layer tiny Pretrainer: the lowered program marks every state argument
as donated and no batch argument; after loop calls, whole or stopped part-way, every
Keras variable holds a live array that checkpoints and evaluation can read.
Run as `KERAS_BACKEND=jax pytest tests/backends/test_jax_loop.py`.
"""

import re
import warnings

import keras
import numpy as np
import pytest

from recurrent_bert.errors import InputError
from tests.backends.support import BACKEND
from tests.backends.test_training import BATCH
from tests.backends.test_training import _pretraining_batch
from tests.backends.test_training import _tiny_pretrainer

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="the JAX loop (KERAS_BACKEND=jax)")

# A donated argument of the lowered main function: aliased to an output, or a donor XLA
# may reuse for any output of its shape.
DONATED = re.compile(r"tf\.aliasing_output|jax\.buffer_donor")


def _batches(stop_after=None):
  """batches_fn: the same batch over and over; bad input after `stop_after` batches."""

  def batches_fn(skip_batches):
    del skip_batches
    index = 0
    while True:
      if stop_after is not None and index >= stop_after:
        raise InputError("a bad record (the test's)")
      index += 1
      yield _pretraining_batch()

  return batches_fn


def _loop(model_dir, stop_after=None):
  from recurrent_bert.training import objectives
  from recurrent_bert.training import optimizers
  from recurrent_bert.training.jax_loop import JaxTrainingLoop

  model = _tiny_pretrainer()
  optimizer = optimizers.create_optimizer(
      model.trainable_variables, learning_rate=1e-3, num_train_steps=8, warmup_steps=0
  )
  return JaxTrainingLoop(
      model,
      optimizer,
      _batches(stop_after),
      objectives.PretrainingObjective(use_nsp=True),
      model_dir=str(model_dir),
      global_batch_size=BATCH,
      num_train_steps=8,
  )


def _state(loop):
  return [v.value for variables in loop._state_variables() for v in variables]


def _main_arguments(text):
  """The argument list of the lowered module's main function, one entry per array."""
  signature = re.search(r"func\.func public @main\((.*?)\) ->", text, re.S).group(1)
  return re.split(r",\s*(?=%arg\d+:)", signature)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_the_lowered_step_donates_every_state_argument_and_no_batch(tmp_path, policy):
  """Under mixed_bfloat16 the state has a fourth list, the weights' 16-bit copies."""
  keras.config.set_dtype_policy(policy)
  try:
    loop = _loop(tmp_path)
  finally:
    keras.config.set_dtype_policy("float32")
  batch = loop._device_batch(_pretraining_batch())
  state = loop._step_state((batch,))
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    lowered = loop._jitted_step.lower(*state, (batch,))
    lowered.compile()
  arguments = _main_arguments(lowered.as_text())
  num_state = sum(len(arrays) for arrays in state)
  assert (num_state > len(_state(loop))) == (policy == "mixed_bfloat16")
  assert num_state == len(_state(loop)) + len(state[3]) and len(arguments) == num_state + len(batch)
  donated = [bool(DONATED.search(argument)) for argument in arguments]
  # Flattened in argument order: the four state lists, then the batch dict.
  assert donated == [True] * num_state + [False] * len(batch), arguments
  # Every donated buffer has an output of its shape and dtype to go to.
  assert not [w for w in caught if "donated" in str(w.message).lower()], caught


def test_after_whole_and_stopped_calls_the_variables_hold_live_arrays(tmp_path):
  from recurrent_bert.saving import training_state

  loop = _loop(tmp_path / "whole")
  before = _state(loop)
  sums, values = loop.train_steps(2)
  assert np.all(np.isfinite(values["loss"])) and sums["num_examples"] == 2 * BATCH
  # The donation took effect: the weights' old buffers are gone (the optimizer's step
  # count may be copied instead: current_step() reads it as numpy).
  num_trainable = len(loop.model.trainable_variables)
  assert all(array.is_deleted() for array in before[:num_trainable])
  assert not any(array.is_deleted() for array in _state(loop))
  loop.train_steps(2)  # the arrays written back are donated in turn
  assert loop.current_step() == 4
  # Checkpoints and evaluation read the variables between calls.
  training_state.save_state(str(tmp_path / "whole"), 4, loop.model, loop.optimizer, keep=1)
  assert all(np.all(np.isfinite(keras.ops.convert_to_numpy(v))) for v in loop.model.weights)

  # Bad input on the second step of a call: the first step's outputs are written back.
  stopped = _loop(tmp_path / "stopped", stop_after=1)
  initial = [np.array(keras.ops.convert_to_numpy(v)) for v in stopped.model.trainable_variables]
  with pytest.raises(InputError):
    stopped.train_steps(2)
  assert stopped.current_step() == 1
  assert not any(array.is_deleted() for array in _state(stopped))
  after = [keras.ops.convert_to_numpy(v) for v in stopped.model.trainable_variables]
  assert max(np.abs(a - b).max() for a, b in zip(after, initial)) > 1e-4  # one step's update


def test_the_global_norm_is_numpys_with_small_and_large_gradients(rng):
  """jax_loop.global_norm, jitted, against numpy's float64 norm over gradients on both
  sides of the size at which they are concatenated (1, 768 and 2**16 - 1 elements
  concatenated; 2**16, [300, 400] and [3, 2**15] summed over 1,024, 32 and 1,024 rows,
  the odd 2**16 + 1 over one), and with none small or none large."""
  import jax

  from recurrent_bert.training.jax_loop import global_norm

  shapes = [(768,), (1,), (2**16 - 1,), (2**16,), (300, 400), (3, 2**15), (2**16 + 1,), (12, 64)]
  grads = [rng.standard_normal(shape).astype("float32") for shape in shapes]
  for subset in (grads, grads[3:7], [grads[0], grads[7]]):
    want = np.sqrt(sum(np.sum(np.square(g.astype(np.float64))) for g in subset))
    got = float(jax.jit(global_norm)(subset))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_steps_on_16_bit_copies_equal_steps_on_the_float32_weights(tmp_path, monkeypatch):
  """Under mixed_bfloat16, with two micro-batches a step: the loop reading the 16-bit
  copies it keeps (`_step_state`) gives the losses, weights and optimizer slots of the
  loop that casts the float32 weights in every step (no copies), bit for bit, over two
  loop calls; and it keeps copies of most weights, not of the LayerNorms' (read in
  float32) or the token embeddings' (never cast)."""
  from recurrent_bert.training import jax_loop

  results = {}
  for copies in (True, False):
    if not copies:
      monkeypatch.setattr(jax_loop, "read_only_cast", lambda *args: ())
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
      loop = _loop(tmp_path / str(copies))
    finally:
      keras.config.set_dtype_policy("float32")
    loop.accumulation_steps = 2
    losses = [loop.train_steps(2)[1]["loss"], loop.train_steps(1)[1]["loss"]]
    state = [np.asarray(array) for array in _state(loop)]
    results[copies] = (np.concatenate(losses), state, loop._read_cast)
  (losses, state, read_cast), (plain_losses, plain_state, _) = results[True], results[False]
  np.testing.assert_array_equal(losses, plain_losses)
  for got, want in zip(state, plain_state):
    np.testing.assert_array_equal(got, want)
  paths = [loop.model.trainable_variables[i].path for i, _ in read_cast]
  assert "block_0/attention/query/kernel" in paths and "block_0/ffn/intermediate/kernel" in paths
  assert not [p for p in paths if "layer_norm" in p or "token_embedding" in p], paths


def test_read_only_cast_finds_the_weights_used_only_cast():
  """On small traced functions, against the rule written out: a weight read only through
  casts to one 16-bit dtype is found with that dtype; one also read as it is, cast to two
  dtypes, cast only to float32, stacked after its cast, or not float32 is not."""
  import jax.numpy as jnp

  from recurrent_bert.training.jax_loop import read_only_cast

  def loss(weights, x):
    bf16, twice, raw, two, f32, stacked, f16, already = weights
    total = (x.astype(jnp.bfloat16) * bf16.astype(jnp.bfloat16)).sum()
    total = total + (twice.astype(jnp.bfloat16) * 2).sum() + twice.astype(jnp.bfloat16).sum()
    total = total + raw.astype(jnp.bfloat16).sum() + raw.sum()
    total = total + two.astype(jnp.bfloat16).sum() + two.astype(jnp.float16).sum()
    total = total + f32.astype(jnp.float32).sum()
    total = total + jnp.stack([stacked.astype(jnp.bfloat16), x.astype(jnp.bfloat16)]).sum()
    total = total + f16.astype(jnp.float16).sum() + already.astype(jnp.bfloat16).sum()
    return total.astype(jnp.float32)

  weights = [jnp.ones(3, jnp.float32)] * 7 + [jnp.ones(3, jnp.bfloat16)]
  found = read_only_cast(loss, weights, jnp.ones(3))
  assert found == ((0, jnp.bfloat16), (1, jnp.bfloat16), (6, jnp.float16)), found
