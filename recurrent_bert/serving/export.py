"""Saving a ServingModule as a SavedModel, and exporting model dirs.

`export_model_dir` is the library side of `python -m recurrent_bert.export`: it builds
the module from a fine-tuning model dir (the task's signatures: the threshold of a v2.0
model is the dev `best_f1_threshold` of its best checkpoint, 0.0 when none was recorded;
text_pair as recorded in task_info.json) or from a pretraining or converted model dir
(encoder signatures).
"""

import os
from typing import Dict, Optional

from absl import logging
import tensorflow as tf

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert import saving
from recurrent_bert.data import tokenization
from recurrent_bert.serving.module import ServingModule

# The no-answer threshold when training recorded none: google-research/bert's default.
DEFAULT_NULL_SCORE_DIFF_THRESHOLD = 0.0


def describe_signatures(module: ServingModule, export_dir: Optional[str] = None) -> Dict[str, str]:
  """{signature name: "inputs -> outputs"} of a ServingModule, for logs and reports.

  With `export_dir`, the SavedModel just saved from `module`, the outputs are read from
  its signature definitions; without, each signature function is traced for them (saving
  traced them already: tracing is most of an export's time).
  """
  saved = _saved_signature_outputs(export_dir) if export_dir else {}
  described = {}
  for name, function in module.signature_functions().items():
    inputs = ", ".join(
        f"{spec.name} {spec.dtype.name}{spec.shape.as_list()}" for spec in function.input_signature
    )
    if name in saved:
      outputs = saved[name]
    else:
      traced = function.get_concrete_function().structured_outputs
      outputs = {key: (t.dtype.name, t.shape.as_list()) for key, t in traced.items()}
    outputs = ", ".join(f"{key} {dtype}{shape}" for key, (dtype, shape) in sorted(outputs.items()))
    described[name] = f"({inputs}) -> {outputs}"
    if getattr(module, "with_no_answer", False) and function is module.answer_question:
      described[
          name
      ] += f"; no_answer = null_score_diff > {float(module.null_score_diff_threshold.numpy()):g}"
  return described


