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
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
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
  half = num_buckets // 2  # 16 buckets per direction
  bucket = half if offset > 0 else 0
  n = abs(offset)
  exact = half // 2  # 8 exact offsets
  if n < exact:
    return bucket + n
  log_bucket = exact + math.floor(
      math.log(n / exact) / math.log(max_distance / exact) * (half - exact)
  )
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


def numpy_bert(
    w, ids, segments, mask, num_heads, approximate_gelu, eps=1e-12, masked_positions=None
):
  """BERT's forward pass from arrays under google-research/bert's TF1 names.

  Args:
    w: {TF1 variable name: array}, e.g. "bert/encoder/layer_0/attention/self/query/kernel"
      [H, H] (in, out layouts); the layer count is read from the names.
    ids, segments, mask: int [B, T].
    num_heads: A.
    approximate_gelu: the tanh GELU (TF1 BERT) instead of the exact erf form (HF).
    masked_positions: int [B, P]; with the `cls/predictions` weights, the MLM logits.
  Returns:
    dict: sequence_output [B, T, H], pooled_output [B, H], and, when the weights are
    present, mlm_logits [B, P, V] and nsp_logits [B, 2].
  """
  hidden = w["bert/embeddings/word_embeddings"].shape[1]
  size = hidden // num_heads
  num_layers = len({k.split("/")[2] for k in w if k.startswith("bert/encoder/layer_")})
  norm = lambda x, scope: layer_norm(x, w[f"{scope}/gamma"], w[f"{scope}/beta"], eps)
  act = lambda x: gelu(x, approximate=approximate_gelu)
  x = (
      w["bert/embeddings/word_embeddings"][ids]
      + w["bert/embeddings/token_type_embeddings"][segments]
      + w["bert/embeddings/position_embeddings"][: ids.shape[1]]
  )
  x = norm(x, "bert/embeddings/LayerNorm")
  for i in range(num_layers):
    p = f"bert/encoder/layer_{i}"
    heads = lambda n, p=p: (
        w[f"{p}/attention/self/{n}/kernel"].reshape(hidden, num_heads, size),
        w[f"{p}/attention/self/{n}/bias"].reshape(num_heads, size),
    )
    attended = self_attention(
        x,
        mask,
        *heads("query"),
        *heads("key"),
        *heads("value"),
        w[f"{p}/attention/output/dense/kernel"].reshape(num_heads, size, hidden),
        w[f"{p}/attention/output/dense/bias"],
    )
    x = norm(x + attended, f"{p}/attention/output/LayerNorm")
    inner = act(x @ w[f"{p}/intermediate/dense/kernel"] + w[f"{p}/intermediate/dense/bias"])
    x = norm(
        x + inner @ w[f"{p}/output/dense/kernel"] + w[f"{p}/output/dense/bias"],
        f"{p}/output/LayerNorm",
    )
  pooled = np.tanh(x[:, 0] @ w["bert/pooler/dense/kernel"] + w["bert/pooler/dense/bias"])
  out = {"sequence_output": x, "pooled_output": pooled}
  if masked_positions is not None and "cls/predictions/output_bias" in w:
    gathered = np.stack([x[b, masked_positions[b]] for b in range(len(ids))])
    h = act(
        gathered @ w["cls/predictions/transform/dense/kernel"]
        + w["cls/predictions/transform/dense/bias"]
    )
    h = norm(h, "cls/predictions/transform/LayerNorm")
    out["mlm_logits"] = (
        h @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
    )
  if "cls/seq_relationship/output_weights" in w:
    out["nsp_logits"] = (
        pooled @ w["cls/seq_relationship/output_weights"].T + w["cls/seq_relationship/output_bias"]
    )
  return out


def random_tf1_bert(
    rng, vocab_size, max_positions, hidden, intermediate, num_layers, with_heads=True
):
  """{TF1 name: float32 array} of a random BERT (+ cls/ MLM and NSP heads)."""
  V, P, H, F = vocab_size, max_positions, hidden, intermediate
  shapes = {
      "bert/embeddings/word_embeddings": (V, H),
      "bert/embeddings/token_type_embeddings": (2, H),
      "bert/embeddings/position_embeddings": (P, H),
      "bert/embeddings/LayerNorm/gamma": (H,),
      "bert/embeddings/LayerNorm/beta": (H,),
      "bert/pooler/dense/kernel": (H, H),
      "bert/pooler/dense/bias": (H,),
  }
  if with_heads:
    shapes.update(
        {
            "cls/predictions/transform/dense/kernel": (H, H),
            "cls/predictions/transform/dense/bias": (H,),
            "cls/predictions/transform/LayerNorm/gamma": (H,),
            "cls/predictions/transform/LayerNorm/beta": (H,),
            "cls/predictions/output_bias": (V,),
            "cls/seq_relationship/output_weights": (2, H),
            "cls/seq_relationship/output_bias": (2,),
        }
    )
  for i in range(num_layers):
    p = f"bert/encoder/layer_{i}"
    for name in ("query", "key", "value"):
      shapes[f"{p}/attention/self/{name}/kernel"] = (H, H)
      shapes[f"{p}/attention/self/{name}/bias"] = (H,)
    shapes.update(
        {
            f"{p}/attention/output/dense/kernel": (H, H),
            f"{p}/attention/output/dense/bias": (H,),
            f"{p}/attention/output/LayerNorm/gamma": (H,),
            f"{p}/attention/output/LayerNorm/beta": (H,),
            f"{p}/intermediate/dense/kernel": (H, F),
            f"{p}/intermediate/dense/bias": (F,),
            f"{p}/output/dense/kernel": (F, H),
            f"{p}/output/dense/bias": (H,),
            f"{p}/output/LayerNorm/gamma": (H,),
            f"{p}/output/LayerNorm/beta": (H,),
        }
    )
  return {k: rng.normal(scale=0.5, size=s).astype("float32") for k, s in shapes.items()}


