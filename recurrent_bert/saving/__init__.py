"""Opening and writing models: the one layer between model files and everything that
uses a model (training, fine-tuning, serving, conversion, features, the demo).

  open_model(path) -> StoredModel   anything the package accepts as a model, on any
                                    backend: kind, ModelConfig, tokenizer, heads and
                                    whether each was trained, the task; its loaders fill
                                    an Encoder, a Pretrainer or the task model
  locate.py          what a path is (file names and small JSON files only)
  stored_model.py    StoredModel: one API over both weight files
  stores.py          a TensorFlow checkpoint read by variable path (the other file is
                     `weights_file.WeightsFile`); both are matched by `weights_file.assign`
  writing.py         model_config.json, tokenizer files, weights files, the encoder
                     export, TensorFlow checkpoints keyed as `stores` reads them
  training_state.py  the JAX loop's ckpt-N.state/ folders (weights + optimizer state)

Nothing above this package reads a checkpoint or weights file itself
(tests/test_architecture.py checks). TensorFlow is imported only to read or write a
TensorFlow checkpoint, so a model trained under JAX opens, and exports to Hugging Face or
keras-hub, where TensorFlow is not installed.

May import: the base modules, data/ (the vocabulary's kind) and models/.
"""

from recurrent_bert.saving.locate import ENCODER
from recurrent_bert.saving.locate import PRETRAINER
from recurrent_bert.saving.locate import TASK_MODEL
from recurrent_bert.saving.locate import ModelNotFoundError
from recurrent_bert.saving.locate import latest_checkpoint
from recurrent_bert.saving.locate import latest_state
from recurrent_bert.saving.stored_model import StoredModel
from recurrent_bert.saving.stored_model import open_model
from recurrent_bert.saving.stored_model import read_model_config
from recurrent_bert.saving.writing import export_encoder
from recurrent_bert.saving.writing import tf_checkpoint
from recurrent_bert.saving.writing import write_converted_dir
from recurrent_bert.saving.writing import write_model_config
from recurrent_bert.saving.writing import write_model_weights
from recurrent_bert.saving.writing import write_tokenizer_files
