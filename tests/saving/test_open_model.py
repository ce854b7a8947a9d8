"""`saving.open_model`: one model written by every writer opens to the same outputs.

The reference is the model that was written (`tests/support/model_forms.py`): its encoder,
heads and task outputs, computed before any file existed. Each form is then opened the
one way, and must give them back exactly, say what it is, and which heads it trained.
"""

import os

import numpy as np
import pytest

from recurrent_bert import saving
from recurrent_bert.errors import InputError
from recurrent_bert.models import Encoder
from recurrent_bert.models import Pretrainer
from tests.support import model_forms

pytestmark = pytest.mark.slow(seconds=20)

# form: (kind, holds, {head: trained})
EXPECTED = {
    "tf_pretraining": ("pretraining model_dir", saving.PRETRAINER, {"mlm_head": 1, "nsp_head": 1}),
    "jax_pretraining": ("pretraining model_dir", saving.PRETRAINER, {"mlm_head": 1, "nsp_head": 1}),
    "finetuning": ("fine-tuning model_dir", saving.TASK_MODEL, {}),
    "converted": ("converted model dir", saving.PRETRAINER, {"mlm_head": 1, "nsp_head": 0}),
    "encoder_export": ("encoder export", saving.ENCODER, {}),
    "weights_file": ("weights file", saving.PRETRAINER, {"mlm_head": 1, "nsp_head": 1}),
}


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
  pretrainer, classifier = model_forms.models()
  want = model_forms.reference_outputs(pretrainer, classifier)
  folder = str(tmp_path_factory.mktemp("forms"))
  return model_forms.write_every_form(folder, pretrainer, classifier), want


def _encode(encoder):
  return np.asarray(encoder(model_forms.inputs(), training=False)["pooled_output"])


@pytest.mark.parametrize("form", sorted(EXPECTED))
def test_every_form_opens_to_the_written_models_outputs(forms, form):
  paths, want = forms
  stored = saving.open_model(paths[form])
  kind, holds, heads = EXPECTED[form]
  assert (stored.kind, stored.holds) == (kind, holds)
  assert stored.heads == {head: bool(trained) for head, trained in heads.items()}
  assert stored.config == model_forms.CONFIG
  assert stored.vocab_file and stored.do_lower_case is True or form == "weights_file"
  np.testing.assert_array_equal(_encode(stored.load_encoder()), want["pooled_output"])
  if holds == saving.PRETRAINER:
    pretrainer = stored.load_pretrainer(trained_heads_only=False)
    batch = {**model_forms.inputs(), "masked_lm_positions": model_forms.POSITIONS}
    logits = pretrainer(batch, training=False)
    np.testing.assert_array_equal(np.asarray(logits["mlm_logits"]), want["mlm_logits"])
    np.testing.assert_array_equal(np.asarray(logits["nsp_logits"]), want["nsp_logits"])
    # By default only trained heads are read: an import's own NSP head is left out.
    assert stored.load_pretrainer().use_nsp == heads["nsp_head"]
  if holds == saving.TASK_MODEL:
    model, info = stored.load_task_model()
    assert info == model_forms.TASK
    logits = np.asarray(model(model_forms.inputs(), training=False))
    np.testing.assert_array_equal(logits, want["task_logits"])


def test_variables_are_listed_by_path_whatever_the_file(forms):
  paths, _ = forms
  listed = {form: saving.open_model(path).variable_paths() for form, path in paths.items()}
  # A TensorFlow training checkpoint and the JAX loop's state list the same weights; the
  # optimizer, step and dropout generators' states are not weights.
  assert listed["tf_pretraining"] == listed["jax_pretraining"] == listed["weights_file"]
  assert listed["encoder_export"] == sorted(p for p in listed["weights_file"] if "_head/" not in p)
  assert any(p.startswith("classification_head/") for p in listed["finetuning"])


def test_the_steps_are_the_checkpoints(forms):
  paths, _ = forms
  assert saving.open_model(paths["tf_pretraining"]).step() == 5


def test_a_model_of_another_size_is_refused_naming_the_variable(forms):
  paths, _ = forms
  wider = model_forms.CONFIG.replace(hidden_size=32, intermediate_size=64)
  for form in ("tf_pretraining", "encoder_export"):
    stored = saving.open_model(paths[form])
    with pytest.raises(InputError) as caught:
      stored.load_encoder(wider)
    assert str(caught.value).startswith(f"{stored.weights}: variable ")
    assert "in the file but" in str(caught.value) and "\n" not in str(caught.value)
  # A Pretrainer without an NSP head reads the heads it has (phase 1 -> phase 2).
  phase2 = Pretrainer(Encoder(model_forms.CONFIG), use_nsp=False)
  phase2({**model_forms.inputs(), "masked_lm_positions": model_forms.POSITIONS})
  saving.open_model(paths["tf_pretraining"]).restore_pretrainer(phase2)


def test_what_is_not_a_model_is_refused_in_one_line(forms, tmp_path):
  paths, _ = forms
  (tmp_path / "saved").mkdir()
  (tmp_path / "saved" / "saved_model.pb").write_bytes(b"")
  (tmp_path / "started").mkdir()
  model_forms._model_files(str(tmp_path / "started"), os.path.join(paths["converted"], "vocab.txt"))
  (tmp_path / "notes.txt").write_text("x")
  cases = {
      tmp_path / "saved": "is a SavedModel export (for serving): give the model dir",
      tmp_path / "started": "has a model_config.json but no checkpoint yet",
      tmp_path / "notes.txt": "is a file, not a checkpoint; a model is",
      tmp_path / "nowhere": "is not a file or directory; a model is",
  }
  for path, says in cases.items():
    with pytest.raises(saving.ModelNotFoundError) as caught:
      saving.open_model(str(path))
    assert str(caught.value).startswith(f"{str(path)!r} {says}") and "\n" not in str(caught.value)
