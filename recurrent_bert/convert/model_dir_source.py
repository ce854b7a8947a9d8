"""A model dir read whole for export: its encoder and whichever pretraining heads it holds.

Every exporter (`convert.exporters`, `convert.keras_hub_preset`) starts from a
`ModelForExport`, so what counts as a model dir is decided once, here, through
`training.checkpoints.resolve_model`:

  pretraining model_dir   the latest training checkpoint: encoder, MLM head, NSP head
                          when the run used one
  converted model dir     its `pretrainer` checkpoint: encoder and the heads imported
  fine-tuning model_dir   best/ (else the latest checkpoint): the encoder only; the task
                          head is not a pretraining head and is not exported
  encoder/ export         the encoder only

A model dir written under JAX or PyTorch is read the same way: its TensorFlow
checkpoints are what every backend writes.
"""

import dataclasses
import os
from typing import Optional

import tensorflow as tf

from recurrent_bert import model_dir as layout
from recurrent_bert.config import ModelConfig
from recurrent_bert.errors import InputError
from recurrent_bert.models import Encoder
from recurrent_bert.models import Pretrainer
from recurrent_bert.training import checkpoints
from recurrent_bert.weights_file import variables_by_path

# Training checkpoints key a Pretrainer's variables "model/<path>"; the heads' paths
# start with the head's name.
_MLM_KEY = "model/mlm_head"
_NSP_KEY = "model/nsp_head"


@dataclasses.dataclass
class ModelForExport:
  """A model dir's weights in memory, with what the exporters need to know of it.

  Attributes:
    model: a `Pretrainer`; its MLM head holds trained weights only when `has_mlm`, and it
      has an NSP head only when `has_nsp`.
    has_mlm: the model dir holds a trained MLM head.
    has_nsp: the model dir holds a trained NSP head.
    vocab_file: the recorded vocabulary (vocab.txt or a SentencePiece model), or None.
    do_lower_case: the recorded casing, or None.
    kind: what the path is, in words ("pretraining model_dir", ...).
    path: the model dir given.
  """

  model: Pretrainer
  has_mlm: bool
  has_nsp: bool
  vocab_file: Optional[str]
  do_lower_case: Optional[bool]
  kind: str
  path: str

  @property
  def encoder(self) -> Encoder:
    return self.model.encoder

  @property
  def config(self) -> ModelConfig:
    return self.model.encoder.config


def read_model_dir(path: str) -> ModelForExport:
  """Builds the model saved at `path` (see the module docstring) and loads its weights.

  Raises:
    InputError: `path` holds no model (naming it and what would serve), or its weights do
      not fit its model_config.json.
  """
  try:
    source = checkpoints.resolve_model(path)
  except checkpoints.CheckpointNotFoundError as e:
    raise InputError(str(e)) from None
  prefix, is_export = source.prefix, source.is_export
  converted = os.path.join(path.rstrip("/"), layout.PRETRAINER_PREFIX)
  if source.kind == "converted model dir" and tf.io.gfile.exists(converted + ".index"):
    prefix, is_export = converted, False
  config = checkpoints.read_model_config(source.config_dir)
  names = () if is_export else tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
  has_mlm = any(name.startswith(_MLM_KEY) for name in names)
  has_nsp = any(name.startswith(_NSP_KEY) for name in names)
  model = Pretrainer(Encoder(config), use_nsp=has_nsp)
  try:
    if has_mlm:  # one read of the whole Pretrainer: encoder and heads
      status = tf.train.Checkpoint(model=variables_by_path(model)).read(prefix).expect_partial()
      status.assert_existing_objects_matched()
    else:
      checkpoints.restore_encoder_weights(model.encoder, prefix)
  except (AssertionError, ValueError, tf.errors.OpError) as e:
    raise InputError(
        f"{path}: its weights do not fit its {layout.MODEL_CONFIG_FILE} ({source.kind}, "
        f"checkpoint {prefix}): {str(e).splitlines()[0]}"
    ) from None
  return ModelForExport(
      model=model,
      has_mlm=has_mlm,
      has_nsp=has_nsp,
      vocab_file=source.vocab_file,
      do_lower_case=source.do_lower_case,
      kind=source.kind,
      path=path,
  )