def _saved_signature_outputs(export_dir: str) -> Dict[str, Dict[str, tuple]]:
  """{signature: {output: (dtype name, shape list)}} from a SavedModel's saved_model.pb."""
  # The SavedModel's own proto: TensorFlow has no public reader of signature definitions
  # short of loading the whole model.
  from tensorflow.core.protobuf import saved_model_pb2

  proto = saved_model_pb2.SavedModel()
  with tf.io.gfile.GFile(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
    proto.ParseFromString(f.read())
  described = {}
  for name, signature in proto.meta_graphs[0].signature_def.items():
    outputs = signature.outputs.values()
    if all(info.WhichOneof("encoding") == "name" and info.dtype for info in outputs):
      # Dense tensors only; a signature with composite outputs is traced instead.
      described[name] = {
          key: (
              tf.dtypes.as_dtype(info.dtype).name,
              [None if dim.size < 0 else dim.size for dim in info.tensor_shape.dim],
          )
          for key, info in signature.outputs.items()
      }
  return described


def save_serving_module(module: ServingModule, export_dir: str) -> Dict[str, str]:
  """Writes the SavedModel atomically: a temp dir beside `export_dir`, then a rename.

  An existing `export_dir` stays complete until the new one replaces it.

  Returns:
    describe_signatures(module).
  """
  with io_utils.atomic_directory(export_dir) as tmp_dir:
    tf.saved_model.save(module, tmp_dir, signatures=module.signature_functions())
    return describe_signatures(module, tmp_dir)


def export_saved_model(export_dir: str, tokenizer, max_seq_length: int, **models) -> Dict[str, str]:
  """Builds a ServingModule (`models`: its keyword arguments) and saves it atomically.

  Example:
    export_saved_model("out/classifier", tokenizer, 128, classifier=model,
                       label_names=["negative", "positive"])
  Returns:
    {signature name: "inputs -> outputs"}.
  """
  return save_serving_module(ServingModule(tokenizer, max_seq_length, **models), export_dir)


def recorded_null_score_diff_threshold(directory: str) -> Optional[float]:
  """The no-answer threshold chosen on dev for the checkpoint in `directory` (best/).

  That is best_metrics.json's `best_f1_threshold` (`metrics.squad_v2_scores`) of the
  first eval split: the null_score_diff above which "no answer" scored the best dev F1.

  Returns:
    The threshold, or None when none was recorded (no evaluation, or SQuAD v1.1).
  """
  best = layout.read_json_if_exists(os.path.join(directory, layout.BEST_METRICS_FILE))
  if not best:
    return None
  split = (best.get("eval_splits") or ["dev"])[0]
  value = (best.get(split) or {}).get("best_f1_threshold")
  return None if value is None else float(value)


# ------------------------------------------------------------- model dirs

DEFAULT_MAX_SEQ_LENGTH = 512


class ExportError(ValueError):
  """A flag or the model dir does not allow an export (the message names which)."""


def resolve_max_seq_length(config, max_seq_length: Optional[int]) -> int:
  """--max_seq_length checked against the model (absolute positions cap it)."""
  limit = config.max_position_embeddings if config.position_embedding == "absolute" else None
  if max_seq_length is None:
    return limit or DEFAULT_MAX_SEQ_LENGTH
  if max_seq_length < 3:
    raise ExportError(f"--max_seq_length={max_seq_length} must be at least 3")
  if limit is not None and max_seq_length > limit:
    raise ExportError(
        f"--max_seq_length={max_seq_length} exceeds the model's max_position_embeddings={limit}"
    )
  return max_seq_length


def export_model_dir(
    model_dir: str,
    export_dir: str,
    max_seq_length: Optional[int] = None,
    vocab_file: Optional[str] = None,
    do_lower_case: Optional[bool] = None,
) -> Dict[str, str]:
  """Writes the text-in SavedModel of `model_dir` to `export_dir`.

  A fine-tuning model_dir (finetune_glue / finetune_squad: it has task_info.json) gives
  the task's signatures (classify / regress / answer_question / choose / tag, from best/
  when present) plus encode; anything else `saving.open_model` opens gives encode
  signatures.
  Defaults: vocab.txt of the model dir; casing as recorded there; max_seq_length the
  fine-tuning length, else the model's maximum.

  Returns:
    {signature name: "inputs -> outputs"} of what was written.
  Raises:
    ExportError, InputError: naming the flag or path at fault.
  """
  from recurrent_bert.models import task_kinds

  task_model = info = None
  source = saving.open_model(model_dir)
  config_dir = source.config_dir
  if source.holds == saving.TASK_MODEL:
    task_model, info = source.load_task_model()
    encoder = task_model.encoder
    if max_seq_length is None:
      max_seq_length = info.max_seq_length
  else:
    encoder = source.load_encoder()
  max_seq_length = resolve_max_seq_length(encoder.config, max_seq_length)
  vocab_file = vocab_file or source.vocab_file
  if vocab_file is None:
    raise ExportError(
        f"{model_dir!r} ({source.kind}) records no vocabulary "
        f"({layout.VOCAB_FILE} or {layout.SENTENCEPIECE_MODEL_FILE}); pass --vocab_file"
    )
  if do_lower_case is None:
    do_lower_case = source.do_lower_case
    if do_lower_case is None:
      logging.warning(
          "%s records no do_lower_case; lower-casing (pass --do_lower_case "
          "or --nodo_lower_case to choose)",
          model_dir,
      )
      do_lower_case = True
  tokenizer = tokenization.make_tokenizer(vocab_file, do_lower_case=do_lower_case)
  if tokenizer.vocab_size > encoder.config.vocab_size:
    raise ExportError(
        f"vocab file {vocab_file!r} has {tokenizer.vocab_size} tokens, "
        f"the model only {encoder.config.vocab_size} embeddings"
    )
  models = {"encoder": encoder}
  if info is not None:
    kind = task_kinds.get(info.kind)
    models.update({kind.serving_role: task_model}, **kind.serving_arguments(info))
  if info is not None and info.task == "squad_v2":
    threshold = recorded_null_score_diff_threshold(config_dir)
    if threshold is None:
      threshold = DEFAULT_NULL_SCORE_DIFF_THRESHOLD
      logging.warning(
          "%s records no dev best_f1_threshold (trained without "
          "evaluation?): no_answer when null_score_diff > %g",
          config_dir,
          threshold,
      )
    else:
      logging.info("no_answer when null_score_diff > %g (best_f1_threshold on dev)", threshold)
    models["null_score_diff_threshold"] = threshold
  return export_saved_model(export_dir, tokenizer, max_seq_length, **models)
