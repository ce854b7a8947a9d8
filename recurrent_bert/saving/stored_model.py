"""A model as stored: what a path holds, and the one way to load any part of it.

`open_model(path)` takes anything the package accepts as a model (`locate`'s list) and
answers, once: its kind, `ModelConfig`, tokenizer, which pretraining heads it holds and
whether each was trained, the task of a fine-tuning dir, and the variables. Its loaders
build or fill an Encoder, a Pretrainer or the task model from whichever file holds the
weights (`weights_file.WeightsFile` or `stores.CheckpointStore`), matched by variable path
by `weights_file.assign`, so callers never ask which format a dir uses.

No TensorFlow is imported unless the weights are only in a TensorFlow checkpoint.
"""

import functools
import os
from typing import Dict, List, Optional, Tuple

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert import weights_file
from recurrent_bert.config import ModelConfig
from recurrent_bert.errors import InputError
from recurrent_bert.saving import locate as locate_lib
from recurrent_bert.saving.stores import CheckpointStore


class StoredModel:
  """The model behind a path (`open_model`).

  Attributes:
    location: where its pieces are (`locate.Location`: kind, path, weights, holds,
      config_dir, tokenizer_dirs, initialised, encoder_weights).
  """

  def __init__(self, location: locate_lib.Location):
    self.location = location

  def __repr__(self) -> str:
    return f"StoredModel({self.kind}: {self.weights})"

  # -- what the path holds -------------------------------------------------------------

  kind = property(lambda self: self.location.kind)
  path = property(lambda self: self.location.path)
  weights = property(lambda self: self.location.weights)
  holds = property(lambda self: self.location.holds)
  config_dir = property(lambda self: self.location.config_dir)

  @functools.cached_property
  def _tokenizer(self) -> Tuple[Optional[str], Optional[bool]]:
    return locate_lib.tokenizer(self.location)

  @property
  def vocab_file(self) -> Optional[str]:
    """The recorded vocabulary (vocab.txt or a SentencePiece model), or None."""
    return self._tokenizer[0]

  @property
  def do_lower_case(self) -> Optional[bool]:
    """The recorded casing, or None."""
    return self._tokenizer[1]

  @functools.cached_property
  def store(self):
    """The file holding the weights, as a store of `weights_file.assign`."""
    if self.location.is_weights_file:
      return weights_file.WeightsFile(self.weights)
    return CheckpointStore(self.weights)

  @functools.cached_property
  def config(self) -> ModelConfig:
    """The encoder's ModelConfig: model_config.json, else the one the weights file records."""
    if layout.exists(os.path.join(self.config_dir, layout.MODEL_CONFIG_FILE)):
      return read_model_config(self.config_dir)
    recorded = None
    if self.location.is_weights_file:  # a file that is not one is named here
      recorded = weights_file.read_attributes(self.weights).get("model_config")
    if recorded is None:
      raise InputError(
          f"{self.path}: no {layout.MODEL_CONFIG_FILE} in {self.config_dir!r} and none "
          "recorded with the weights"
      )
    return ModelConfig.from_json(recorded, source=self.weights)

  @functools.cached_property
  def task_info(self) -> Optional[layout.TaskInfo]:
    """A fine-tuned model's task_info.json (None for any other model)."""
    return layout.TaskInfo.read(self.config_dir) if self.holds == locate_lib.TASK_MODEL else None

  def variable_paths(self) -> List[str]:
    """The weights' variable paths, sorted."""
    return sorted(self.store.shapes())

  @functools.cached_property
  def heads(self) -> Dict[str, bool]:
    """{pretraining head: trained} of the heads stored ("mlm_head", "nsp_head").

    A head is trained unless its writer recorded it as initialised: an import without
    that head (conversion_report.json's "new"). Pretraining trains every head it keeps.
    """
    if self.holds != locate_lib.PRETRAINER:
      return {}
    stored = {p.split("/", 1)[0] for p in self.store.shapes()}
    return {
        head: head not in self.location.initialised
        for head in locate_lib.PRETRAINING_HEADS
        if head in stored
    }

  def trained(self, head: str) -> bool:
    """Whether the model holds `head` ("mlm_head", "nsp_head") trained."""
    return self.heads.get(head, False)

  def step(self) -> Optional[int]:
    """The training step the weights were saved at (None: nothing records it): a
    TensorFlow checkpoint's global_step, else the checkpoint's name or best/'s record
    (`locate.step_of`)."""
    recorded = None if self.location.is_weights_file else self.store.step()
    return recorded if recorded is not None else locate_lib.step_of(self.weights)

  # -- loading -------------------------------------------------------------------------

  def _assign(self, model, **options) -> str:
    weights_file.assign(model, self.store, **options)
    return self.weights

  def restore_encoder(self, encoder) -> str:
    """Fills `encoder` (built, its sizes the stored one's) with the stored encoder's
    weights, from whichever model holds them; returns the file read.

    Where a weights file holds the same encoder as a TensorFlow checkpoint (a finished
    TensorFlow run's export), the weights file is read: no TensorFlow needed.
    """
    if self.location.encoder_weights:
      weights = self.location.encoder_weights
      weights_file.assign(encoder, weights_file.WeightsFile(weights), encoder_only=True)
      return weights
    return self._assign(encoder, encoder_only=True)

  def load_encoder(self, config: Optional[ModelConfig] = None):
    """A new Encoder with the stored weights.

    Args:
      config: overrides the stored ModelConfig (another dropout rate, say); the sizes
        must match the weights.
    """
    from recurrent_bert.models import build_encoder

    encoder = build_encoder(config or self.config)
    self.restore_encoder(encoder)
    return encoder

  def restore_pretrainer(self, pretrainer, trained_heads_only: bool = False) -> str:
    """--init_checkpoint: the encoder, and the heads stored that `pretrainer` has too (a
    phase 1 -> phase 2 start); the optimizer and step stay as they are.

    Args:
      pretrainer: a built Pretrainer of the stored encoder's sizes.
      trained_heads_only: leave heads the writer only initialised as they are.
    """
    self.restore_encoder(pretrainer.encoder)
    self.restore_heads(pretrainer, trained_heads_only)
    return self.weights

  def restore_heads(self, pretrainer, trained_heads_only: bool = False) -> Tuple[str, ...]:
    """Fills the pretraining heads stored that `pretrainer` has too (all their
    variables, or an InputError naming the first that does not fit); returns their names.

    Args:
      pretrainer: a built Pretrainer.
      trained_heads_only: leave heads the writer only initialised as they are.
    """
    ours = {p.split("/", 1)[0] for p in weights_file.variables_by_path(pretrainer)}
    heads = tuple(
        head
        for head, trained in self.heads.items()
        if head in ours and (trained or not trained_heads_only)
    )
    if heads:
      self._assign(pretrainer, include=lambda p: p.split("/", 1)[0] in heads, allow_unused=True)
    return heads

  def load_pretrainer(self, trained_heads_only: bool = True):
    """A Pretrainer with the stored encoder, an NSP head when one is stored, and the
    stored heads' weights (by default only those trained; see `heads`)."""
    from recurrent_bert.models import Encoder
    from recurrent_bert.models import Pretrainer

    use_nsp = "nsp_head" in self.heads and (self.heads["nsp_head"] or not trained_heads_only)
    pretrainer = Pretrainer(Encoder(self.config), use_nsp=use_nsp)
    self.restore_pretrainer(pretrainer, trained_heads_only)
    return pretrainer

  def restore(self, model) -> str:
    """Fills a whole model of the stored kind (a Pretrainer, or a task model built by
    `models.task_kinds.build_task_model`) with every stored weight; returns the file."""
    return self._assign(model)

  def load_task_model(self) -> Tuple[object, layout.TaskInfo]:
    """(the fine-tuned task model with its weights, its TaskInfo).

    Raises:
      InputError: the path holds no fine-tuned model.
    """
    from recurrent_bert.models import build_encoder
    from recurrent_bert.models.task_kinds import build_task_model

    if self.task_info is None:
      raise InputError(f"{self.path}: a {self.kind}, not a fine-tuned model (no task_info.json)")
    model = build_task_model(build_encoder(self.config), self.task_info)
    self.restore(model)
    return model, self.task_info


def read_model_config(directory: str) -> ModelConfig:
  """directory/model_config.json.

  Raises:
    ModelNotFoundError: there is none; ConfigError: it is not a valid config (named).
  """
  path = os.path.join(directory, layout.MODEL_CONFIG_FILE)
  if not layout.exists(path):
    raise locate_lib.ModelNotFoundError(f"no {layout.MODEL_CONFIG_FILE} in {directory!r}")
  with io_utils.open_file(path, "rb") as f:  # bytes: from_json names a non-UTF-8 file
    return ModelConfig.from_json(f.read(), source=path)


def open_model(path: str) -> StoredModel:
  """The model stored at `path`: a model dir of any kind and backend, an encoder/ export,
  a checkpoint prefix or a .weights.h5 file (`locate`).

  Raises:
    locate.ModelNotFoundError (an InputError): one line naming `path` and what would serve.
  """
  return StoredModel(locate_lib.locate(path))
