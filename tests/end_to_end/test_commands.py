"""The console commands (`rbert-*`) and the old `python -m tools.X` paths, run as users run
them: the installed scripts in the interpreter's bin folder, from a folder that is not the
checkout, against `python -m recurrent_bert.<module>` with the same flags."""

import ast
import configparser
import os
import pathlib
import subprocess
import sys

import pytest

import recurrent_bert
from recurrent_bert import commands

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
BIN = pathlib.Path(sys.executable).parent


def _entry_points() -> dict:
  parser = configparser.ConfigParser()
  parser.read(REPO / "setup.cfg")
  lines = parser["options.entry_points"]["console_scripts"].strip().splitlines()
  return dict(tuple(part.strip() for part in line.split("=")) for line in lines)


def _runnable_modules() -> set:
  """Modules of the package that run `cli.run(...)` under `if __name__ == "__main__"`."""
  found = set()
  for path in (REPO / "recurrent_bert").rglob("*.py"):
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
      if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
        if "cli.run(" in ast.unparse(node):
          parts = list(path.relative_to(REPO).with_suffix("").parts)
          found.add(".".join(parts[:-1] if parts[-1] == "__main__" else parts))
  return found


def _run(args, cwd, env=None):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
  env.pop("PYTHONPATH", None)  # the installed package, not the checkout on the path
  return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_setup_cfg_installs_every_command_and_every_command_has_one():
  assert _entry_points() == {name: "recurrent_bert.commands:main" for name in commands.COMMANDS}
  # A process started as one of them counts as a command (a bad KERAS_BACKEND: exit 2).
  assert all(name.startswith(recurrent_bert._CONSOLE_PREFIX) for name in commands.COMMANDS)
  # Read from the sources, not from the table: a new command without a script fails here.
  assert set(commands.COMMANDS.values()) == _runnable_modules()


def test_every_old_tool_path_names_a_command():
  shims = {p.stem for p in (REPO / "tools").glob("*.py")} - {"__init__"}
  moved = {m.rpartition(".")[2] for m in commands.COMMANDS.values() if ".tools." in m}
  assert shims and shims <= moved  # tools added since (copy_configs) have no old path


def test_copy_configs_writes_the_checkouts_configs_and_keeps_a_full_folder(tmp_path):
  script = str(BIN / "rbert-copy-configs")
  result = _run([script, "--output_dir=configs"], tmp_path)
  assert result.returncode == 0, result.stderr
  copied = {p.relative_to(tmp_path / "configs"): p for p in (tmp_path / "configs").rglob("*.*")}
  checkout = {p.relative_to(REPO / "configs"): p for p in (REPO / "configs").rglob("*.*")}
  assert copied.keys() == checkout.keys() and len(copied) > 50
  assert all(copied[name].read_bytes() == checkout[name].read_bytes() for name in copied)
  (tmp_path / "configs" / "mine.flags").write_text("--learning_rate=1e-4\n")
  again = _run([script, "--output_dir=configs"], tmp_path)
  assert again.returncode == 2 and "--overwrite" in again.stderr
  assert (tmp_path / "configs" / "mine.flags").exists()
  replaced = _run([script, "--output_dir=configs", "--overwrite"], tmp_path)
  assert replaced.returncode == 0 and not (tmp_path / "configs" / "mine.flags").exists()


@pytest.mark.parametrize(
    "argv0, name",
    [
        ("/venv/bin/rbert-sweep", "rbert-sweep"),
        (r"C:\venv\Scripts\rbert-sweep.exe".replace("\\", "/"), "rbert-sweep"),
        ("rbert-sweep-script.py", "rbert-sweep"),
    ],
)
def test_script_name(argv0, name):
  assert commands.script_name(argv0) == name


def test_console_script_does_what_python_m_does(tmp_path):
  flags = ["--max_documents=4"]
  script = _run(
      [str(BIN / "rbert-builtin-corpus"), f"--output_file={tmp_path / 'a.txt'}", *flags], tmp_path
  )
  module = _run(
      [
          sys.executable,
          "-m",
          "recurrent_bert.tools.builtin_corpus",
          f"--output_file={tmp_path / 'b.txt'}",
          *flags,
      ],
      tmp_path,
  )
  assert script.returncode == module.returncode == 0, script.stderr + module.stderr
  assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()
  assert script.stdout.replace("a.txt", "b.txt") == module.stdout


def test_console_script_help_and_bad_input(tmp_path):
  help_text = _run([str(BIN / "rbert-build-vocab"), "--help"], tmp_path)
  assert help_text.returncode == 0
  assert "--vocab_size" in help_text.stdout and "Examples:" in help_text.stdout
  bad = _run([str(BIN / "rbert-build-vocab"), "--vocab_size=many"], tmp_path)
  assert bad.returncode == 2 and "Traceback" not in bad.stderr
  assert bad.stderr.strip().splitlines()[-1].startswith("error:") and "vocab_size" in bad.stderr
  backend = _run([str(BIN / "rbert-pretrain")], tmp_path, env={"KERAS_BACKEND": "nonsense"})
  assert backend.returncode == 2 and "KERAS_BACKEND=nonsense" in backend.stderr
  unknown = _run(
      [sys.executable, "-c", "from recurrent_bert import commands; commands.main()"], tmp_path
  )
  assert unknown.returncode == 2 and "is not a recurrent_bert command" in unknown.stderr


@pytest.mark.parametrize("how", ["module", "path"])
def test_old_tool_path_still_runs_and_says_where_it_moved(tmp_path, how):
  old = ["-m", "tools.builtin_corpus"] if how == "module" else ["tools/builtin_corpus.py"]
  output = tmp_path / "old.txt"
  result = _run([sys.executable, *old, f"--output_file={output}", "--max_documents=4"], REPO)
  assert result.returncode == 0, result.stderr
  first = result.stderr.splitlines()[0]
  assert "recurrent_bert.tools.builtin_corpus" in first and "rbert-builtin-corpus" in first
  new = _run(
      [
          sys.executable,
          "-m",
          "recurrent_bert.tools.builtin_corpus",
          f"--output_file={tmp_path / 'new.txt'}",
          "--max_documents=4",
      ],
      tmp_path,
  )
  assert output.read_bytes() == (tmp_path / "new.txt").read_bytes()
  bad = _run([sys.executable, *old, "--max_documents=x"], REPO)
  assert bad.returncode == 2 and "Traceback" not in bad.stderr
  assert new.returncode == 0
