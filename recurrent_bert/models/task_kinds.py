"""The registry of task kinds: what a fine-tuned model of each kind is and how it is served.

A kind (`TaskInfo.kind` in task_info.json: "classifier", "regressor", "span", "tagger",
"multiple_choice") names one `TaskKind` here. The Finetuner builds its model from it
(`build_model`), the fine-tuning commands ask it whether `--feature_based` applies, and
export (`serving.export_model_dir`) asks which `ServingModule` argument takes the model
and what else the signatures need. Code elsewhere looks a kind up (`get`) instead of
comparing its name (tests/test_architecture.py checks that), so a new kind is one entry.

The tasks that train each kind (readers, features, objectives, metrics, the splits each
mode reads: a `TaskAdapter`) are the subpackage of recurrent_bert/tasks/ that `tasks_package`
names; models/ sits below tasks/, so the link is that name.
"""

import dataclasses
from typing import Any, Callable, Dict

from recurrent_bert.model_dir import TaskInfo
from recurrent_bert.models.classifier import Classifier
from recurrent_bert.models.multiple_choice import MultipleChoice
from recurrent_bert.models.span_extractor import SpanExtractor
from recurrent_bert.models.token_tagger import TokenTagger


@dataclasses.dataclass(frozen=True)
class TaskKind:
  """One kind of fine-tuned model.

  Attributes:
    name: the `TaskInfo.kind` that selects it.
    build_model: (encoder, info) -> the task model around the encoder, its head as `info`
      records it (labels, layer mix, feature-based or not, the BLSTM span decoder).
    allows_feature_based: whether its head can read a frozen encoder's layers through a
      BiLSTM (BERT Table 7: classification and tagging).
    serving_role: the `serving.ServingModule` argument that takes the task model.
    serving_arguments: info -> the other `ServingModule` arguments its signatures need.
    tasks_package: the subpackage of recurrent_bert/tasks/ whose `adapter` trains it.
  """

  name: str
  build_model: Callable[[Any, TaskInfo], Any]
  allows_feature_based: bool
  serving_role: str
  serving_arguments: Callable[[TaskInfo], Dict[str, Any]]
  tasks_package: str


def _head_options(info: TaskInfo) -> Dict[str, Any]:
  return dict(layer_mix=info.layer_mix, feature_based=info.feature_based)


def _classifier_kind(name: str, num_classes: Callable[[TaskInfo], int]) -> TaskKind:
  """Classification (K labels) and regression (one score) share the head and signatures."""
  return TaskKind(
      name=name,
      build_model=lambda encoder, info: Classifier(
          encoder, num_classes=num_classes(info), **_head_options(info)
      ),
      allows_feature_based=True,
      serving_role="classifier",
      serving_arguments=lambda info: dict(
          label_names=list(info.label_names) or None, text_pair=info.text_pair
      ),
      tasks_package="classification",
  )


KINDS: Dict[str, TaskKind] = {
    kind.name: kind
    for kind in (
        _classifier_kind("classifier", lambda info: len(info.label_names)),
        _classifier_kind("regressor", lambda info: 1),
        TaskKind(
            name="span",
            build_model=lambda encoder, info: SpanExtractor(
                encoder, use_blstm_decoder=info.use_blstm_decoder, layer_mix=info.layer_mix
            ),
            allows_feature_based=False,
            serving_role="span_extractor",
            serving_arguments=lambda info: dict(
                max_query_length=info.max_query_length, max_answer_length=info.max_answer_length
            ),
            tasks_package="span",
        ),
        TaskKind(
            name="tagger",
            build_model=lambda encoder, info: TokenTagger(
                encoder, len(info.label_names), **_head_options(info)
            ),
            allows_feature_based=True,
            serving_role="token_tagger",
            serving_arguments=lambda info: dict(tag_names=list(info.label_names)),
            tasks_package="tagging",
        ),
        TaskKind(
            name="multiple_choice",
            build_model=lambda encoder, info: MultipleChoice(encoder, layer_mix=info.layer_mix),
            allows_feature_based=False,
            serving_role="multiple_choice",
            serving_arguments=lambda info: {},
            tasks_package="multiple_choice",
        ),
    )
}


def get(name: str) -> TaskKind:
  """The kind called `name`; ValueError naming the known ones otherwise."""
  if name not in KINDS:
    raise ValueError(f"unknown task kind {name!r} (known: {', '.join(KINDS)})")
  return KINDS[name]


def build_task_model(encoder, info: TaskInfo):
  """The task model of `info` (its kind's `build_model`) around `encoder`.

  Raises:
    ValueError: `info` asks for the feature-based mode of a kind that has none.
  """
  kind = get(info.kind)
  if info.feature_based and not kind.allows_feature_based:
    raise ValueError(f"the feature-based mode is for classification and tagging, not {info.kind}")
  return kind.build_model(encoder, info)
