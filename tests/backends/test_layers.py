"""The recurrent layers and the BERT encoder under JAX and PyTorch, against the numpy
references of tests/support/references.py: outputs and (hand-written or autodiff) gradients to
1e-5 in float32, with padding in the batch. TensorFlow's kernels are tested the same way
in tests/layers/; tests/backends/test_backends_agree.py compares the backends directly."""

import keras
import numpy as np
import pytest

from recurrent_bert.config import ModelConfig
from recurrent_bert.convert import hf_names
from recurrent_bert.convert import mapping
from recurrent_bert.layers import BidirectionalLSTM
from recurrent_bert.layers import SwishRNN
from recurrent_bert.layers import kernels
from recurrent_bert.layers import swish_rnn_recurrence
from recurrent_bert.layers.kernels import pallas_support
from recurrent_bert.models import Pretrainer
from recurrent_bert.models import build_encoder
from tests.backends.support import BACKEND
from tests.backends.support import outputs_and_gradients
from tests.backends.support import run_python
from tests.backends.support import to_numpy
from tests.support import references as ref

TOLERANCE = dict(atol=1e-5, rtol=1e-5)


def _randomise(layer, rng, scale=0.5):
  for v in layer.weights:  # non-trivial alpha, beta and biases
    v.assign(rng.normal(scale=scale, size=v.shape).astype("float32"))


def test_auto_is_the_portable_recurrence_on_a_cpu():
  assert not kernels.cudnn_lstm().available()
  assert kernels.resolve(kernels.SWISH_RNN_FIELD, "auto") == "portable"
  assert kernels.resolve(kernels.BLSTM_FIELD, "auto") == "portable"


@pytest.mark.parametrize(
    "field,name", [("swish_rnn_implementation", "fused"), ("blstm_implementation", "block")]
)
def test_an_implementation_of_another_backend_is_refused_in_one_line(field, name):
  config = ModelConfig(
      vocab_size=10,
      hidden_size=8,
      num_layers=1,
      num_heads=2,
      intermediate_size=16,
      mixer="swishrnn" if field.startswith("swish") else "blstm",
      **{field: name},
  )
  with pytest.raises(ValueError) as error:
    build_encoder(config)
  message = str(error.value)
  assert "\n" not in message and f"{field}='{name}'" in message
  assert "portable" in message and keras.backend.backend() in message


@pytest.mark.skipif(BACKEND != "jax", reason="PyTorch's cuDNN LSTM path runs on a CPU too")
def test_jax_cudnn_blstm_on_a_cpu_is_refused_in_one_line():
  with pytest.raises(ValueError) as error:
    BidirectionalLSTM(4, implementation="cudnn")
  message = str(error.value)
  assert "\n" not in message
  assert "blstm_implementation='cudnn'" in message and "'cpu'" in message


@pytest.mark.parametrize("k,length", [(1, 7), (2, 8), (3, 7), (4, 1)])
@pytest.mark.parametrize("shared", [True, False])
def test_swish_rnn_recurrence_and_its_gradient(rng, k, length, shared):
  """The portable recurrence and its hand-written reverse gradient vs the numpy loop and
  central differences of it."""
  x1, residual = rng.normal(size=(2, length, 3)), rng.normal(size=(2, length, 3))
  alpha, beta = rng.uniform(0.5, 1.5, size=3), rng.normal(size=3)
  residual = x1 if shared else residual
  upstream = rng.normal(size=x1.shape)

  def numpy_states(arrays):
    x1, *rest = arrays
    return ref.swish_rnn_states(x1, x1 if shared else rest[0], *rest[-2:], k)

  arrays = [x1, alpha, beta] if shared else [x1, residual, alpha, beta]
  layer = _RecurrenceLayer(k, shared, arrays[1:])
  got, grads = outputs_and_gradients(layer, arrays[0].astype("float32"), upstream)
  np.testing.assert_allclose(got, numpy_states(arrays), **TOLERANCE)
  want = ref.finite_difference_gradients(numpy_states, arrays, upstream)
  for g, w in zip(grads, want):
    np.testing.assert_allclose(g, w, atol=2e-5, rtol=1e-4)


