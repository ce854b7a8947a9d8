"""The cuDNN BLSTM wrappers (`layers/kernels/{jax,torch}_cudnn_lstm.py`) against numpy.

Layout: Keras-layout weights packed by the wrapper's own packing function are read back
as the library documents its layout (jax/experimental/rnn.py's module docstring; the
names of `torch.nn.LSTM._flat_weights`), run through a numpy LSTM written in that layout
(torch.nn.LSTM's documented equations, two biases), and compared with
`references.lstm_direction` on the Keras-layout weights: gate order, transposes and the
bias split all show up there.

Wrappers: each runs as it would in the layer, on padded rows (one of length 0), and its
outputs (to 1e-5, float32) and gradients match the numpy reference; gradients are checked
along a random direction per argument against float64 central differences. On CPU, JAX
runs `jax.experimental.rnn.lstm_ref` (its cuDNN kernel has no CPU lowering) on the same
flat weight vector; PyTorch runs its own packed-sequence kernel. On a GPU the same tests
run the cuDNN kernels, with TF32 off.
"""

import keras
import numpy as np
import pytest

from recurrent_bert.layers.kernels import jax_cudnn_lstm
from recurrent_bert.layers.kernels import torch_cudnn_lstm
from tests.backends.support import BACKEND
from tests.support import references

BATCH, LENGTH, DEPTH, UNITS = 4, 6, 5, 3
LENGTHS = np.array([6, 4, 1, 0])  # full, padded, one token, empty

only_jax = pytest.mark.skipif(BACKEND != "jax", reason="runs in the JAX session")
only_torch = pytest.mark.skipif(BACKEND != "torch", reason="runs in the PyTorch session")


def _case(seed=0):
  """x [B, T, D] (padding filled with noise, which must not matter), loss weights
  [B, T, 2u], and (kernel [D, 4u], recurrent_kernel [u, 4u], bias [4u]) per direction."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(BATCH, LENGTH, DEPTH))
  shapes = [(DEPTH, 4 * UNITS), (UNITS, 4 * UNITS), (4 * UNITS,)]
  forward, backward = ([rng.normal(scale=0.5, size=s) for s in shapes] for _ in range(2))
  return x, rng.normal(size=(BATCH, LENGTH, 2 * UNITS)), forward, backward


def _reference(x, forward, backward):
  """[B, T, 2u] from `references.lstm_direction` (Keras layout), float64."""
  return np.concatenate(
      [
          references.lstm_direction(x, *forward, LENGTHS, reverse=False),
          references.lstm_direction(x, *backward, LENGTHS, reverse=True),
      ],
      -1,
  )


def _documented_direction(x, w_ih, w_hh, b_ih, b_hh, reverse):
  """One direction in cuDNN's / torch.nn.LSTM's layout and equations, all rows at once:

    i = sigmoid(W_ii x + b_ii + W_hi h + b_hi)   (W_ii, W_if, W_ig, W_io row blocks of
    f = sigmoid(W_if x + b_if + W_hf h + b_hf)    W_ih [4u, D]; likewise W_hh [4u, u],
    g = tanh(W_ig x + b_ig + W_hg h + b_hg)       b_ih, b_hh [4u])
    o = sigmoid(W_io x + b_io + W_ho h + b_ho)
    c = f c + i g,  h = o tanh(c)

  over each row's real positions (last to first when `reverse`). Returns [B, T, u],
  0 at padded positions.
  """
  sigmoid = lambda z: 1 / (1 + np.exp(-z))
  w_i, w_f, w_g, w_o = np.split(w_ih, 4)
  r_i, r_f, r_g, r_o = np.split(w_hh, 4)
  b_i, b_f, b_g, b_o = np.split(b_ih, 4)
  s_i, s_f, s_g, s_o = np.split(b_hh, 4)
  rows = np.arange(BATCH)
  h = np.zeros((BATCH, UNITS))
  c = np.zeros((BATCH, UNITS))
  out = np.zeros((BATCH, LENGTH, UNITS))
  for step in range(LENGTH):
    active = step < LENGTHS
    position = np.clip(LENGTHS - 1 - step if reverse else np.full(BATCH, step), 0, None)
    x_t = x[rows, position]
    i = sigmoid(x_t @ w_i.T + b_i + h @ r_i.T + s_i)
    f = sigmoid(x_t @ w_f.T + b_f + h @ r_f.T + s_f)
    g = np.tanh(x_t @ w_g.T + b_g + h @ r_g.T + s_g)
    o = sigmoid(x_t @ w_o.T + b_o + h @ r_o.T + s_o)
    c = np.where(active[:, None], f * c + i * g, c)
    h = np.where(active[:, None], o * np.tanh(c), h)
    out[rows[active], position[active]] = h[active]
  return out


def _check_layout(directions):
  """directions: ((W_ih, W_hh, b_ih, b_hh) forward, same backward), as unpacked from
  the library's layout; their numpy LSTM must equal the Keras-layout reference."""
  x, _, forward, backward = _case()
  (w_ih, w_hh, b_ih, b_hh), _ = directions
  assert w_ih.shape == (4 * UNITS, DEPTH) and w_hh.shape == (4 * UNITS, UNITS)
  assert b_ih.shape == b_hh.shape == (4 * UNITS,)
  # The split the wrappers document: Keras' one bias in b_ih, zeros in b_hh.
  for (_, _, b_ih, b_hh), keras_weights in zip(directions, (forward, backward)):
    np.testing.assert_array_equal(b_ih, keras_weights[2])
    np.testing.assert_array_equal(b_hh, 0)
  got = np.concatenate(
      [_documented_direction(x, *d, reverse=r) for d, r in zip(directions, (False, True))], -1
  )
  np.testing.assert_allclose(got, _reference(x, forward, backward), rtol=1e-12, atol=1e-12)


