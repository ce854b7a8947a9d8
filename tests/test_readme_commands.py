"""README.md is the manual: every command it shows exists with the flags it uses, `--help`
lists a command's own flags by group, and a tiny flagfile without its data names the
tool that makes it. (The walkthrough itself runs in test_readme.py.)"""

import os
import re

from tests.readme_text import README
from tests.readme_text import REPO
from tests.readme_text import commands
from tests.readme_text import finish
from tests.readme_text import run_module
from tests.readme_text import shell_blocks
from tests.readme_text import start_module


def _readme_commands():
  with open(README, encoding="utf-8") as f:
    text = f.read()
  found = []
  for block in shell_blocks(text):
    for line in commands(block):
      match = re.search(r"\.venv/bin/python (?:-m )?(\S+)(.*)", line)
      if match and not match.group(1).startswith("-"):
        # After a lone "--" come a pipeline's own options (Beam's), not the command's.
        found.append((match.group(1), match.group(2).split(" -- ")[0]))
  return found


def test_readme_commands_name_existing_commands_and_flags():
  """Every `.venv/bin/python -m X --flag ...` in README: X runs, and each flag is one of
  X's (checked against `X --helpfull` in a fresh process); flagfiles exist."""
  by_command = {}
  for module, rest in _readme_commands():
    module = module.replace("/", ".").removesuffix(".py")
    by_command.setdefault(module, set()).update(re.findall(r"\s--(?:no)?([a-z_0-9]+)", rest))
    for flagfile in re.findall(r"--flagfile=(configs/\S+)", rest):
      assert os.path.isfile(os.path.join(REPO, flagfile)), flagfile
  assert {
      "recurrent_bert.pretrain",
      "recurrent_bert.finetune_glue",
      "recurrent_bert.export",
      "tools.create_pretraining_data",
  } <= set(by_command)
  helps = {}
  for module in sorted(by_command):
    if module.startswith("benchmarks."):
      path = os.path.join(REPO, *module.split(".")) + ".py"
      assert os.path.isfile(path), module
    else:
      # All at once: each process spends its start-up importing TensorFlow.
      helps[module] = start_module(module, "--helpfull")
  try:
    for module, process in helps.items():
      result = finish(process)
      assert result.returncode in (0, 1), (module, result.stderr[-2000:])
      defined = set(re.findall(r"--(?:\[no\])?([a-z_0-9]+)", result.stdout))
      unknown = {flag for flag in by_command[module] if flag not in defined} - {"flagfile"}
      assert not unknown, f"README uses {sorted(unknown)} which {module} does not define"
  finally:
    for process in helps.values():
      if process.poll() is None:
        process.kill()
        process.communicate()


def test_help_lists_the_commands_own_flags_by_group():
  result = run_module("recurrent_bert.finetune_glue", "--help")
  assert result.returncode == 0, result.stderr[-2000:]
  out = result.stdout
  groups = re.findall(r"^([a-z][a-z ]+):$", out, re.M)
  assert groups[:5] == ["task and data", "model", "mode and output", "optimisation", "execution"]
  for flag in (
      "--mode",
      "--model_dir",
      "--learning_rate",
      "--init_checkpoint",
      "--task",
      "--distribution_strategy",
      "--run_dir",
  ):
    assert f"\n  {flag}\n" in out, flag
  assert "--test_srcdir" not in out and "--xla_" not in out  # not absl's or TF's


def test_flagfile_without_its_data_names_the_tool_that_makes_it(tmp_path):
  flagfile = f"--flagfile={REPO}/configs/pretrain/tiny_bert.flags"
  missing_vocab = run_module("recurrent_bert.pretrain", flagfile, f"--run_dir={tmp_path}")
  assert missing_vocab.returncode == 2 and "Traceback" not in missing_vocab.stderr
  line = missing_vocab.stderr.strip().splitlines()[-1]
  assert line.startswith(f"error: --vocab_file: '{tmp_path}/vocab.txt' does not exist")
  assert "tools.build_vocab" in line and f"--output_file={tmp_path}/vocab.txt" in line

  (tmp_path / "vocab.txt").write_text(
      "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n"
  )
  missing_data = run_module("recurrent_bert.pretrain", flagfile, f"--run_dir={tmp_path}")
  assert missing_data.returncode == 2 and "Traceback" not in missing_data.stderr
  line = missing_data.stderr.strip().splitlines()[-1]
  assert f"no file matches '{tmp_path}/tiny_data/*.tfrecord'" in line
  assert "tools.create_pretraining_data" in line and f"--output_dir={tmp_path}/tiny_data" in line
