"""The task registry: GLUE and SuperGLUE specs, looked up by forgiving names."""

import pytest

from recurrent_bert.errors import InputError
from recurrent_bert.tasks.classification import registry


def test_all_nine_tasks_are_registered_with_metrics():
  assert sorted(registry.GLUE_TASKS) == sorted(
      ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"]
  )
  assert registry.get_task("SST-2").name == "sst2"
  assert registry.get_task("STS-B").is_regression and registry.get_task("STS-B").num_labels == 1
  assert registry.get_task("cola").main_metric == "matthews_corr"
  assert registry.get_task("mnli").eval_splits == ("dev_matched", "dev_mismatched")
  for spec in registry.GLUE_TASKS.values():
    assert spec.main_metric in spec.metric_names
  with pytest.raises(InputError, match="unknown task"):
    registry.get_task("squad")


def test_superglue_tasks_share_the_lookup():
  assert registry.get_task("BoolQ").benchmark == "superglue"
  assert registry.get_task("multi_rc") is registry.SUPERGLUE_TASKS["multirc"]
  assert set(registry.TASKS) == set(registry.GLUE_TASKS) | set(registry.SUPERGLUE_TASKS)
  assert registry.canonical_task_name(" sst_2 ") == "sst2"