class _RecurrenceLayer(keras.layers.Layer):
  """swish_rnn_recurrence(x1, [residual], alpha, beta) with the last three as weights,
  so `outputs_and_gradients` differentiates all of them."""

  def __init__(self, k, shared, values):
    super().__init__()
    self.k, self.shared = k, shared
    self.values = [
        self.add_weight(shape=v.shape, initializer=keras.initializers.Constant(v.astype("float32")))
        for v in values
    ]
    self.built = True

  def call(self, x1):
    residual = None if self.shared else self.values[0]
    alpha, beta = self.values[-2:]
    return swish_rnn_recurrence(x1, residual, alpha, beta, step_size=self.k)


@pytest.mark.parametrize(
    "k,residual,gate,direction",
    [
        (1, "x1", "gelu", "forward"),
        (2, "x2", "sigmoid", "forward"),
        (4, "x1", "gelu", "forward"),
        (4, "x2", "gelu", "backward"),
        (2, "x1", "sigmoid", "bidirectional"),
    ],
)
def test_swish_rnn_layer_outputs_and_gradients(rng, k, residual, gate, direction):
  layer = SwishRNN(8, 6, step_size=k, residual=residual, gate=gate, direction=direction)
  x = rng.normal(size=(2, 7, 8)).astype("float32")
  mask = np.array([[1] * 7, [1] * 4 + [0] * 3], "int32")
  layer.build(x.shape)
  _randomise(layer, rng)
  names = [v.path.split("/")[-1] for v in layer.trainable_weights]
  real = mask.astype(bool)[:, :, None]
  upstream = rng.normal(size=x.shape) * real  # a loss that reads real positions only

  def numpy_layer(arrays):
    return ref.swish_rnn_layer(
        dict(zip(names, arrays[1:])), arrays[0], 6, k, residual, gate, direction, mask
    )

  arrays = [x] + [to_numpy(v).astype(np.float64) for v in layer.trainable_weights]
  got, grads = outputs_and_gradients(layer, x, upstream, mask)
  np.testing.assert_allclose(got * real, numpy_layer(arrays) * real, **TOLERANCE)
  want = ref.finite_difference_gradients(numpy_layer, arrays, upstream)
  for name, g, w in zip(["x", *names], grads, want):
    np.testing.assert_allclose(g, w, atol=2e-5, rtol=1e-4, err_msg=name)


_BLSTM_NUMERIC = {}  # central differences per layer size, shared by the implementations


def _interpret_pallas_off_a_gpu(monkeypatch):
  """Pallas' kernels run in its interpreter on a CPU; on a GPU they are compiled."""
  if kernels.jax_platform() != "gpu":
    monkeypatch.setenv(pallas_support.INTERPRET_ENV, "1")


