"""The SwishRNN recurrence in `keras.ops` ("portable"), for JAX and PyTorch.

The forward pass is `ops.scan` over blocks of k positions (lax.scan on JAX, a loop on
PyTorch, tf.while_loop on TensorFlow). Its gradient is written by hand, as the TensorFlow
"fused" kernel's is: autodiff through the scan would keep every step's intermediates,
while the reverse recurrence is *linear* in g, the total gradient on c,

  g[i] = dc[i] + a[i + k] g[i + k],   a = Swish'(z) = s + alpha z s (1 - s),
  dx1 = -g a,   dresidual = g,   dalpha = sum g z^2 s (1 - s),   dbeta = sum g z s (1 - s),

with z[i] = c[i - k] - x1[i] and s = sigmoid(alpha z + beta) recomputed from the saved c
in one vectorised pass. So only c is saved, and the reverse scan does two ops a step.
"""

from keras import ops


def _shift_later(t, d):
  """[B, T, D] -> out[:, i] = t[:, i - d], zeros for i < d."""
  length = ops.shape(t)[1]
  return ops.pad(t, [[0, 0], [d, 0], [0, 0]])[:, :length]


def _shift_earlier(t, d):
  """[B, T, D] -> out[:, i] = t[:, i + d], zeros for i + d >= T."""
  return ops.pad(t, [[0, 0], [0, d], [0, 0]])[:, d:]


def _num_blocks(t, k):
  """N = ceil(T / k), a Python int where T is static (XLA needs a fixed trip count)."""
  length = t.shape[1]
  return None if length is None else (length + k - 1) // k


def _to_blocks(t, k):
  """[B, T, D] -> [N, B, k, D], N = ceil(T / k), zero-padded at the end."""
  batch, length, depth = ops.shape(t)
  num_blocks = (length + k - 1) // k
  t = ops.pad(t, [[0, 0], [0, num_blocks * k - length], [0, 0]])
  return ops.transpose(ops.reshape(t, (batch, num_blocks, k, depth)), (1, 0, 2, 3))


def _from_blocks(t, length):
  """[N, B, k, D] -> [B, T, D] (drops the end padding)."""
  num_blocks, batch, k, depth = ops.shape(t)
  return ops.reshape(ops.transpose(t, (1, 0, 2, 3)), (batch, num_blocks * k, depth))[:, :length]


def _states(x1, residual, alpha, beta, k):
  """c[i] = Swish(c[i - k] - x1[i]) + residual[i]: [B, T, D]."""

  def step(c_previous, blocks):  # [B, k, D] each
    x1_block, residual_block = blocks
    z = c_previous - x1_block
    c = z * ops.sigmoid(alpha * z + beta) + residual_block
    return c, c

  batch, length, depth = ops.shape(x1)
  initial = ops.zeros((batch, k, depth), x1.dtype)
  _, c = ops.scan(
      step, initial, (_to_blocks(x1, k), _to_blocks(residual, k)), length=_num_blocks(x1, k)
  )
  return _from_blocks(c, length)


def _gradients(dc, c, x1, alpha, beta, k):
  """(dx1, dresidual, dalpha, dbeta) from the gradient dc [B, T, D] on c."""
  z = _shift_later(c, k) - x1
  s = ops.sigmoid(alpha * z + beta)
  q = z * s * (1 - s)  # dSwish/dbeta; dSwish/dalpha = z q
  a = s + alpha * q  # dSwish/dz

  def step(g_next, blocks):  # [B, k, D] each
    a_next, dc_block = blocks
    g = dc_block + a_next * g_next
    return g, g

  batch, length, depth = ops.shape(x1)
  initial = ops.zeros((batch, k, depth), dc.dtype)
  blocks = (_to_blocks(_shift_earlier(a, k), k), _to_blocks(dc, k))
  _, g = ops.scan(step, initial, blocks, length=_num_blocks(x1, k), reverse=True)
  g = _from_blocks(g, length)
  return -g * a, g, ops.sum(g * z * q, axis=(0, 1)), ops.sum(g * q, axis=(0, 1))


def recurrence(x1, residual, alpha, beta, step_size):
  """c[i] = Swish(c[i - k] - x1[i]) + residual[i], c[< 0] = 0, with the reverse gradient.

  Args:
    x1: [B, T, D] float.
    residual: [B, T, D], or None for x1 itself (one input and one gradient for both uses).
    alpha, beta: [D].
    step_size: k >= 1.
  Returns:
    c: [B, T, D].
  """
  shared = residual is None

  @ops.custom_gradient
  def run(*args):
    x1, residual, alpha, beta = (args[0],) + args if shared else args
    c = _states(x1, residual, alpha, beta, step_size)

    def grad(*grad_args, upstream=None):
      # TensorFlow and JAX pass the output's gradient; PyTorch passes the inputs and
      # `upstream` (keras.ops.custom_gradient's contract).
      dc = grad_args[0] if upstream is None else upstream
      dx1, dresidual, dalpha, dbeta = _gradients(dc, c, x1, alpha, beta, step_size)
      if shared:
        return dx1 + dresidual, dalpha, dbeta
      return dx1, dresidual, dalpha, dbeta

    return c, grad

  # Tensors, not Keras variables: PyTorch's autograd.Function saves only tensors.
  inputs = (x1, alpha, beta) if shared else (x1, residual, alpha, beta)
  return run(*(ops.convert_to_tensor(t) for t in inputs))
