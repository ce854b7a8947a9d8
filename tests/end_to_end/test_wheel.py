"""The package as a user installs it: a wheel built from the checkout, installed into a
fresh virtual environment, runs README's walkthrough as written from a folder that is not
the checkout (after `rbert-copy-configs`, which puts the shipped flagfiles there).

The fresh environment gets nothing but the wheel. Its dependencies are the pinned ones of
the test environment (constraints.txt), reached through a .pth file rather than installed
again (2.6 GB); `pip check` then holds the wheel's own requirements against them, and the
test environment's editable install stays out of sight (a .pth file on a path a .pth file
adds is not read), so every `recurrent_bert` module comes from the wheel.
"""

import os
import pathlib
import subprocess
import sys
import sysconfig
import tarfile

import pytest

from tests.support.readme_text import REPO
from tests.support.readme_text import check_walkthrough
from tests.support.readme_text import env
from tests.support.readme_text import run_walkthrough

pytestmark = pytest.mark.slow(seconds=240)


def _run(args, **kwargs):
  result = subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)
  assert result.returncode == 0, " ".join(map(str, args)) + "\n" + result.stderr[-4000:]
  return result


def _checkout_files(destination: pathlib.Path) -> None:
  """The checkout's files as a clean clone has them (tracked, or new and not ignored)."""
  listed = _run(
      ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO
  ).stdout.split("\0")
  archive = destination.with_suffix(".tar")
  with tarfile.open(archive, "w") as tar:
    for name in filter(None, listed):
      if os.path.lexists(os.path.join(REPO, name)):
        tar.add(os.path.join(REPO, name), arcname=name, recursive=False)
  with tarfile.open(archive) as tar:
    tar.extractall(destination, filter="tar")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
  """(the wheel's venv, the folder the user works in)."""
  root = tmp_path_factory.mktemp("wheel")
  _checkout_files(root / "src")
  _run(
      [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
      + ["--wheel-dir", str(root / "dist"), str(root / "src")]
  )
  (wheel,) = (root / "dist").glob("recurrent_bert-*.whl")
  venv = root / "venv"
  _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
  python = venv / "bin" / "python"
  purelib = _run(
      [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
  ).stdout.strip()
  pathlib.Path(purelib, "pinned_dependencies.pth").write_text(
      sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8"
  )
  pip = [sys.executable, "-m", "pip", "--python", str(python)]
  _run(pip + ["install", "--quiet", "--no-deps", "--no-index", str(wheel)])
  _run(pip + ["check"])
  work = root / "work"
  work.mkdir()
  (work / ".venv").symlink_to(venv)  # README's commands say `.venv/bin/python`
  return venv, work


def _clean_env(**extra):
  environment = env(**extra)
  environment.pop("PYTHONPATH", None)
  return environment


def test_the_wheels_package_is_the_one_imported(installed):
  venv, work = installed
  found = _run(
      [".venv/bin/python", "-c", "import recurrent_bert.tools.sweep as m; print(m.__file__)"],
      cwd=work,
      env=_clean_env(),
  ).stdout.strip()
  assert os.path.realpath(found).startswith(str(venv.resolve()) + os.sep), found


def test_readme_walkthrough_runs_from_an_unrelated_folder(installed):
  venv, work = installed
  run_dir = work / "run"
  copy_configs = ".venv/bin/rbert-copy-configs --output_dir=configs\n"
  check_walkthrough(run_dir, run_walkthrough(work, run_dir, work / "cache", copy_configs))
  # Nothing was written into the installed package.
  assert not list(venv.rglob("vocab.txt"))
