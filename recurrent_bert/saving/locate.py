"""What a path given as a model is: the rules, in one place, and no TensorFlow.

`locate(path)` reads only file names and the small JSON files beside them (a TensorFlow
`checkpoint` state file is parsed as text), so a model dir is recognised on every backend.
In order:

  a .weights.h5 file           "weights file": an Encoder's, a Pretrainer's or a task model's
  a checkpoint prefix          "encoder export" (…/encoder) or "checkpoint prefix" (…/ckpt-N,
                               …/pretrainer)
  an encoder/ export           "encoder export"
  a fine-tuning model_dir      best/ (else the latest checkpoint)
  a pretraining model_dir      the latest training checkpoint (TensorFlow's ckpt-N or the
                               JAX loop's ckpt-N.state/): encoder and heads
  a converted model dir        its pretrainer (encoder and the heads imported)
  a dir with an encoder/       its export (a finished pretraining dir without checkpoints)

Where the same weights are kept in both files (a fine-tuning best/, an encoder export, a
converted dir), the .weights.h5 file is read: it needs no TensorFlow. The vocabulary and
casing are looked up in the folder of the weights, then the dirs around it.
"""

import dataclasses
import os
import re
from typing import FrozenSet, List, Optional, Tuple

from recurrent_bert import model_dir as layout
from recurrent_bert import weights_file
from recurrent_bert.errors import InputError

WEIGHTS_SUFFIX = ".weights.h5"
# What a location's weights are of.
ENCODER, PRETRAINER, TASK_MODEL = "encoder", "pretrainer", "task model"
# A Pretrainer's heads: the first component of their variable paths.
PRETRAINING_HEADS = ("mlm_head", "nsp_head")
_LATEST = re.compile(r'^model_checkpoint_path:\s*"(.*)"\s*$', re.MULTILINE)
# A checkpoint's step in its name: …/ckpt-N, …/ckpt-N.state/model.weights.h5.
_STEP_NAME = re.compile(r"ckpt-(\d+)(?:\.state/[^/]+)?$")


class ModelNotFoundError(InputError):
  """The path holds no model: one line naming it, what it is, and what would serve."""


@dataclasses.dataclass(frozen=True)
class Location:
  """Where a model's pieces are.

  Attributes:
    kind: what the path is, in words ("pretraining model_dir", "encoder export",
      "converted model dir", "fine-tuning model_dir", "checkpoint prefix", "weights file").
    path: the path given.
    weights: the .weights.h5 file, or the TensorFlow checkpoint prefix, of the weights.
    holds: ENCODER, PRETRAINER or TASK_MODEL.
    config_dir: the folder whose model_config.json (and task_info.json) describes them.
    tokenizer_dirs: where the vocabulary and casing are looked up, in order (`tokenizer`).
    initialised: the pretraining heads the writer initialised rather than trained (an
      import's, from its conversion_report.json).
    encoder_weights: a .weights.h5 file holding the same encoder weights as `weights`
      when those are a TensorFlow checkpoint (a finished run's encoder/ export of the
      same step), read for the encoder alone; None: none.
  """

  kind: str
  path: str
  weights: str
  holds: str
  config_dir: str
  tokenizer_dirs: Tuple[str, ...] = ()
  initialised: FrozenSet[str] = frozenset()
  encoder_weights: Optional[str] = None

  @property
  def is_weights_file(self) -> bool:
    """The weights are an HDF5 file (`weights_file`), not a TensorFlow checkpoint."""
    return self.weights.endswith(".h5")


def is_checkpoint_prefix(path: str) -> bool:
  return layout.exists(path + ".index")


def latest_checkpoint(directory: str) -> Optional[str]:
  """The newest TensorFlow checkpoint prefix in `directory` (its `checkpoint` file)."""
  state = os.path.join(directory, layout.CHECKPOINT_STATE_FILE)
  if not layout.isfile(state):
    return None
  match = _LATEST.search(layout.read_text(state))
  if not match:
    return None
  prefix = match.group(1)
  if not os.path.isabs(prefix) and not layout.has_scheme(prefix):
    prefix = os.path.join(directory, prefix)
  return prefix if is_checkpoint_prefix(prefix) else None


def list_states(directory: str) -> List[Tuple[int, str]]:
  """(step, folder) of every complete ckpt-N.state/ folder of a JAX run, oldest first."""
  if not layout.isdir(directory):
    return []
  found = []
  for name in layout.listdir(directory):
    name = name.rstrip("/")
    match = layout.PORTABLE_CHECKPOINT_NAME.match(name)
    folder = os.path.join(directory, name)
    if match and layout.isfile(os.path.join(folder, layout.PORTABLE_STATE_FILE)):
      found.append((int(match.group(1)), folder))
  return sorted(found)


