"""Independent numpy references, written from SPEC equations, for the layer tests.

Loops are explicit on purpose: they should read like the equations, not like the code
under test.
"""

import math

import numpy as np


def sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def gelu(x, approximate=False):
  if approximate:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
  erf = np.vectorize(math.erf)
  return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def layer_norm(x, gamma, beta, eps=1e-12):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * gamma + beta


def swish_rnn_states(x1, residual, alpha, beta, k):
  """c[i] = Swish(c[i-k] - x1[i]) + residual[i], c[j] = 0 for j < 0. x1: [B, T, D]."""
  batch, length, depth = x1.shape
  c = np.zeros((batch, length, depth), np.float64)
  for b in range(batch):
    for i in range(length):
      previous = c[b, i - k] if i - k >= 0 else np.zeros(depth)
      z = previous - x1[b, i]
      c[b, i] = z * sigmoid(alpha * z + beta) + residual[b, i]
  return c


def t5_bucket(offset, num_buckets=32, max_distance=128):
  """SPEC §2, transcribed for one integer offset n = key - query."""
  half = num_buckets // 2          # 16 buckets per direction
  bucket = half if offset > 0 else 0
  n = abs(offset)
  exact = half // 2                # 8 exact offsets
  if n < exact:
    return bucket + n
  log_bucket = exact + math.floor(math.log(n / exact) / math.log(max_distance / exact)
                                  * (half - exact))
  return bucket + min(log_bucket, half - 1)


def lstm_direction(x, kernel, recurrent_kernel, bias, lengths, reverse):
  """One Keras-layout LSTM direction (gates i, f, c, o) over each sequence's real part.

  x: [B, T, D]; lengths: [B]. Outputs [B, T, u], zero at padded positions.
  """
  batch, length, _ = x.shape
  units = recurrent_kernel.shape[0]
  out = np.zeros((batch, length, units))
  for b in range(batch):
    h = np.zeros(units)
    c = np.zeros(units)
    steps = range(lengths[b] - 1, -1, -1) if reverse else range(lengths[b])
    for t in steps:
      z = x[b, t] @ kernel + h @ recurrent_kernel + bias
      i, f, g, o = np.split(z, 4)
      c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
      h = sigmoid(o) * np.tanh(c)
      out[b, t] = h
  return out


def self_attention(x, mask, wq, bq, wk, bk, wv, bv, wo, bo, bias=None):
  """x [B, T, H]; wq/wk/wv [H, A, d]; wo [A, d, H]; mask [B, T]; bias [1|B, A, T, T]."""
  batch, length, _ = x.shape
  heads, size = wq.shape[1], wq.shape[2]
  out = np.zeros((batch, length, wo.shape[-1]))
  for b in range(batch):
    context = np.zeros((length, heads, size))
    for a in range(heads):
      q = x[b] @ wq[:, a] + bq[a]
      k = x[b] @ wk[:, a] + bk[a]
      v = x[b] @ wv[:, a] + bv[a]
      logits = q @ k.T / math.sqrt(size)
      if bias is not None:
        logits = logits + bias[0 if bias.shape[0] == 1 else b, a]
      logits = np.where(mask[b][None, :] > 0, logits, -np.inf)
      p = np.exp(logits - logits.max(-1, keepdims=True))
      p = p / p.sum(-1, keepdims=True)
      context[:, a] = p @ v
    out[b] = np.einsum("tnh,nhd->td", context, wo) + bo
  return out
