"""The console commands an installed package puts on PATH, and the module each one runs.

`rbert-pretrain --help` is `python -m recurrent_bert.pretrain --help`: every entry point in
setup.cfg is `recurrent_bert.commands:main`, which runs the module `COMMANDS` names for the
script's own name as `__main__` (flags, --help, exit codes and all). One table: a command
added here and in setup.cfg (tests/end_to_end/test_commands.py checks that the two agree)
needs nothing else.
"""

import os
import runpy
import sys

# Console script -> the module it runs.
COMMANDS = {
    "rbert-demo": "recurrent_bert.demo",
    "rbert-pretrain": "recurrent_bert.pretrain",
    "rbert-finetune-glue": "recurrent_bert.finetune_glue",
    "rbert-finetune-squad": "recurrent_bert.finetune_squad",
    "rbert-finetune-tagging": "recurrent_bert.finetune_tagging",
    "rbert-finetune-multiple-choice": "recurrent_bert.finetune_multiple_choice",
    "rbert-extract-features": "recurrent_bert.extract_features",
    "rbert-export": "recurrent_bert.export",
    "rbert-summary": "recurrent_bert.summary",
    "rbert-smoke": "recurrent_bert.smoke",
    "rbert-builtin-corpus": "recurrent_bert.tools.builtin_corpus",
    "rbert-build-vocab": "recurrent_bert.tools.build_vocab",
    "rbert-tokenize-text": "recurrent_bert.tools.tokenize_text",
    "rbert-create-pretraining-data": "recurrent_bert.tools.create_pretraining_data",
    "rbert-make-sample-tasks": "recurrent_bert.tools.make_sample_tasks",
    "rbert-copy-configs": "recurrent_bert.tools.copy_configs",
    "rbert-convert-checkpoint": "recurrent_bert.tools.convert_checkpoint",
    "rbert-sweep": "recurrent_bert.tools.sweep",
    "rbert-recipe-pilot": "recurrent_bert.demo.recipe_pilot",
    "rbert-bad-input-campaign": "recurrent_bert.tools.bad_input_campaign",
}


def script_name(argv0: str) -> str:
  """The console script's name in argv[0] (a path; Windows adds .exe or -script.py)."""
  name = os.path.basename(argv0)
  for suffix in (".exe", "-script.py"):
    if name.endswith(suffix):
      name = name[: -len(suffix)]
  return name


def main() -> None:
  """The entry point of every console script: runs its module as `__main__`."""
  name = script_name(sys.argv[0])
  if name not in COMMANDS:
    print(f"error: {name} is not a recurrent_bert command ({', '.join(COMMANDS)})", file=sys.stderr)
    sys.exit(2)
  # alter_sys: the module is sys.modules["__main__"] while it runs, so its docstring is the
  # --help text and its flags are the command's own, as under `python -m`.
  runpy.run_module(COMMANDS[name], run_name="__main__", alter_sys=True)


def run_moved(old_path: str) -> None:
  """Runs the tool an old `tools/NAME.py` shim stands for, after saying where it moved.

  Args:
    old_path: the shim's file (`tools/NAME.py` of a checkout).
  """
  name = os.path.splitext(os.path.basename(old_path))[0]
  module = f"recurrent_bert.tools.{name}"
  script = next(s for s, m in COMMANDS.items() if m == module)
  print(
      f"note: tools.{name} moved to {module} (the command {script}); "
      "the old path goes in the next release",
      file=sys.stderr,
  )
  runpy.run_module(module, run_name="__main__", alter_sys=True)
