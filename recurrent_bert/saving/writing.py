"""What a model dir's writers put beside the weights, and the files they write them in.

  write_model_config      model_config.json
  write_tokenizer_files   vocab.txt (or sentencepiece.model) and tokenizer.json
  write_model_weights     <dir>/model.weights.h5: a whole model, for every backend
  export_encoder          <model_dir>/encoder/: the encoder export, written whole
  write_converted_dir     an import's model dir, written whole
  tf_checkpoint           a tf.train.Checkpoint keyed the way `stores.CheckpointStore`
                          reads it back (training checkpoints, best/, a converted dir)

The readers are `open_model` (weights) and `model_dir` (the small JSON files).
"""

import dataclasses
import os
from typing import Optional

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert import weights_file
from recurrent_bert.config import ModelConfig
from recurrent_bert.data import vocab as vocab_lib


def write_model_config(directory: str, config: ModelConfig) -> None:
  io_utils.atomic_write_text(os.path.join(directory, layout.MODEL_CONFIG_FILE), config.to_json())


def write_tokenizer_files(
    directory: str, vocab_file: Optional[str], do_lower_case: Optional[bool]
) -> None:
  """vocab.txt (a copy of `vocab_file`) and tokenizer.json, what a reader tokenizes with.

  A SentencePiece model is copied to sentencepiece.model instead, and tokenizer.json
  records its kind, file and the model's own casing.

  Without a vocabulary nothing is written; with an unknown casing (None: a converted
  checkpoint that does not say) only vocab.txt.
  """
  if not vocab_file:
    return
  info = layout.TokenizerInfo()
  if vocab_lib.vocab_kind(vocab_file) == layout.SENTENCEPIECE:
    # The model's normaliser fixes the casing: record it, not the flag.
    do_lower_case = vocab_lib.Vocabulary.from_sentencepiece(vocab_file).folds_case
    info = layout.TokenizerInfo(layout.SENTENCEPIECE, vocab_file=layout.SENTENCEPIECE_MODEL_FILE)
  io_utils.atomic_copy(vocab_file, os.path.join(directory, info.vocab_file))
  if do_lower_case is not None:
    io_utils.atomic_write_text(
        os.path.join(directory, layout.TOKENIZER_FILE),
        dataclasses.replace(info, do_lower_case=do_lower_case).to_json(),
    )


def write_model_weights(model, directory: str, name: str = layout.MODEL_WEIGHTS_FILE) -> str:
  """directory/<name> (default model.weights.h5): the whole model's weights for every
  Keras backend; returns its path."""
  return weights_file.save_weights(model, os.path.join(directory, name))


def tf_checkpoint(model=None, encoder=None, include_rng_state: bool = False, **state):
  """A tf.train.Checkpoint holding `model`'s weights under "model" (or an `encoder`'s
  under "encoder"), by variable path, plus `state` (optimizer, global_step, iterator).

  `include_rng_state`: the dropout generators' states too (a resumed run draws the same
  masks; `weights_file.variables_by_path`).
  """
  import tensorflow as tf

  if model is not None:
    state["model"] = weights_file.variables_by_path(model, include_rng_state=include_rng_state)
  if encoder is not None:
    state["encoder"] = weights_file.variables_by_path(encoder)
  return tf.train.Checkpoint(**state)


def write_converted_dir(
    pretrainer, output_dir: str, vocab_file: Optional[str], report: dict, overwrite: bool = False
) -> None:
  """Writes an imported model's dir atomically (temp dir, then rename): model_config.json,
  the Pretrainer as pretrainer.index / .data-* and pretrainer.weights.h5, the encoder/
  export, the tokenizer files and conversion_report.json (`report`: its "new" lists the
  variables the import initialised, so a head among them is read back as untrained).

  Args:
    pretrainer: the imported Pretrainer (encoder and heads).
    output_dir: a local folder, new or empty (`overwrite` replaces it).
    vocab_file: the model's vocabulary, or None.
    report: the conversion report; its "source", "source_kind" and "do_lower_case" go to
      the export's export_info.json too.
  """
  output_dir = os.path.abspath(output_dir)
  io_utils.check_replaceable_dir(output_dir, overwrite)
  with io_utils.atomic_directory(output_dir) as tmp_dir:
    write_model_config(tmp_dir, pretrainer.encoder.config)
    prefix = os.path.join(tmp_dir, layout.PRETRAINER_PREFIX)
    tf_checkpoint(pretrainer).write(prefix)
    # The same weights for every backend: what `open_model` reads first.
    write_model_weights(pretrainer, tmp_dir, layout.PRETRAINER_WEIGHTS_FILE)
    export_info = {key: report[key] for key in ("source", "source_kind", "do_lower_case")}
    export_encoder(
        pretrainer.encoder,
        tmp_dir,
        vocab_file=vocab_file,
        info=export_info,
        with_tf_checkpoint=True,
    )
    write_tokenizer_files(tmp_dir, vocab_file, report["do_lower_case"])
    io_utils.atomic_write_json(os.path.join(tmp_dir, layout.CONVERSION_REPORT_FILE), report)


def export_encoder(
    encoder,
    model_dir: str,
    *,
    vocab_file: Optional[str] = None,
    do_lower_case: Optional[bool] = None,
    info: Optional[dict] = None,
    with_tf_checkpoint: bool = False,
) -> str:
  """Writes model_dir/encoder atomically (temp dir, then rename); returns its path.

  It holds encoder.weights.h5, which Keras reads on every backend, model_config.json, the
  tokenizer files and export_info.json; `with_tf_checkpoint` adds the same weights as a
  TensorFlow checkpoint (encoder.index / .data-*) for TensorFlow's own tools.

  `do_lower_case` defaults to `info["do_lower_case"]` (None: not known).

  export_info.json is written last: on object stores, which rename object by object, an
  export without it is incomplete.
  """
  info = dict(info or {})
  if do_lower_case is None:
    do_lower_case = info.get("do_lower_case")
  info["do_lower_case"] = do_lower_case
  final_dir = os.path.join(model_dir, layout.EXPORT_DIR)
  with io_utils.atomic_directory(final_dir) as tmp_dir:
    if with_tf_checkpoint:
      tf_checkpoint(encoder=encoder).write(os.path.join(tmp_dir, layout.EXPORT_PREFIX))
    weights_file.save_weights(encoder, os.path.join(tmp_dir, layout.EXPORT_WEIGHTS_FILE))
    write_model_config(tmp_dir, encoder.config)
    write_tokenizer_files(tmp_dir, vocab_file, do_lower_case)
    io_utils.atomic_write_json(os.path.join(tmp_dir, layout.EXPORT_INFO_FILE), info)
  return final_dir
