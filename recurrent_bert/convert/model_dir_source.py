"""A model dir read whole for export: its encoder and the pretraining heads it trained.

Every exporter (`convert.exporters`, `convert.keras_hub_preset`, `convert.keras_hub_bert`)
starts from a `ModelForExport`, opened through `saving.open_model`, so any model the
package accepts exports, on any backend:

  pretraining model_dir   encoder, MLM head, NSP head when the run used one (trained)
  converted model dir     encoder, and the heads the import brought: a head it had to
                          initialise (conversion_report.json's "new") is not exported
  fine-tuning model_dir   the encoder only; the task head is not a pretraining head
  encoder/ export         the encoder only

Heads travel only when trained: an exporter writes what `has_mlm` / `has_nsp` say.
"""

import dataclasses
from typing import Optional

from recurrent_bert import saving
from recurrent_bert.config import ModelConfig
from recurrent_bert.models import Encoder
from recurrent_bert.models import Pretrainer


@dataclasses.dataclass
class ModelForExport:
  """A model dir's weights in memory, with what the exporters need to know of it.

  Attributes:
    model: a `Pretrainer`; its MLM head holds trained weights only when `has_mlm`, and it
      has an NSP head only when `has_nsp`.
    has_mlm: the model dir holds a trained MLM head.
    has_nsp: the model dir holds a trained NSP head (and a trained MLM head: no target
      has a model of the NSP head alone).
    vocab_file: the recorded vocabulary (vocab.txt or a SentencePiece model), or None.
    do_lower_case: the recorded casing, or None.
    kind: what the path is, in words ("pretraining model_dir", ...).
    path: the model dir given.
    untrained_heads: heads the dir holds only initialised (left out of every export).
  """

  model: Pretrainer
  has_mlm: bool
  has_nsp: bool
  vocab_file: Optional[str]
  do_lower_case: Optional[bool]
  kind: str
  path: str
  untrained_heads: tuple = ()

  @property
  def encoder(self) -> Encoder:
    return self.model.encoder

  @property
  def config(self) -> ModelConfig:
    return self.model.encoder.config


def read_model_dir(path: str) -> ModelForExport:
  """Opens the model saved at `path` (see the module docstring) with its trained heads.

  Raises:
    InputError: `path` holds no model (naming it and what would serve), or its weights do
      not fit its model_config.json (the first variable that does not, named).
  """
  stored = saving.open_model(path)
  model = stored.load_pretrainer(trained_heads_only=True)
  has_mlm = stored.trained("mlm_head")
  return ModelForExport(
      model=model,
      has_mlm=has_mlm,
      has_nsp=has_mlm and stored.trained("nsp_head"),
      vocab_file=stored.vocab_file,
      do_lower_case=stored.do_lower_case,
      kind=stored.kind,
      path=path,
      untrained_heads=tuple(head for head, trained in stored.heads.items() if not trained),
  )