def latest_state(directory: str) -> Optional[str]:
  """The newest complete ckpt-N.state/ folder of a JAX run (`training_state`), or None."""
  states = list_states(directory)
  return states[-1][1] if states else None


def _beside(prefix: str, weights_name: str) -> str:
  """The weights file kept beside a checkpoint of the same weights, else the checkpoint."""
  candidate = os.path.join(os.path.dirname(prefix), weights_name)
  return candidate if layout.isfile(candidate) else prefix


def tokenizer(location: Location) -> Tuple[Optional[str], Optional[bool]]:
  """(vocabulary file, casing) from the first of the location's tokenizer dirs that
  records each (None: none does)."""
  vocab_file = do_lower_case = None
  for directory in location.tokenizer_dirs:
    info = layout.read_tokenizer_info(directory)
    if vocab_file is None:
      name = info.vocab_file if info else layout.VOCAB_FILE
      if layout.isfile(os.path.join(directory, name)):
        vocab_file = os.path.join(directory, name)
    if do_lower_case is None and info is not None:
      do_lower_case = info.do_lower_case
  return vocab_file, do_lower_case


def _initialised_heads(directory: str) -> FrozenSet[str]:
  """Heads an import left freshly initialised (its report's "new" variables)."""
  report = layout.read_json_if_exists(os.path.join(directory, layout.CONVERSION_REPORT_FILE))
  new = report.get("new", []) if isinstance(report, dict) else []
  return frozenset(p.split("/", 1)[0] for p in new if p.split("/", 1)[0] in PRETRAINING_HEADS)


def _location(kind, path, weights, holds, config_dir, search) -> Location:
  initialised = _initialised_heads(config_dir) if holds == PRETRAINER else frozenset()
  return Location(kind, path, weights, holds, config_dir, tuple(search), initialised)


def _holds_of_file(path: str) -> str:
  model = weights_file.read_attributes(path).get("model")
  return {"Encoder": ENCODER, "Pretrainer": PRETRAINER}.get(model, TASK_MODEL)


def _task_or_pretrainer(*dirs: str) -> str:
  return TASK_MODEL if any(layout.is_finetuning_dir(d) for d in dirs) else PRETRAINER


def locate(path: str) -> Location:
  """Finds the weights, config and tokenizer behind `path` (module docstring).

  Raises:
    ModelNotFoundError: naming `path`, what it is, and what would serve.
  """
  path = path.rstrip("/")
  parent = os.path.dirname(path)
  export_dir = os.path.join(path, layout.EXPORT_DIR)
  if path.endswith(WEIGHTS_SUFFIX) and layout.isfile(path):
    # ckpt-N.state/model.weights.h5 keeps its config in the run's dir, one up.
    config_dir = parent
    if not layout.exists(os.path.join(parent, layout.MODEL_CONFIG_FILE)):
      config_dir = os.path.dirname(parent)
    return _location(
        "weights file", path, path, _holds_of_file(path), config_dir, (parent, config_dir)
    )
  if is_checkpoint_prefix(path):
    if os.path.basename(path) == layout.EXPORT_PREFIX:
      weights = _beside(path, layout.EXPORT_WEIGHTS_FILE)
      return _location(
          "encoder export", path, weights, ENCODER, parent, (parent, os.path.dirname(parent))
      )
    holds = _task_or_pretrainer(parent, os.path.dirname(parent))
    return _location(
        "checkpoint prefix",
        path,
        path,
        holds,
        parent,
        (parent, os.path.join(parent, layout.EXPORT_DIR)),
    )
  if path.endswith(".h5") and layout.isfile(path):  # read as one: a bad one is named there
    return _location("weights file", path, path, ENCODER, parent, (parent,))
  if not layout.isdir(path):
    what = "a file, not a checkpoint" if layout.exists(path) else "not a file or directory"
    raise ModelNotFoundError(f"{path!r} is {what}; {_WHAT_SERVES}")
  own_export = _export_weights(path)
  if own_export:
    return _location("encoder export", path, own_export, ENCODER, path, (path, parent))
  if layout.is_finetuning_dir(path):
    for folder in (os.path.join(path, layout.BEST_DIR), path):
      weights = _model_weights(folder)
      if weights:
        return _location("fine-tuning model_dir", path, weights, TASK_MODEL, folder, (folder, path))
    weights = _state_weights(path)
    if weights:
      return _location("fine-tuning model_dir", path, weights, TASK_MODEL, path, (path,))
  weights = latest_checkpoint(path) or _state_weights(path)
  if weights:
    found = _location("pretraining model_dir", path, weights, PRETRAINER, path, (path, export_dir))
    return dataclasses.replace(found, encoder_weights=_export_of_step(export_dir, weights))
  converted = os.path.join(path, layout.PRETRAINER_PREFIX)
  converted_weights = os.path.join(path, layout.PRETRAINER_WEIGHTS_FILE)
  if is_checkpoint_prefix(converted) or layout.isfile(converted_weights):
    weights = _beside(converted, layout.PRETRAINER_WEIGHTS_FILE)
    return _location("converted model dir", path, weights, PRETRAINER, path, (path, export_dir))
  nested_export = _export_weights(export_dir)
  if nested_export:
    converted = layout.exists(os.path.join(path, layout.CONVERSION_REPORT_FILE))
    kind = "converted model dir" if converted else "pretraining model_dir"
    return _location(kind, path, nested_export, ENCODER, export_dir, (export_dir, path))
  if layout.is_saved_model(path):
    raise ModelNotFoundError(
        f"{path!r} is a SavedModel export (for serving): give the model dir it was exported from"
    )
  if layout.exists(os.path.join(path, layout.MODEL_CONFIG_FILE)):
    raise ModelNotFoundError(
        f"{path!r} has a {layout.MODEL_CONFIG_FILE} but no checkpoint yet (a run that has not "
        "saved one): wait for its first checkpoint, or give a checkpoint prefix"
    )
  raise ModelNotFoundError(f"{path!r} is a directory without checkpoints; {_WHAT_SERVES}")