@only_jax
def test_jax_weight_layout():
  """`pack_weights`' vector read as jax/experimental/rnn.py documents cuDNN's layout:
  (W_ih^0, W_hh^0, W_ih^1, W_hh^1, b_ih^0, b_hh^0, b_ih^1, b_hh^1), row-major."""
  from jax.experimental import rnn  # pylint: disable=g-import-not-at-top

  _, _, forward, backward = _case()
  flat = jax_cudnn_lstm.pack_weights(forward, backward)
  assert flat.shape == (rnn.get_num_params_in_lstm(DEPTH, UNITS, 1, True),)
  shapes = [(4 * UNITS, DEPTH), (4 * UNITS, UNITS)] * 2 + [(4 * UNITS,)] * 4
  pieces, offset = [], 0
  for shape in shapes:
    size = int(np.prod(shape))
    pieces.append(flat[offset : offset + size].reshape(shape))
    offset += size
  matrices, biases = pieces[:4], pieces[4:]
  _check_layout([(*matrices[2 * d : 2 * d + 2], *biases[2 * d : 2 * d + 2]) for d in (0, 1)])


@only_torch
def test_torch_weight_layout():
  """`flat_weights`' list read by `torch.nn.LSTM`'s own names for its flat weights."""
  import torch  # pylint: disable=g-import-not-at-top

  _, _, forward, backward = _case()
  names = torch.nn.LSTM(DEPTH, UNITS, bidirectional=True)._flat_weights_names  # pylint: disable=protected-access
  weights = dict(zip(names, torch_cudnn_lstm.flat_weights(forward, backward), strict=True))
  _check_layout(
      [
          tuple(
              weights[f"{kind}_l0{suffix}"]
              for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
          )
          for suffix in ("", "_reverse")
      ]
  )


