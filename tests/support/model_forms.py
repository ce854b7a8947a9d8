"""One model written by every writer of the package, for the readers' tests.

`write_every_form(folder)` builds a small Pretrainer and a Classifier on the same encoder
(random weights, numpy's generator: the same in every process and backend) and writes
them the ways the package does:

  tf_pretraining   a pretraining model_dir with a TensorFlow training checkpoint (the
                   TensorFlow loop's layout: model by path, optimizer, step, RNG states)
  jax_pretraining  a pretraining model_dir with a ckpt-N.state/ folder (the JAX loop's)
  finetuning       a fine-tuning model_dir: a training checkpoint, and best/ with its
                   TensorFlow checkpoint and model.weights.h5
  converted        a converted dir (`saving.write_converted_dir`), whose
                   report lists the NSP head as new (initialised, never trained)
  encoder_export   an encoder/ export with its TensorFlow checkpoint
  weights_file     a Pretrainer's .weights.h5 alone

Forms that hold TensorFlow checkpoints are written under TensorFlow only
(`TF_ONLY`); the others under any backend. `reference_outputs` is what each must give.
"""

import os
from typing import Dict

import keras
import numpy as np

from recurrent_bert import saving
from recurrent_bert.config import get_preset
from recurrent_bert.model_dir import TaskInfo
from recurrent_bert.models import Classifier
from recurrent_bert.models import Encoder
from recurrent_bert.models import Pretrainer
from recurrent_bert.saving import training_state
from recurrent_bert.weights_file import variables_by_path

CONFIG = get_preset("bert_tiny").replace(
    vocab_size=40,
    num_layers=1,
    hidden_size=16,
    num_heads=2,
    intermediate_size=32,
    max_position_embeddings=16,
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]
TASK = TaskInfo(task="custom", kind="classifier", label_names=("a", "b", "c"))
TF_ONLY = ("tf_pretraining", "finetuning")
POSITIONS = np.array([[1, 4], [2, 3]], "int32")


def inputs() -> Dict[str, np.ndarray]:
  mask = np.array([[1] * 6, [1] * 4 + [0] * 2], "int32")
  ids = np.random.default_rng(7).integers(5, 40, (2, 6)).astype("int32") * mask
  return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}


def models():
  """(Pretrainer with an NSP head, Classifier on the same encoder), random weights."""
  encoder = Encoder(CONFIG)
  pretrainer = Pretrainer(encoder, use_nsp=True)
  classifier = Classifier(encoder, num_classes=3)
  batch = inputs()
  pretrainer({**batch, "masked_lm_positions": POSITIONS})
  classifier(batch)
  rng = np.random.default_rng(0)
  seen = set()
  for variable in pretrainer.weights + classifier.weights:
    if id(variable) not in seen:
      seen.add(id(variable))
      variable.assign(rng.normal(0.0, 0.5, tuple(variable.shape)).astype("float32"))
  return pretrainer, classifier


def reference_outputs(pretrainer, classifier) -> Dict[str, np.ndarray]:
  """What each form must give back: the encoder's, the heads' and the task's outputs."""
  batch = inputs()
  encoded = pretrainer.encoder(batch, training=False)
  heads = pretrainer({**batch, "masked_lm_positions": POSITIONS}, training=False)
  return {
      "pooled_output": keras.ops.convert_to_numpy(encoded["pooled_output"]),
      "mlm_logits": keras.ops.convert_to_numpy(heads["mlm_logits"]),
      "nsp_logits": keras.ops.convert_to_numpy(heads["nsp_logits"]),
      "task_logits": keras.ops.convert_to_numpy(classifier(batch, training=False)),
  }


def _model_files(directory: str, vocab_file: str) -> str:
  os.makedirs(directory, exist_ok=True)
  saving.write_model_config(directory, CONFIG)
  saving.write_tokenizer_files(directory, vocab_file, True)
  return directory


def write_every_form(folder: str, pretrainer, classifier) -> Dict[str, str]:
  """Writes the module docstring's forms under `folder`; returns {form: path}."""
  vocab_file = os.path.join(folder, "vocab.txt")
  with open(vocab_file, "w", encoding="utf-8") as f:
    f.write("\n".join(VOCAB) + "\n")
  on_tensorflow = keras.backend.backend() == "tensorflow"
  paths = {}
  optimizer = keras.optimizers.Adam()
  optimizer.build(pretrainer.trainable_variables)
  state = _model_files(os.path.join(folder, "jax_pretraining"), vocab_file)
  training_state.save_state(state, 3, pretrainer, optimizer, keep=1)
  paths["jax_pretraining"] = state
  paths["encoder_export"] = saving.export_encoder(
      pretrainer.encoder,
      os.path.join(folder, "exported"),
      vocab_file=vocab_file,
      do_lower_case=True,
      with_tf_checkpoint=on_tensorflow,
  )
  paths["weights_file"] = saving.write_model_weights(pretrainer, folder, "pretrainer.weights.h5")
  if not on_tensorflow:
    return paths
  import tensorflow as tf

  tf_dir = _model_files(os.path.join(folder, "tf_pretraining"), vocab_file)
  step = tf.Variable(5, dtype=tf.int64)
  checkpoint = saving.tf_checkpoint(
      pretrainer, include_rng_state=True, optimizer=optimizer, global_step=step
  )
  tf.train.CheckpointManager(checkpoint, tf_dir, max_to_keep=1).save(checkpoint_number=5)
  paths["tf_pretraining"] = tf_dir

  tuning = _model_files(os.path.join(folder, "finetuning"), vocab_file)
  best = _model_files(os.path.join(tuning, "best"), vocab_file)
  for directory in (tuning, best):
    with open(os.path.join(directory, "task_info.json"), "w", encoding="utf-8") as f:
      f.write(TASK.to_json())
    manager = tf.train.CheckpointManager(saving.tf_checkpoint(classifier), directory, 1)
    manager.save(checkpoint_number=2)
  saving.write_model_weights(classifier, best)
  paths["finetuning"] = tuning

  converted = os.path.join(folder, "converted")
  info = {
      "source": "elsewhere",
      "source_kind": "hf",
      "do_lower_case": True,
      "new": [p for p in variables_by_path(pretrainer) if p.startswith("nsp_head/")],
  }
  saving.write_converted_dir(pretrainer, converted, vocab_file, info)
  paths["converted"] = converted
  return paths