@pytest.mark.parametrize("units,projection", [(4, None), (8, 8)])  # SMALL, full (H = 8)
# PyTorch's packed-sequence LSTM ("cudnn") runs on a CPU too; JAX's cuDNN call does not.
# Pallas' BLSTM kernels (JAX) run in Pallas' interpreter off a GPU.
@pytest.mark.parametrize(
    "implementation",
    ["auto", "keras"] + ["cudnn"] * (BACKEND == "torch") + ["pallas"] * (BACKEND == "jax"),
)
def test_blstm_layer_outputs_and_gradients(units, projection, implementation, monkeypatch):
  """Padded rows of three lengths; the loss reads real positions only."""
  if implementation == "pallas":
    _interpret_pallas_off_a_gpu(monkeypatch)
  rng = np.random.default_rng(0)  # the same layer and data for both implementations
  layer = BidirectionalLSTM(units, projection, implementation=implementation)
  x = rng.normal(size=(3, 5, 8)).astype("float32")
  mask = np.array([[1] * 5, [1] * 3 + [0] * 2, [1] + [0] * 4], "int32")
  layer.build(x.shape)
  _randomise(layer, rng, scale=0.4)
  lengths = mask.sum(1)
  real = mask.astype(bool)
  upstream = rng.normal(size=x.shape[:2] + (projection or 2 * units,)) * real[:, :, None]
  cells = (layer.bilstm.forward_layer.cell, layer.bilstm.backward_layer.cell)
  ordered = [w for c in cells for w in (c.kernel, c.recurrent_kernel, c.bias)]
  if projection:
    ordered += [layer.projection.kernel, layer.projection.bias]
  arrays = [x] + [to_numpy(w).astype(np.float64) for w in ordered]
  got, grads = outputs_and_gradients(layer, x, upstream, mask)
  want = ref.blstm_layer(arrays, lengths)
  np.testing.assert_allclose(got[real], want[real], **TOLERANCE)
  if projection is None and implementation in ("auto", "pallas"):
    np.testing.assert_array_equal(got[~real], 0)
  key = (units, projection)  # the same layer and data for both implementations
  if key not in _BLSTM_NUMERIC:
    _BLSTM_NUMERIC[key] = ref.finite_difference_gradients(
        lambda a: ref.blstm_layer(a, lengths), arrays, upstream
    )
  numeric = _BLSTM_NUMERIC[key]
  by_variable = {id(v): g for v, g in zip(layer.trainable_weights, grads[1:])}
  np.testing.assert_allclose(grads[0], numeric[0], **TOLERANCE, err_msg="x")
  for w, g in zip(ordered, numeric[1:]):
    np.testing.assert_allclose(by_variable[id(w)], g, **TOLERANCE, err_msg=w.path)


@pytest.mark.parametrize(
    "implementation,unroll",
    [("portable", 1), ("portable", 8)] + [("pallas", None)] * (BACKEND == "jax"),
)
def test_blstm_in_bfloat16_stays_near_the_float64_loop(rng, implementation, unroll, monkeypatch):
  """bfloat16 inputs and weights over 64 steps: the cell state and gates are float32
  inside, so the outputs and R's hand-written gradient stay within bfloat16's rounding of
  the float64 loop run on the same (rounded) values; with 8 steps per loop iteration too,
  and on Pallas' kernels (JAX; in its interpreter off a GPU)."""
  from recurrent_bert.layers.kernels import pallas_blstm
  from recurrent_bert.layers.kernels import portable_blstm

  if implementation == "pallas":
    _interpret_pallas_off_a_gpu(monkeypatch)
  module = {"portable": portable_blstm, "pallas": pallas_blstm}[implementation]
  extra = {} if unroll is None else dict(unroll=unroll)

  batch, length, depth, units = 2, 64, 8, 8
  lengths = np.array([length, 40])
  arrays = [rng.normal(size=(batch, length, depth))]
  for _ in range(2):  # forward, backward: kernel, recurrent kernel, bias
    arrays += [rng.normal(scale=0.4, size=(depth, 4 * units))]
    arrays += [
        rng.normal(scale=0.4, size=(units, 4 * units)),
        rng.normal(scale=0.4, size=4 * units),
    ]
  rounded = [to_numpy(keras.ops.cast(a, "bfloat16")).astype(np.float64) for a in arrays]
  real = np.arange(length)[None, :] < lengths[:, None]
  upstream = rng.normal(size=(batch, length, 2 * units)) * real[:, :, None]

  def run(*arrays):
    x, *weights = (keras.ops.cast(a, "bfloat16") for a in arrays)
    return module.bidirectional_lstm(x, lengths, tuple(weights[:3]), tuple(weights[3:]), **extra)

  want = ref.blstm_layer(rounded, lengths)
  if BACKEND == "jax":
    import jax

    loss = lambda *a: (run(*a).astype("float32") * upstream).sum()
    got, grads = run(*rounded), jax.grad(loss, argnums=(2,))(*rounded)
  else:
    import torch

    tensors = [torch.tensor(a, requires_grad=True) for a in rounded]
    got = run(*tensors)
    (got.float() * torch.tensor(upstream)).sum().backward()
    grads = [tensors[2].grad]
  assert str(got.dtype).endswith("bfloat16")
  # A bfloat16 cell state measured 7.7e-3 here (float32: 2.9e-3 under JAX).
  np.testing.assert_allclose(to_numpy(keras.ops.cast(got, "float32")), want, atol=6e-3)
  numeric = ref.finite_difference_gradients(  # the forward direction's R
      lambda a: ref.blstm_layer(rounded[:2] + a + rounded[3:], lengths),
      [rounded[2]],
      upstream,
      eps=1e-4,
  )
  error = np.linalg.norm(to_numpy(keras.ops.cast(grads[0], "float32")) - numeric[0])
  assert error < 0.03 * np.linalg.norm(numeric[0])


