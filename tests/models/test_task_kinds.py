"""The registry of task kinds against what its entries point at: the head classes' own
constructor arguments and ServingModule's, read with `inspect`, not from the registry."""

import inspect

import pytest

from recurrent_bert import models
from recurrent_bert import serving
from recurrent_bert.model_dir import TaskInfo
from recurrent_bert.models import task_kinds

# What each kind's model must be, and its outputs' last axis (labels: a, b, c).
EXPECTED = {
    "classifier": (models.Classifier, "logits", 3),
    "regressor": (models.Classifier, "logits", 1),
    "span": (models.SpanExtractor, "start_logits", None),
    "tagger": (models.TokenTagger, "logits", 3),
    "multiple_choice": (models.MultipleChoice, None, None),
}


def test_every_kind_is_registered_once():
  assert set(task_kinds.KINDS) == set(EXPECTED)
  with pytest.raises(ValueError, match="unknown task kind 'ranking'.*classifier"):
    task_kinds.get("ranking")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_model_serving_role_and_arguments(name, encoder_batch):
  kind = task_kinds.get(name)
  info = TaskInfo(task="t", kind=name, label_names=("a", "b", "c"), layer_mix="last")
  model = kind.build_model(models.build_encoder("bert_tiny"), info)
  model_class, output, width = EXPECTED[name]
  assert type(model) is model_class
  if output is not None:
    out = model(encoder_batch(model.encoder.config.vocab_size), training=False)
    value = out[output] if isinstance(out, dict) else out  # heads of one output: a tensor
    assert value.shape[0] == 2 and (width is None or value.shape[-1] == width)
  # Export hands the model and the arguments to ServingModule by keyword.
  serving_parameters = inspect.signature(serving.ServingModule.__init__).parameters
  assert kind.serving_role in serving_parameters
  assert set(kind.serving_arguments(info)) <= set(serving_parameters)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_feature_based_is_allowed_where_the_head_takes_it(name):
  head_parameters = inspect.signature(EXPECTED[name][0].__init__).parameters
  assert task_kinds.get(name).allows_feature_based == ("feature_based" in head_parameters)