_WHAT_SERVES = (
    "a model is a pretraining or fine-tuning model_dir, an encoder/ export, a "
    "rbert-convert-checkpoint output dir, a checkpoint prefix (…/ckpt-N) or a .weights.h5 file"
)


def _export_weights(folder: str) -> Optional[str]:
  """The weights of the encoder export `folder` is (its .weights.h5, else its checkpoint)."""
  weights = os.path.join(folder, layout.EXPORT_WEIGHTS_FILE)
  prefix = os.path.join(folder, layout.EXPORT_PREFIX)
  if layout.isfile(weights) and (
      is_checkpoint_prefix(prefix) or layout.exists(os.path.join(folder, layout.EXPORT_INFO_FILE))
  ):
    return weights
  return prefix if is_checkpoint_prefix(prefix) else None


def _model_weights(folder: str) -> Optional[str]:
  """A folder's whole-model weights: model.weights.h5 (JAX's best/, and TensorFlow's
  beside its best checkpoint), else its latest TensorFlow checkpoint."""
  weights = os.path.join(folder, layout.MODEL_WEIGHTS_FILE)
  return weights if layout.isfile(weights) else latest_checkpoint(folder)


def _export_of_step(export_dir: str, prefix: str) -> Optional[str]:
  """The export's weights file when the export is of checkpoint `prefix`'s step (…/ckpt-N:
  the step is N); None otherwise."""
  step = step_of(prefix)
  info = layout.read_json_if_exists(os.path.join(export_dir, layout.EXPORT_INFO_FILE))
  weights = os.path.join(export_dir, layout.EXPORT_WEIGHTS_FILE)
  if step is not None and isinstance(info, dict) and info.get("global_step") == step:
    return weights if layout.isfile(weights) else None
  return None


def step_of(weights: str) -> Optional[int]:
  """The training step `weights` were saved at: N of …/ckpt-N or …/ckpt-N.state/, of the
  TensorFlow checkpoint kept beside a weights file, or a best/'s best_metrics.json; None
  when nothing records it."""
  match = _STEP_NAME.search(weights)
  if match:
    return int(match.group(1))
  if not weights.endswith(WEIGHTS_SUFFIX):
    return None
  folder = os.path.dirname(weights)
  beside = latest_checkpoint(folder)
  if beside:
    return step_of(beside)
  best = layout.read_json_if_exists(os.path.join(folder, layout.BEST_METRICS_FILE))
  step = best.get("global_step") if isinstance(best, dict) else None
  return step if isinstance(step, int) else None


def _state_weights(directory: str) -> Optional[str]:
  state = latest_state(directory)
  return os.path.join(state, layout.MODEL_WEIGHTS_FILE) if state else None