def test_bert_pretrainer_equals_numpy_bert(rng):
  """BERT-orig with google-research/bert's names, loaded through the import tables:
  encoder outputs and both heads' logits against the numpy forward pass."""
  vocab, positions, hidden, inner, layers, heads = 23, 16, 8, 16, 2, 2
  values = ref.random_tf1_bert(rng, vocab, positions, hidden, inner, layers)
  config = ModelConfig(
      vocab_size=vocab,
      hidden_size=hidden,
      num_layers=layers,
      num_heads=heads,
      intermediate_size=inner,
      max_position_embeddings=positions,
      hidden_act="gelu_approximate",
      dropout_rate=0.0,
      attention_dropout_rate=0.0,
  )
  model = Pretrainer(build_encoder(config))
  mapping.assign_pairs(mapping.tf1_bert_pairs(model, hf_names.DictReader(values)))
  ids = rng.integers(0, vocab, size=(2, 7)).astype("int32")
  segments = np.array([[0] * 4 + [1] * 3, [0] * 7], "int32")
  mask = np.array([[1] * 7, [1] * 4 + [0] * 3], "int32")
  masked = np.array([[1, 5], [2, 3]], "int32")
  want = ref.numpy_bert(values, ids, segments, mask, heads, True, masked_positions=masked)
  inputs = {"input_ids": ids, "segment_ids": segments, "input_mask": mask}
  encoded = model.encoder(inputs, training=False)
  real = mask.astype(bool)
  got = to_numpy(encoded["sequence_output"])
  np.testing.assert_allclose(got[real], want["sequence_output"][real], atol=1e-4, rtol=1e-4)
  out = model({**inputs, "masked_lm_positions": masked}, training=False)
  for name in ("mlm_logits", "nsp_logits"):
    np.testing.assert_allclose(to_numpy(out[name]), want[name], atol=1e-4, rtol=1e-4)


