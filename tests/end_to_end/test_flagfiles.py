"""configs/finetune/*.flags against the papers' protocols, written out here independently
(SPEC §7 for GLUE, SQuAD and SwishRNN-BERT's SuperGLUE; BERT's §5.3, §5.4 Table 7 and
appendix A.3 for CoNLL-2003), and each through its command's own flag definitions and
validators."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(REPO, "configs", "finetune")

# SPEC §7, written out independently of configs/finetune:
# (flagfile, {flag: value}) for the BERT / TRANS-BLSTM / SwishRNN protocols.
SPEC_FINETUNE = {
    "glue_bert.flags": {"train_batch_size": "32", "num_train_epochs": "3"},
    "glue_trans_blstm.flags": {"train_batch_size": "32", "num_train_epochs": "3"},
    # BERT §4.4: SWAG for 3 epochs at 2e-5, batch 16.
    "swag_bert.flags": {
        "learning_rate": "2e-5",
        "train_batch_size": "16",
        "num_train_epochs": "3",
        "task": "swag",
    },
    "squad_v1_bert.flags": {
        "learning_rate": "5e-5",
        "train_batch_size": "32",
        "num_train_epochs": "3",
        "version": "1.1",
    },
    "squad_v1_trans_blstm.flags": {
        "learning_rate": "3e-5",
        "train_batch_size": "12",
        "num_train_epochs": "2",
        "version": "1.1",
    },
    "squad_v1_trans_blstm_decoder.flags": {
        "learning_rate": "3e-5",
        "train_batch_size": "12",
        "num_train_epochs": "2",
        "use_blstm_decoder": True,
    },
    **{
        f"swishrnn_{task}.flags": {
            "train_batch_size": "32",
            "warmup_steps": "1000",
            "max_train_steps": str(steps * 1000),
            "task": task,
        }
        for task, steps in (
            ("boolq", 50),
            ("cola", 50),
            ("mnli", 200),
            ("mrpc", 20),
            ("multirc", 50),
            ("qnli", 100),
            ("qqp", 150),
            ("rte", 20),
            ("sst2", 80),
            ("stsb", 30),
        )
    },
}

# Appendix A.3: batch {16, 32}, Adam lr {5e-5, 3e-5, 2e-5}, epochs {2, 3, 4}, dropout 0.1;
# §5.3: NER as one tagging run per sentence with document context, 128-piece windows.
A3_BATCH_SIZES = ("16", "32")
A3_LEARNING_RATES = (5e-5, 3e-5, 2e-5)
A3_EPOCHS = ("2", "3", "4")
PAPER = {
    "conll2003_bert.flags": {"max_seq_length": "128", "document_context": True},
    # Table 7's best feature-based row: concatenate the last four hidden layers.
    "conll2003_feature_based.flags": {
        "max_seq_length": "128",
        "document_context": True,
        "feature_based": True,
        "layer_mix": "concat_last_four",
    },
}

# Each command's flagfiles, by name prefix, and the flags a run needs beyond them.
COMMANDS = (
    (
        "recurrent_bert.finetune_glue",
        ("glue_", "swishrnn_"),
        ("--model_dir=/nonexistent", "--task=rte", "--data_dir=/nonexistent"),
    ),
    ("recurrent_bert.finetune_squad", ("squad_",), ("--model_dir=/nonexistent",)),
    ("recurrent_bert.finetune_tagging", ("conll2003_",), ("--model_dir=/nonexistent",)),
    (
        "recurrent_bert.finetune_multiple_choice",
        ("swag_",),
        ("--model_dir=/nonexistent", "--data_dir=/nonexistent"),
    ),
)


def flagfile_values(name):
  values = {}
  for line in open(os.path.join(CONFIGS, name), encoding="utf-8"):
    line = line.strip()
    if line.startswith("--"):
      key, _, value = line[2:].partition("=")
      values[key] = value if _ else True
  return values


@pytest.mark.parametrize("name", sorted(SPEC_FINETUNE))
def test_finetune_flagfiles_carry_the_papers_protocols(name):
  values = flagfile_values(name)
  for flag, expected in SPEC_FINETUNE[name].items():
    assert values.get(flag) == expected, (name, flag, values.get(flag))
  if name.startswith("swishrnn_"):  # its grid: {1e-5, 5e-6, 3e-6, 2e-6}
    assert float(values["learning_rate"]) in (1e-5, 5e-6, 3e-6, 2e-6)
  elif name.startswith("glue_"):  # BERT's grid: {5e-5, 4e-5, 3e-5, 2e-5}
    assert float(values["learning_rate"]) in (5e-5, 4e-5, 3e-5, 2e-5)


@pytest.mark.parametrize("name", sorted(PAPER))
def test_conll2003_flagfiles_carry_the_papers_protocol(name):
  values = flagfile_values(name)
  for flag, expected in PAPER[name].items():
    assert values.get(flag) == expected, (name, flag)
  assert values["train_batch_size"] in A3_BATCH_SIZES
  assert values["num_train_epochs"] in A3_EPOCHS
  if name == "conll2003_bert.flags":
    assert float(values["learning_rate"]) in A3_LEARNING_RATES
  else:  # the paper gives none: ours, stated in the flagfile (the BiLSTM starts from scratch)
    assert float(values["learning_rate"]) == 1e-3
    assert "feature_based" not in flagfile_values("conll2003_bert.flags")


def test_every_flagfile_belongs_to_a_command_and_covers_the_papers():
  names = sorted(os.listdir(CONFIGS))
  assert set(SPEC_FINETUNE) | set(PAPER) <= set(names)
  prefixes = tuple(prefix for _, command_prefixes, _ in COMMANDS for prefix in command_prefixes)
  assert [name for name in names if not name.startswith(prefixes)] == []


@pytest.mark.parametrize("module, prefixes, needed", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_flagfile_parses_and_validates(module, prefixes, needed):
  """Each flagfile through its entry point's own flag definitions and validators."""
  script = r"""
import importlib, sys
from absl import flags
importlib.import_module(sys.argv[1])
count = int(sys.argv[2])
needed, paths = sys.argv[3:3 + count], sys.argv[3 + count:]
for path in paths:
  flags.FLAGS.unparse_flags()
  flags.FLAGS(["prog", "--flagfile=" + path, *needed])
print("ok", len(paths))
"""
  files = [os.path.join(CONFIGS, n) for n in sorted(os.listdir(CONFIGS)) if n.startswith(prefixes)]
  assert files
  result = subprocess.run(
      [sys.executable, "-c", script, module, str(len(needed)), *needed, *files],
      cwd=REPO,
      capture_output=True,
      text=True,
      timeout=120,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO),
  )
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stdout.strip() == f"ok {len(files)}"
