"""Activation names used in configs, resolved to functions."""

import keras


def get_activation(name):
  """ "gelu" is the exact erf form; "gelu_approximate" the tanh form of TF1 BERT."""
  if name == "gelu":
    return lambda x: keras.activations.gelu(x, approximate=False)
  if name == "gelu_approximate":
    return lambda x: keras.activations.gelu(x, approximate=True)
  if name in ("relu", "sigmoid", "tanh"):
    return keras.activations.get(name)
  raise ValueError(f"unknown activation {name!r}")