def test_models_run_where_tensorflow_cannot_be_imported():
  """The GPU machines have JAX and PyTorch but no TensorFlow: importing layers and models
  loads none, and a model of each kind of block (relative attention, parallel BLSTM,
  SwishRNN) builds and runs with TensorFlow's import blocked."""
  result = run_python(
      """
      import sys
      import recurrent_bert.layers, recurrent_bert.models
      assert "tensorflow" not in sys.modules, "importing layers/models loaded TensorFlow"
      sys.modules["tensorflow"] = None  # from here on, `import tensorflow` fails
      import numpy as np
      from keras import ops
      from recurrent_bert.config import resolve_config
      from recurrent_bert.models import Pretrainer, build_encoder
      ids = np.ones((2, 6), "int32")
      mask = np.array([[1] * 6, [1] * 3 + [0] * 3], "int32")
      families = ("bert_rab", "trans_blstm_2", "swishrnn")
      for family in families:
        model = Pretrainer(build_encoder(resolve_config(family + "_tiny")))
        out = model({"input_ids": ids, "input_mask": mask, "segment_ids": 0 * ids,
                     "masked_lm_positions": np.array([[1], [2]], "int32")})
        assert np.isfinite(ops.convert_to_numpy(out["mlm_logits"])).all(), family
      print("ran", len(families))
      """,
      BACKEND,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert "ran 3" in result.stdout


@pytest.mark.skipif(BACKEND != "jax", reason="reads JAX's lowered program")
def test_relative_bias_gradient_has_no_scatter_in_its_compiled_program(rng):
  import jax
  import jax.numpy as jnp

  from recurrent_bert.layers import RelativePositionBias

  layer = RelativePositionBias(num_heads=2, dtype="mixed_bfloat16")
  x = np.zeros((1, 16, 4), "float32")
  layer.build(x.shape)
  upstream = jnp.asarray(rng.normal(size=(1, 2, 16, 16)), "float32")

  def loss(table, gather):
    if gather:  # the form it replaced: a gather, whose gradient is a scatter-add
      buckets = np.array([[ref.t5_bucket(k - q) for k in range(16)] for q in range(16)])
      bias = jnp.take(table, buckets, axis=0).transpose(2, 0, 1)[None].astype("bfloat16")
    else:
      bias, _ = layer.stateless_call([table], [], x)
    return jnp.sum(bias.astype("float32") * upstream)

  table = jnp.asarray(rng.normal(size=(32, 2)), "float32")
  programs = {
      gather: jax.jit(jax.grad(loss), static_argnums=1).lower(table, gather).as_text()
      for gather in (False, True)
  }
  assert "scatter" in programs[True] and "scatter" not in programs[False]
  # The same gradient: both sum the bfloat16 upstream values into a float32 table.
  np.testing.assert_allclose(
      jax.grad(loss)(table, False), jax.grad(loss)(table, True), rtol=1e-5, atol=1e-5
  )


@pytest.mark.skipif(BACKEND != "jax", reason="reads JAX's lowered program")
def test_blstm_gradient_reverses_rows_by_gather_not_scatter(rng):
  """The backward direction's row reversal within the real prefix, whose gradient
  autodiff takes as a scatter-add: reversed_within_lengths gathers it instead (the
  permutation is its own inverse), with the gradient autodiff gives through take."""
  import jax
  import jax.numpy as jnp

  from recurrent_bert.layers.kernels import portable_blstm

  x = jnp.asarray(rng.normal(size=(3, 6, 4)), "float32")
  upstream = jnp.asarray(rng.normal(size=(3, 6, 4)), "float32")
  lengths = jnp.asarray([6, 4, 1])

  def loss(x, lengths, ours):
    reverse = portable_blstm.reversed_positions(lengths, 6)[:, :, None]
    if ours:
      y = portable_blstm.reversed_within_lengths(x, reverse)
    else:
      y = jnp.take_along_axis(x, reverse, axis=1)
    return jnp.sum(y * upstream)

  grad = jax.jit(jax.grad(loss), static_argnums=2)
  assert "scatter" in grad.lower(x, lengths, False).as_text()
  assert "scatter" not in grad.lower(x, lengths, True).as_text()
  np.testing.assert_array_equal(grad(x, lengths, True), grad(x, lengths, False))


@pytest.mark.skipif(BACKEND != "jax", reason="reads JAX's lowered program")
def test_bert_rab_training_gradient_has_no_scatter_that_bert_has_not():
  """The whole model's gradient under mixed_bfloat16: the embeddings' and the MLM head's
  gathers are scatters in both models; BERT-rab's relative bias adds none."""
  import jax

  from recurrent_bert.config import get_preset

  batch, length = 2, 16
  features = {
      "input_ids": np.ones((batch, length), "int32"),
      "input_mask": np.ones((batch, length), "int32"),
      "segment_ids": np.zeros((batch, length), "int32"),
      "masked_lm_positions": np.ones((batch, 2), "int32"),
  }
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy("mixed_bfloat16")
  try:
    programs = {}
    for family in ("bert", "bert_rab"):
      config = get_preset(f"{family}_tiny").replace(num_layers=1, vocab_size=64)
      model = Pretrainer(build_encoder(config), use_nsp=True)
      model(features)
      others = [v.value for v in model.non_trainable_variables]

      def loss(values, model=model, others=others):
        outputs, _ = model.stateless_call(values, others, features, training=True)
        return sum(jax.numpy.sum(t.astype("float32")) for t in outputs.values())

      values = [v.value for v in model.trainable_variables]
      programs[family] = jax.jit(jax.grad(loss)).lower(values).as_text()
  finally:
    keras.config.set_dtype_policy(previous)
  assert programs["bert"].count("scatter") > 0  # the check can see a scatter
  assert programs["bert_rab"].count("scatter") == programs["bert"].count("scatter")
