"""Every command's flags: defined once, without collisions, names and defaults unchanged.

Each command module is imported in a fresh process (the flags of two commands may share a
name: they never share a process). SNAPSHOT is the {command: {flag: default}} of the code
before the flag groups were gathered under recurrent_bert/flags/, written out as a literal
(a regression check, not derived from the code it checks); recurrent_bert.tools.builtin_corpus was
`python -m recurrent_bert.data.builtin_corpus` then. Below the commands and flags/, no
module reads or defines flags.
"""

import ast
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLAG_FREE_PACKAGES = ("layers", "models", "data", "training", "tasks", "convert")

SNAPSHOT = {
    "recurrent_bert.demo.__main__": {
        "backend": "tensorflow",
        "batch_size": 16,
        "cache_dir": None,
        "corpus_max_bytes": 0,
        "data_only": False,
        "dupe_factor": 1,
        "eval_documents_fraction": 0.08,
        "eval_sequences": 1024,
        "finetune_batch_size": 16,
        "finetune_learning_rates": ["1e-3", "3e-3"],
        "finetune_seeds": ["1", "2", "3", "4"],
        "finetune_steps": 300,
        "input_files": ["builtin"],
        "jobs": 2,
        "adam_beta2": 0.999,
        "adam_epsilon": 1e-06,
        "clip_norm": 1.0,
        "learning_rate": 0.002,
        "max_predictions_per_seq": None,
        "models": ["bert", "bert_rab", "trans_blstm_small_2", "swishrnn"],
        "num_workers": 2,
        "parallel_pretraining": True,
        "pretrain_seeds": ["1", "2", "3"],
        "pretrain_steps": 800,
        "prepared_data": False,
        "pretraining_only": False,
        "query": None,
        "redo": [],
        "seed": 12345,
        "seq_length": 64,
        "size": "tiny",
        "task_classes": 4,
        "task_eval_examples": 600,
        "task_train_examples": 6000,
        "tokenizers": [],
        "vocab_max_lines": 60000,
        "vocab_size": 8000,
        "vocabulary": "wordpiece",
        "warmup_steps": None,
        "work_dir": "demo_output",
    },
    "recurrent_bert.export": {
        "do_lower_case": None,
        "export_dir": None,
        "max_seq_length": None,
        "model_dir": None,
        "vocab_file": None,
    },
    "recurrent_bert.extract_features": {
        "batch_size": 32,
        "distribution_strategy": "default",
        "do_lower_case": None,
        "init_checkpoint": None,
        "input_file": None,
        "jit_compile": False,
        "layers": ["-1", "-2", "-3", "-4"],
        "log_steps": 100,
        "max_seq_length": 128,
        "mixed_precision": "float32",
        "num_cpu_devices": 1,
        "num_shards": 1,
        "output_file": None,
        "output_format": "jsonl",
        "run_dir": None,
        "tpu": None,
        "vocab_file": None,
    },
    "recurrent_bert.finetune_glue": {
        "adam_beta1": 0.9,
        "adam_beta2": 0.999,
        "adam_epsilon": 1e-06,
        "cache_dir": None,
        "checkpoint": None,
        "clip_norm": 1.0,
        "data_dir": None,
        "decay_power": 1.0,
        "decay_schedule": "linear",
        "distribution_strategy": "default",
        "do_lower_case": None,
        "end_learning_rate": 0.0,
        "eval_batch_size": 32,
        "feature_based": False,
        "eval_every_steps": 0,
        "gradient_accumulation_steps": 1,
        "init_checkpoint": None,
        "jit_compile": False,
        "keep_checkpoint_max": 2,
        "label_list": None,
        "learning_rate": 2e-05,
        "log_steps": 100,
        "layer_mix": "last",
        "max_seq_length": 128,
        "max_train_steps": None,
        "mixed_precision": "float32",
        "mode": "train_and_eval",
        "model_config": None,
        "model_dir": None,
        "num_cpu_devices": 1,
        "num_train_epochs": 3.0,
        "optimizer": "adamw",
        "predict_splits": None,
        "run_dir": None,
        "save_checkpoints_steps": 1000,
        "seed": 0,
        "skip_bad_rows": False,
        "shuffle_buffer_size": 100000,
        "steps_per_loop": 100,
        "task": None,
        "tfds": False,
        "tfds_data_dir": None,
        "tfds_download": False,
        "tpu": None,
        "train_batch_size": 32,
        "vocab_file": None,
        "warmup_proportion": 0.1,
        "warmup_steps": None,
        "weight_decay": 0.01,
    },
    "recurrent_bert.finetune_multiple_choice": {
        "adam_beta1": 0.9,
        "adam_beta2": 0.999,
        "adam_epsilon": 1e-06,
        "cache_dir": None,
        "checkpoint": None,
        "clip_norm": 1.0,
        "data_dir": None,
        "decay_power": 1.0,
        "decay_schedule": "linear",
        "distribution_strategy": "default",
        "do_lower_case": None,
        "end_learning_rate": 0.0,
        "eval_batch_size": 32,
        "eval_every_steps": 0,
        "eval_file": None,
        "feature_based": False,
        "gradient_accumulation_steps": 1,
        "init_checkpoint": None,
        "jit_compile": False,
        "keep_checkpoint_max": 2,
        "layer_mix": "last",
        "learning_rate": 2e-05,
        "log_steps": 100,
        "max_seq_length": 128,
        "max_train_steps": None,
        "mixed_precision": "float32",
        "mode": "train_and_eval",
        "model_config": None,
        "model_dir": None,
        "num_cpu_devices": 1,
        "num_train_epochs": 3.0,
        "optimizer": "adamw",
        "predict_file": None,
        "run_dir": None,
        "save_checkpoints_steps": 1000,
        "seed": 0,
        "shuffle_buffer_size": 100000,
        "skip_bad_rows": False,
        "steps_per_loop": 100,
        "task": "swag",
        "tfds": False,
        "tfds_data_dir": None,
        "tfds_download": False,
        "tpu": None,
        "train_batch_size": 16,
        "train_file": None,
        "vocab_file": None,
        "warmup_proportion": 0.1,
        "warmup_steps": None,
        "weight_decay": 0.01,
    },
    "recurrent_bert.finetune_tagging": {
        "adam_beta1": 0.9,
        "adam_beta2": 0.999,
        "adam_epsilon": 1e-06,
        "cache_dir": None,
        "checkpoint": None,
        "clip_norm": 1.0,
        "decay_power": 1.0,
        "decay_schedule": "linear",
        "distribution_strategy": "default",
        "do_lower_case": None,
        "doc_stride": 64,
        "document_context": True,
        "end_learning_rate": 0.0,
        "eval_batch_size": 32,
        "eval_every_steps": 0,
        "eval_file": None,
        "feature_based": False,
        "file_format": "conll",
        "gradient_accumulation_steps": 1,
        "init_checkpoint": None,
        "jit_compile": False,
        "keep_checkpoint_max": 2,
        "label_list": None,
        "layer_mix": "last",
        "learning_rate": 5e-05,
        "log_steps": 100,
        "max_seq_length": 128,
        "max_train_steps": None,
        "mixed_precision": "float32",
        "mode": "train_and_eval",
        "model_config": None,
        "model_dir": None,
        "num_cpu_devices": 1,
        "num_train_epochs": 3.0,
        "optimizer": "adamw",
        "predict_file": None,
        "run_dir": None,
        "save_checkpoints_steps": 1000,
        "seed": 0,
        "shuffle_buffer_size": 100000,
        "skip_bad_rows": False,
        "steps_per_loop": 100,
        "tag_column": -1,
        "tfds": False,
        "tfds_data_dir": None,
        "tfds_download": False,
        "tpu": None,
        "train_batch_size": 32,
        "train_file": None,
        "vocab_file": None,
        "warmup_proportion": 0.1,
        "warmup_steps": None,
        "weight_decay": 0.01,
    },
    "recurrent_bert.finetune_squad": {
        "adam_beta1": 0.9,
        "adam_beta2": 0.999,
        "adam_epsilon": 1e-06,
        "cache_dir": None,
        "checkpoint": None,
        "clip_norm": 1.0,
        "decay_power": 1.0,
        "decay_schedule": "linear",
        "distribution_strategy": "default",
        "do_lower_case": None,
        "doc_stride": 128,
        "end_learning_rate": 0.0,
        "eval_batch_size": 32,
        "feature_based": False,
        "eval_every_steps": 0,
        "gradient_accumulation_steps": 1,
        "init_checkpoint": None,
        "jit_compile": False,
        "keep_checkpoint_max": 2,
        "learning_rate": 5e-05,
        "log_steps": 100,
        "max_answer_length": 30,
        "max_query_length": 64,
        "layer_mix": "last",
        "max_seq_length": 384,
        "max_train_steps": None,
        "mixed_precision": "float32",
        "mode": "train_and_eval",
        "model_config": None,
        "model_dir": None,
        "n_best_size": 20,
        "null_score_diff_threshold": 0.0,
        "num_cpu_devices": 1,
        "num_train_epochs": 3.0,
        "optimizer": "adamw",
        "predict_file": None,
        "run_dir": None,
        "save_checkpoints_steps": 1000,
        "seed": 0,
        "skip_bad_rows": False,
        "shuffle_buffer_size": 100000,
        "steps_per_loop": 100,
        "tfds": False,
        "tfds_data_dir": None,
        "tfds_download": False,
        "tpu": None,
        "train_batch_size": 32,
        "train_file": None,
        "use_blstm_decoder": False,
        "version": "1.1",
        "vocab_file": None,
        "warmup_proportion": 0.1,
        "warmup_steps": None,
        "weight_decay": 0.01,
    },
    "recurrent_bert.pretrain": {
        "adam_beta1": 0.9,
        "adam_beta2": 0.999,
        "adam_epsilon": 1e-06,
        "clip_norm": 1.0,
        "decay_power": 1.0,
        "decay_schedule": "linear",
        "distribution_strategy": "default",
        "do_lower_case": True,
        "do_whole_word_mask": False,
        "dynamic_masking": False,
        "end_learning_rate": 0.0,
        "gradient_accumulation_steps": 1,
        "init_checkpoint": None,
        "input_files": None,
        "jit_compile": False,
        "keep_checkpoint_max": 5,
        "learning_rate": 0.0001,
        "log_steps": 100,
        "mask_token_prob": 0.8,
        "masked_lm_prob": 0.15,
        "max_predictions_per_seq": 20,
        "max_seq_length": 128,
        "mixed_precision": "float32",
        "model_config": "bert_base",
        "model_dir": None,
        "num_cpu_devices": 1,
        "num_train_steps": 1000000,
        "optimizer": "adamw",
        "random_token_prob": 0.1,
        "run_dir": None,
        "save_checkpoints_steps": 1000,
        "seed": 0,
        "shuffle_buffer_size": 10000,
        "skip_bad_records": False,
        "steps_per_loop": 100,
        "tpu": None,
        "train_batch_size": 256,
        "use_nsp": True,
        "vocab_file": None,
        "vocab_size": None,
        "warmup_steps": 10000,
        "weight_decay": 0.01,
        # Held-out evaluation (added with it).
        "mode": None,
        "eval_input_files": None,
        "eval_batch_size": None,
        "eval_every_steps": 0,
        "max_eval_steps": 0,
    },
    "recurrent_bert.smoke": {
        "batch_size": 2,
        "families": [
            "bert",
            "bert_rab",
            "trans_blstm_1",
            "trans_blstm_2",
            "trans_blstm_small_1",
            "trans_blstm_small_2",
            "swishrnn",
            "blstm",
        ],
        "seq_length": 32,
        "sizes": ["tiny", "mini", "base", "large"],
    },
    "recurrent_bert.summary": {
        "all": False,
        "config": None,
        "layers": False,
        "preset": None,
        "write_configs": None,
    },
    "recurrent_bert.tools.bad_input_campaign": {
        "commands": [
            "pretrain",
            "finetune_glue",
            "finetune_squad",
            "finetune_tagging",
            "finetune_multiple_choice",
            "extract_features",
            "export",
            "summary",
            "smoke",
            "create_pretraining_data",
            "build_vocab",
            "tokenize_text",
            "convert_checkpoint",
            "builtin_corpus",
            "sweep",
        ],
        "flags": None,
        "hand_cases": True,
        "memory_limit_mb": 6000,
        "output_json": None,
        "parallel": 1,
        "repeat_shared_flags": False,
        "timeout": 60.0,
        "work_dir": None,
    },
    "recurrent_bert.tools.build_vocab": {
        "builtin_max_bytes": 0,
        "cache_dir": None,
        "character_coverage": 1.0,
        "do_lower_case": True,
        "input_files": None,
        "max_lines": 0,
        "max_token_length": 50,
        "max_unique_chars": 1000,
        "min_count": 1,
        "output_file": None,
        "tokenizer": "wordpiece",
        "vocab_size": 30522,
    },
    "recurrent_bert.tools.builtin_corpus": {
        "max_bytes": 0,
        "max_documents": 0,
        "output_file": None,
    },
    "recurrent_bert.tools.convert_checkpoint": {
        "allow_gelu_approximation": False,
        "bert_config_file": None,
        "direction": "import",
        "do_lower_case": None,
        "input": None,
        "output_dir": None,
        "overwrite": False,
        "seed": 0,
        "source": None,
        "target": None,
        "target_config": None,
        "vocab_file": None,
    },
    "recurrent_bert.tools.create_pretraining_data": {
        "beam_runner": "DirectRunner",
        "builtin_max_bytes": 0,
        "cache_dir": None,
        "chunk_bytes": 1048576,
        "do_lower_case": True,
        "do_whole_word_mask": False,
        "dupe_factor": 10,
        "dynamic_masking": False,
        "input_files": None,
        "mask_token_prob": 0.8,
        "masked_lm_prob": 0.15,
        "max_predictions_per_seq": 20,
        "max_seq_length": 128,
        "num_output_shards": 1,
        "num_workers": 1,
        "output_dir": None,
        "output_files": None,
        "progress": True,
        "random_seed": 12345,
        "random_token_prob": 0.1,
        "runner": "local",
        "short_seq_prob": 0.1,
        "use_nsp": True,
        "vocab_file": None,
    },
    "recurrent_bert.tools.make_sample_tasks": {
        "num_dev": 100,
        "num_train": 400,
        "output_dir": None,
        "seed": 0,
    },
    "recurrent_bert.tools.sweep": {
        "dry_run": False,
        "entry_flagfile": None,
        "entry_flags": [],
        "glue_flags": [],
        "learning_rates": None,
        "log_tail_lines": 15,
        "models": None,
        "output_dir": None,
        "parallel": 1,
        "seeds": ["0", "1", "2"],
        "squad_flags": [],
        "tasks": None,
    },
    "recurrent_bert.demo.recipe_pilot": {
        "backend": None,
        "jobs": 4,
        "recipes": ["2e-3:0.1", "1e-3:0.1", "1e-3:0.25", "5e-4:0.25"],
        "seeds": ["0", "1"],
        "size": "mini",
        "steps": 400,
        "work_dir": None,
    },
    "recurrent_bert.tools.tokenize_text": {
        "batch_size": 1024,
        "do_lower_case": True,
        "input_file": None,
        "output": "pieces",
        "output_file": None,
        "vocab_file": None,
    },
}

