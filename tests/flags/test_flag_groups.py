"""Every command's flags: defined once, without collisions, names and defaults unchanged.

Each command module is imported in a fresh process (the flags of two commands may share a
name: they never share a process) and its flags compared with SNAPSHOT
(tests/flags/flag_snapshot.py), the {command: {flag: default}} of the code before the flag
groups were gathered under recurrent_bert/flags/. Below the commands and flags/, no module
reads or defines flags.
"""

import ast
import json
import os
import subprocess
import sys

import pytest

from tests.flags.flag_snapshot import SNAPSHOT

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLAG_FREE_PACKAGES = ("layers", "models", "data", "training", "tasks", "convert")

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
