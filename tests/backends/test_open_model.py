"""Every form of a model dir opens without TensorFlow, on this session's backend, and
exports to Hugging Face and keras-hub there.

A TensorFlow process writes one model every way the package does
(`tests/support/model_forms.py`) and computes its outputs. A process of this session's
backend in which importing TensorFlow fails then opens each form through
`saving.open_model`, and must give the same outputs; a form whose weights are only in a
TensorFlow checkpoint is refused in one line naming TensorFlow. The same process exports
the converted dir to Hugging Face safetensors and a keras-hub preset (no NSP head: the
import only initialised it) and is refused, in one line, the TF1 target.
"""

import json
import os

import numpy as np
import pytest

from tests.backends.support import BACKEND
from tests.backends.support import run_under_backend

pytestmark = pytest.mark.slow(seconds=30)

WRITE = """
import json
from tests.support import model_forms
pretrainer, classifier = model_forms.models()
outputs.update(model_forms.reference_outputs(pretrainer, classifier))
paths = model_forms.write_every_form({folder!r}, pretrainer, classifier)
with open({folder!r} + "/paths.json", "w") as f:
  json.dump(paths, f)
"""

OPEN_WITHOUT_TENSORFLOW = """
import json, sys
sys.modules["tensorflow"] = None  # importing TensorFlow now fails
import keras
from recurrent_bert import saving
from recurrent_bert.errors import InputError
from recurrent_bert.convert.exporters import export_model_dir
from tests.support import model_forms

convert = keras.ops.convert_to_numpy
paths = json.load(open({folder!r} + "/paths.json"))
batch = model_forms.inputs()
refused = []
for form, path in sorted(paths.items()):
  try:
    stored = saving.open_model(path)
    encoder = stored.load_encoder()
    if stored.holds == saving.PRETRAINER:
      stored.load_pretrainer(trained_heads_only=False)
  except InputError as e:
    refused.append(form + ": " + str(e))
    continue
  outputs[form + "/pooled_output"] = convert(encoder(batch, training=False)["pooled_output"])
  if stored.holds == saving.TASK_MODEL:
    model, _ = stored.load_task_model()
    outputs[form + "/task_logits"] = convert(model(batch, training=False))
reports = {{}}
for target in ("hf", "keras_hub", "tf1"):
  try:
    reports[target] = export_model_dir(paths["converted"], target, {folder!r} + "/" + target)
  except InputError as e:
    reports[target] = str(e)
with open({folder!r} + "/refused.json", "w") as f:
  json.dump({{"refused": refused, "reports": reports}}, f)
assert "tensorflow" not in [m.split(".")[0] for m in sys.modules if sys.modules[m]]
"""


def test_every_form_opens_and_exports_without_tensorflow(tmp_path):
  folder = str(tmp_path)
  want = run_under_backend(WRITE.format(folder=folder))
  got = run_under_backend(OPEN_WITHOUT_TENSORFLOW.format(folder=folder), backend=BACKEND)
  with open(os.path.join(folder, "refused.json"), encoding="utf-8") as f:
    said = json.load(f)
  with open(os.path.join(folder, "paths.json"), encoding="utf-8") as f:
    paths = json.load(f)
  # Only the TensorFlow training checkpoint, with no export of its step, needs TensorFlow.
  assert len(said["refused"]) == 1 and said["refused"][0].startswith("tf_pretraining: ")
  assert "needs TensorFlow to read (not installed)" in said["refused"][0]
  opened = sorted(set(paths) - {"tf_pretraining"})
  for form in opened:
    np.testing.assert_allclose(
        got[form + "/pooled_output"], want["pooled_output"], atol=1e-5, err_msg=form
    )
  np.testing.assert_allclose(got["finetuning/task_logits"], want["task_logits"], atol=1e-5)

  reports = said["reports"]
  assert reports["hf"]["heads"] == ["mlm"] and reports["hf"]["heads_left_out"] == ["nsp"]
  with open(os.path.join(folder, "hf", "config.json"), encoding="utf-8") as f:
    assert json.load(f)["architectures"] == ["BertForMaskedLM"]
  assert reports["keras_hub"]["heads"] == ["mlm"]
  assert reports["tf1"].endswith(
      "TensorFlow is not installed; install tensorflow, or export "
      "with --target=hf or --target=keras_hub"
  )