# Imports the module, then prints {flag: default} of the flags the project's modules
# defined. A command that still defines its flags when run rather than on import
# (define_flags() under __main__) has them defined by that call.
_DUMP_FLAGS = r"""
import importlib, json, sys
from absl import flags
module = importlib.import_module(sys.argv[1])

def own_flags():
  return {flag.name: flag.default
          for name, defined in flags.FLAGS.flags_by_module_dict().items()
          if name.startswith(("recurrent_bert", "tools")) for flag in defined}

found = own_flags()
if not found and hasattr(module, "define_flags"):
  module.define_flags()
  found = own_flags()
print(json.dumps(found))
"""


def _run_python(*args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO)
  return subprocess.run(
      [sys.executable, "-c", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
  )


@pytest.mark.parametrize("command", sorted(SNAPSHOT))
def test_command_defines_its_flags_once_with_unchanged_names_and_defaults(command):
  result = _run_python(_DUMP_FLAGS, command)
  assert result.returncode == 0, result.stderr[-3000:]  # DuplicateFlagError included
  defined = json.loads(result.stdout.strip().splitlines()[-1])
  expected = SNAPSHOT[command]
  assert sorted(set(defined) - set(expected)) == [], "new flags"
  assert sorted(set(expected) - set(defined)) == [], "flags gone"
  changed = {
      name: (expected[name], defined[name]) for name in expected if defined[name] != expected[name]
  }
  assert changed == {}, "defaults changed (was, now)"


def test_flag_groups_define_nothing_on_import():
  modules = sorted(
      name[:-3]
      for name in os.listdir(os.path.join(REPO, "recurrent_bert", "flags"))
      if name.endswith(".py")
  )
  script = r"""
import importlib, sys
from absl import flags
for name in sys.argv[1:]:
  importlib.import_module("recurrent_bert.flags." + name)
print(sorted(flag.name for module, defined in flags.FLAGS.flags_by_module_dict().items()
             if module.startswith("recurrent_bert") for flag in defined))
"""
  result = _run_python(script, *modules)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip() == "[]"


def _flag_uses(path):
  """Lines of `path` that read FLAGS, import absl.flags or define or check a flag."""
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), path)
  uses = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Name) and node.id == "FLAGS":
      uses.append(node.lineno)
    elif isinstance(node, ast.Attribute) and (
        node.attr == "FLAGS"
        or node.attr.startswith(
            ("DEFINE", "register_validator", "register_multi_flags_validator", "mark_flag")
        )
    ):
      uses.append(node.lineno)
    elif (
        isinstance(node, ast.ImportFrom)
        and node.module
        and (
            node.module.startswith(("absl.flags", "recurrent_bert.flags"))
            or (node.module == "absl" and any(a.name == "flags" for a in node.names))
            or (node.module == "recurrent_bert" and any(a.name == "flags" for a in node.names))
        )
    ):
      uses.append(node.lineno)
    elif isinstance(node, ast.Import) and any(
        a.name.startswith(("absl.flags", "recurrent_bert.flags")) for a in node.names
    ):
      uses.append(node.lineno)
  return uses


def test_no_flags_below_the_commands():
  offenders = []
  for package in FLAG_FREE_PACKAGES:
    for folder, _, files in os.walk(os.path.join(REPO, "recurrent_bert", package)):
      for name in sorted(files):
        if name.endswith(".py"):
          path = os.path.join(folder, name)
          offenders += [f"{os.path.relpath(path, REPO)}:{line}" for line in _flag_uses(path)]
  assert offenders == []


def test_the_static_check_sees_flag_uses(tmp_path):
  path = tmp_path / "module.py"
  path.write_text(
      "from absl import flags\nFLAGS = flags.FLAGS\nflags.DEFINE_string('x', None, 'x')\n",
      encoding="utf-8",
  )
  assert sorted(_flag_uses(str(path))) == [1, 2, 2, 3]
