"""The base of the package's functional Keras models that are also subclasses.

Such a model creates its layers and calls them on symbolic inputs *before*
`keras.Model.__init__(inputs, outputs)`, since the graph must exist first. Under Keras'
PyTorch backend every layer is a `torch.nn.Module`, which refuses a module attribute
before its own `__init__` has run; so there, until then, attributes wait in a dict
(readable as usual) and are put in the instance's `__dict__` right after the model is
initialised (every layer among them is in the functional graph, tracked by Keras from
there). On TensorFlow and JAX attributes are set as they come, as Keras expects: tracking
the encoder before `Model.__init__` is what keeps a loaded feature-based model's encoder
frozen (tests/models/test_head_inputs.py).
"""

import keras


class FunctionalSubclass(keras.Model):
  """Subclasses call `self._defer_attributes()` first and `self._init_functional(...)`
  instead of `super().__init__(inputs=..., outputs=..., ...)`."""

  def _defer_attributes(self):
    if keras.backend.backend() == "torch":
      object.__setattr__(self, "_set_after_init", {})

  def _init_functional(self, **kwargs):
    pending = self.__dict__.pop("_set_after_init", {})
    super().__init__(**kwargs)
    for name, value in pending.items():
      object.__setattr__(self, name, value)

  def __setattr__(self, name, value):
    pending = self.__dict__.get("_set_after_init")
    if pending is not None:
      pending[name] = value
      return
    super().__setattr__(name, value)

  def __getattr__(self, name):  # only when the ordinary lookup failed
    pending = self.__dict__.get("_set_after_init")
    if pending is not None and name in pending:
      return pending[name]
    if _MODEL_GETATTR is None:
      raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
    return _MODEL_GETATTR(self, name)


# torch.nn.Module's, under PyTorch (the other backends' models have none). Looked up once
# here rather than through `super()` in every call: torch.compile cannot trace a `super()`
# attribute lookup, and broke the compiled training step into pieces at each one.
_MODEL_GETATTR = getattr(keras.Model, "__getattr__", None)
