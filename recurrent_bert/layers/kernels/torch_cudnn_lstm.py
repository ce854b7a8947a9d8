"""The bidirectional LSTM of TRANS-BLSTM through cuDNN under PyTorch (packed sequences).

Keras' own LSTM never reaches cuDNN under PyTorch when a mask is passed, so
`BidirectionalLSTM` packs each row's real prefix (`pack_padded_sequence`) and runs the
LSTM op that `torch.nn.LSTM` runs (`torch._VF.lstm`, cuDNN on CUDA, PyTorch's own kernel
elsewhere) on weights taken from the Keras variables: their values are torch tensors with
autograd, so gradients reach the variables with no module or copy in between. On a packed
batch the backward direction starts at each row's last real token, as the other
implementations do.

The op takes the weights as `torch.nn.LSTM._flat_weights` (per direction, forward first):

  weight_ih [4u, D], weight_hh [4u, u], bias_ih [4u], bias_hh [4u]

gates ordered (i, f, g, o) along the 4u axis as in Keras, so a Keras kernel [D, 4u] is
weight_ih transposed. cuDNN adds two biases; Keras has one, which goes in bias_ih, with
zeros in bias_hh (their gradients differ only in where they land).

torch is imported inside the functions, so importing this module imports no framework.
"""

import keras
import numpy as np


def available() -> bool:
  """Whether PyTorch sees a CUDA GPU with cuDNN, where the packed LSTM runs cuDNN."""
  import torch  # pylint: disable=g-import-not-at-top

  return torch.cuda.is_available() and torch.backends.cudnn.is_available()


def flat_weights(forward, backward, xp=np):
  """Keras-layout weights of both directions as `torch.nn.LSTM._flat_weights`.

  Written in array methods shared by numpy and torch, so the wrapper runs this same
  function on the variables' tensors (xp=torch) and the tests on numpy arrays.

  Args:
    forward, backward: (kernel [D, 4u], recurrent_kernel [u, 4u], bias [4u]) of each
      direction, in Keras' layout (gates i, f, g, o).
    xp: the array namespace (`zeros_like`).
  Returns:
    [weight_ih_l0 [4u, D], weight_hh_l0 [4u, u], bias_ih_l0 [4u], bias_hh_l0 [4u], and
    the same four `*_l0_reverse`], the order of `torch.nn.LSTM._flat_weights_names`.
  """
  weights = []
  for kernel, recurrent_kernel, bias in (forward, backward):
    weights += [kernel.T, recurrent_kernel.T, bias, xp.zeros_like(bias)]
  return weights


def bidirectional_lstm(x, lengths, forward, backward):
  """Both LSTM directions over right-padded rows, concatenated, through packed sequences.

  Packing needs the lengths on the host: on CUDA that is one device-to-host copy (and
  wait) per call. bfloat16 inputs compute in float32: PyTorch releases send only float16,
  float32 and float64 RNNs to cuDNN (`cudnn_is_acceptable`) and run others step by step;
  the result comes back in x's dtype. cuDNN may use TF32 for the matmuls
  (`torch.backends.cudnn.allow_tf32`). Rows of length 0 (which packing rejects) run as
  length 1, and their outputs are zeroed.

  Args:
    x: [B, T, D] float, right-padded.
    lengths: [B] int, real positions per row (the attention mask's row sums).
    forward, backward: (kernel [D, 4u], recurrent_kernel [u, 4u], bias [4u]) of each
      direction in Keras' layout: torch tensors or Keras variables.
  Returns:
    [B, T, 2u]: forward outputs then backward outputs, 0 at padded positions.
  """
  import torch  # pylint: disable=g-import-not-at-top
  from torch.nn.utils import rnn  # pylint: disable=g-import-not-at-top

  # A Keras variable's value, read here, is the one its autocast scope gives.
  forward, backward = (tuple(map(keras.ops.convert_to_tensor, w)) for w in (forward, backward))
  batch, length, _ = x.shape
  units = forward[1].shape[0]
  dtype = torch.float32 if x.dtype == torch.bfloat16 else x.dtype
  # cuDNN flattens the weights with `view`: the transposed Keras kernels must be copied
  # to contiguous memory first (the CPU kernel reads strided ones; found on an H200).
  weights = [w.to(dtype).contiguous() for w in flat_weights(forward, backward, xp=torch)]
  lengths = torch.as_tensor(lengths).to("cpu", torch.int64)
  packed = rnn.pack_padded_sequence(
      x.to(dtype), lengths.clamp(min=1), batch_first=True, enforce_sorted=False
  )
  zeros = x.new_zeros((2, batch, units), dtype=dtype)  # the same in any row order
  # Arguments as `torch.nn.LSTM.forward` passes them for a packed input: the hidden
  # state, weights, has_biases, num_layers, dropout, train, bidirectional. cuDNN keeps
  # what the backward pass needs only when training.
  data, _, _ = torch._VF.lstm(  # pylint: disable=protected-access
      packed.data,
      packed.batch_sizes,
      (zeros, zeros),
      weights,
      True,
      1,
      0.0,
      torch.is_grad_enabled(),
      True,
  )
  packed_y = rnn.PackedSequence(
      data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices
  )
  y, _ = rnn.pad_packed_sequence(packed_y, batch_first=True, total_length=length)
  if bool((lengths == 0).any()):  # lengths are on the host already: no device wait
    y = y * (lengths > 0).to(y.device, y.dtype)[:, None, None]
  return y.to(x.dtype)
