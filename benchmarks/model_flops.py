"""The model FLOPs of one training step, counted from a ModelConfig (never measured).

Model FLOPs are counted from the config, never measured: 6 per multiply-add of the forward
pass (2 forward, 4 backward: the gradients of the inputs and of the weights). With B
sequences of T tokens, P masked positions, L blocks of width H, FFN size I, u BLSTM units
per direction, SwishRNN size d' and V word pieces, the multiply-adds of one sequence are

  T·L·(4H² + 2H·I + 8H·u + 8u² + 2u·H + 3H·d')  the blocks' matrices, each term only where
      the block has it: 4H² attention (Q, K, V, output), 2H·I the FFN (ffn, parallel_blstm),
      8H·u + 8u² the input and recurrent matrices of both LSTM directions (blstm,
      parallel_blstm; the recurrence's only matrix products), 2u·H the BLSTM's projection
      back to H (not in SMALL), 3H·d' SwishRNN's x1, x2 and output matrices
  + L·2T²·H                                 attention's scores Q·Kᵀ and context A·V
  + P·(H² + H·V)                            the MLM head: transform, then the tied output
  + H² + 2H                                 the NSP pooler and classifier (with NSP)

so FLOPs per step = 6·B·(that): 6·(matmul parameters)·tokens for the dense parts and
12·L·T²·H per sequence for attention. Left out, as MFU usually leaves them: embedding
lookups, LayerNorm, softmax, activations, dropout, the relative position bias and the
element-wise work of the recurrences (LSTM gates, SwishRNN's recurrence, which has no
matrix product).
"""

import math

from recurrent_bert.config import ModelConfig


def default_predictions(length: int) -> int:
  """BERT's masked positions per sequence: 15% of T rounded up (20 at T = 128), < T."""
  return max(1, min(math.ceil(0.15 * length), length - 1))


def forward_multiply_adds(config: ModelConfig, length: int, predictions: int, use_nsp: bool):
  """Multiply-adds of one sequence's forward pass (the module docstring's formula)."""
  h, c = config.hidden_size, config
  per_token = 0
  if c.use_attention:
    per_token += 4 * h * h
  if c.mixer in ("ffn", "parallel_blstm"):
    per_token += 2 * h * c.intermediate_size
  if c.uses_blstm:
    u = c.resolved_blstm_units
    per_token += 8 * h * u + 8 * u * u + (2 * u * h if c.blstm_projection else 0)
  if c.mixer == "swishrnn":
    per_token += 3 * h * c.resolved_swish_rnn_size
  attention = 2 * length * length * h if c.use_attention else 0
  heads = predictions * (h * h + h * c.vocab_size) + ((h * h + 2 * h) if use_nsp else 0)
  return c.num_layers * (length * per_token + attention) + heads


def model_flops(config: ModelConfig, batch: int, length: int, predictions: int, use_nsp=True):
  """FLOPs of one training step of `batch` sequences: 6 per forward multiply-add."""
  return 6 * batch * forward_multiply_adds(config, length, predictions, use_nsp)