def _check_wrapper(outputs, gradients, half_dtype):
  """The wrapper's float32 outputs [B, T, 2u] and gradients of sum(outputs * R) with
  respect to (x, forward..., backward...) against the float64 numpy reference; and the
  dtype of its outputs for a bfloat16 x."""
  x, loss_weights, forward, backward = _case()
  np.testing.assert_allclose(outputs, _reference(x, forward, backward), rtol=1e-5, atol=1e-5)
  # Nothing flows to (or from) padded inputs, exactly.
  padded = np.arange(LENGTH)[None, :] >= LENGTHS[:, None]
  assert np.all(gradients[0][padded] == 0)
  arguments = [x, *forward, *backward]
  loss = lambda args: np.sum(_reference(args[0], args[1:4], args[4:]) * loss_weights)
  rng = np.random.default_rng(1)
  eps = 1e-5
  for k, gradient in enumerate(gradients):
    direction = rng.normal(size=arguments[k].shape)
    step = lambda sign, k=k, direction=direction: loss(
        [a + sign * eps * direction if j == k else a for j, a in enumerate(arguments)]
    )
    numeric = (step(1) - step(-1)) / (2 * eps)
    np.testing.assert_allclose(np.sum(gradient * direction), numeric, rtol=1e-4, atol=1e-5)
  assert half_dtype == "bfloat16"


@only_jax
@pytest.mark.parametrize("reference", [True, False], ids=["lstm_ref", "cudnn"])
def test_jax_wrapper(reference):
  """The JAX wrapper under jit; `reference=False` (cuDNN) only where `available()`."""
  if not reference and not jax_cudnn_lstm.available():
    pytest.skip("jax.experimental.rnn.lstm has only a CUDA lowering")
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  x, loss_weights, forward, backward = _case()
  as32 = lambda a: jnp.asarray(a, jnp.float32)
  run = lambda x, forward, backward: jax_cudnn_lstm.bidirectional_lstm(
      x, jnp.asarray(LENGTHS), forward, backward, reference=reference
  )

  @jax.jit  # one compilation for the outputs and the gradients
  def outputs_and_gradients(*arguments):
    def loss(*arguments):
      outputs = run(*arguments)
      return jnp.sum(outputs * as32(loss_weights)), outputs

    grad = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)
    gradients, outputs = grad(*arguments)
    return outputs, jax.tree_util.tree_leaves(gradients)

  arguments = (as32(x), [as32(w) for w in forward], [as32(w) for w in backward])
  with jax.default_matmul_precision("float32"):  # no TF32 in cuDNN either
    outputs, gradients = outputs_and_gradients(*arguments)
  half = jax.eval_shape(run, arguments[0].astype(jnp.bfloat16), *arguments[1:])
  _check_wrapper(np.asarray(outputs), [np.asarray(g) for g in gradients], half.dtype.name)


@only_torch
def test_torch_wrapper():
  """The PyTorch wrapper with Keras variables as weights, on Keras' device (cuDNN on a
  GPU): gradients land on the variables' tensors."""
  import torch  # pylint: disable=g-import-not-at-top

  x, loss_weights, forward, backward = _case()
  variables = [[keras.Variable(w, dtype="float32") for w in d] for d in (forward, backward)]
  inputs = keras.ops.convert_to_tensor(x, "float32").requires_grad_()
  lengths = keras.ops.convert_to_tensor(LENGTHS, "int32")
  tf32 = torch.backends.cudnn.allow_tf32
  torch.backends.cudnn.allow_tf32 = False
  try:
    outputs = torch_cudnn_lstm.bidirectional_lstm(inputs, lengths, *variables)
    torch.sum(outputs * keras.ops.convert_to_tensor(loss_weights, "float32")).backward()
    with torch.no_grad():
      half = torch_cudnn_lstm.bidirectional_lstm(inputs.bfloat16(), lengths, *variables)
  finally:
    torch.backends.cudnn.allow_tf32 = tf32
  numpy = lambda t: t.detach().cpu().numpy()
  gradients = [inputs.grad] + [v.value.grad for d in variables for v in d]
  _check_wrapper(
      numpy(outputs), [numpy(g) for g in gradients], str(half.dtype).removeprefix("torch.")
  )