def lamb(params, gradient_steps, learning_rate, beta_1, beta_2, epsilon, weight_decay, excluded):
  """LAMB, You et al. 2019 Algorithm 2 (φ = identity), in float64, one update per entry
  of `gradient_steps` ({name: gradient}). `excluded` names get neither weight decay nor
  the trust ratio. Returns the parameters after each update: [{name: array}]."""
  x = {name: np.array(value, np.float64) for name, value in params.items()}
  m = {name: np.zeros_like(value) for name, value in x.items()}
  v = {name: np.zeros_like(value) for name, value in x.items()}
  history = []
  for t, grads in enumerate(gradient_steps, start=1):
    for name in x:
      g = np.array(grads[name], np.float64)
      m[name] = beta_1 * m[name] + (1 - beta_1) * g
      v[name] = beta_2 * v[name] + (1 - beta_2) * g * g
      m_hat = m[name] / (1 - beta_1**t)
      v_hat = v[name] / (1 - beta_2**t)
      r = m_hat / (np.sqrt(v_hat) + epsilon)
      if name in excluded:
        x[name] = x[name] - learning_rate * r
        continue
      u = r + weight_decay * x[name]
      weight_norm = np.sqrt(np.sum(x[name] ** 2))
      update_norm = np.sqrt(np.sum(u**2))
      ratio = weight_norm / update_norm if weight_norm > 0 and update_norm > 0 else 1.0
      x[name] = x[name] - learning_rate * ratio * u
    history.append({name: value.copy() for name, value in x.items()})
  return history


def blstm_layer(arrays, lengths):
  """The TRANS-BLSTM layer: a forward LSTM over each real prefix, a backward one from its
  last real token, concatenated, then the optional projection.

  arrays: [x [B, T, D], then kernel, recurrent_kernel, bias of the forward and of the
  backward direction, then (optionally) the projection's kernel and bias].
  Returns [B, T, 2u] (or [B, T, P] projected), zero at padded positions before the
  projection.
  """
  x, directions, projection = arrays[0], arrays[1:7], arrays[7:]
  y = np.concatenate(
      [lstm_direction(x, *directions[3 * d : 3 * d + 3], lengths, reverse=bool(d)) for d in (0, 1)],
      -1,
  )
  if projection:
    y = y @ projection[0] + projection[1]
  return y


def swish_rnn_layer(w, x, inner_size, step_size, residual, gate, direction, mask=None):
  """SPEC §4's SwishRNN block: projections, the recurrence, the gated output projection.

  w: {"x1_kernel", "x2_kernel", "alpha", "beta", "state_bias", "gate_bias", "kernel",
  "bias"} (the last two: the output dense layer); x: [B, T, H]; mask: [B, T] or None.
  Backward channels run over each sequence's real part reversed. Returns [B, T, H].
  """
  d, k = inner_size, step_size
  x1, x2 = x.astype(np.float64) @ w["x1_kernel"], x.astype(np.float64) @ w["x2_kernel"]
  residual = x1 if residual == "x1" else x2
  if direction == "forward":
    c = swish_rnn_states(x1, residual, w["alpha"], w["beta"], k)
  else:
    lengths = mask.sum(1) if mask is not None else np.full(x.shape[0], x.shape[1])
    c = np.zeros_like(x1)
    channels = slice(0, d) if direction == "backward" else slice(d // 2, d)
    for b, n in enumerate(lengths):
      if direction == "bidirectional":
        c[b : b + 1, :n, : d // 2] = swish_rnn_states(
            x1[b : b + 1, :n, : d // 2],
            residual[b : b + 1, :n, : d // 2],
            w["alpha"][: d // 2],
            w["beta"][: d // 2],
            k,
        )
      rev = swish_rnn_states(
          x1[b : b + 1, :n][:, ::-1, channels],
          residual[b : b + 1, :n][:, ::-1, channels],
          w["alpha"][channels],
          w["beta"][channels],
          k,
      )
      c[b : b + 1, :n, channels] = rev[:, ::-1]
  gated = gelu(x2 + w["gate_bias"]) if gate == "gelu" else sigmoid(x2 + w["gate_bias"])
  return ((c + w["state_bias"]) * gated) @ w["kernel"] + w["bias"]


def finite_difference_gradients(function, arrays, upstream, eps=1e-6):
  """d sum(function(arrays) * upstream) / d each array, central differences in float64."""
  arrays = [np.asarray(a, np.float64) for a in arrays]
  grads = []
  for which, array in enumerate(arrays):
    grad = np.zeros_like(array)
    for idx in np.ndindex(array.shape):
      values = []
      for sign in (1, -1):
        moved = list(arrays)
        moved[which] = array.copy()
        moved[which][idx] += sign * eps
        values.append((function(moved) * upstream).sum())
      grad[idx] = (values[0] - values[1]) / (2 * eps)
    grads.append(grad)
  return grads
