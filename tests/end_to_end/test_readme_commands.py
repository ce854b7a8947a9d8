"""README.md and the pages of docs/ are the manual: every command they show exists with the
flags it uses, every relative link leads to a file and heading that exist, README stays
short and lists every console command, `--help` lists a command's own flags by group, and
a tiny flagfile without its data names the tool that makes it. (The walkthrough itself runs
in test_readme.py.)"""

import os
import re

import pytest

from recurrent_bert.commands import COMMANDS
from tests.support.readme_text import REPO
from tests.support.readme_text import anchors
from tests.support.readme_text import commands
from tests.support.readme_text import doc_section
from tests.support.readme_text import finish
from tests.support.readme_text import manual_pages
from tests.support.readme_text import read_page
from tests.support.readme_text import run_module
from tests.support.readme_text import shell_blocks
from tests.support.readme_text import start_module

pytestmark = pytest.mark.slow(seconds=40)

README_MAX_LINES = 250


def _manual_commands():
  """(page, X, the rest of the line) for every `.venv/bin/python [-m] X ...` of the manual's
  shell blocks."""
  found = []
  for page in manual_pages():
    for block in shell_blocks(read_page(page)):
      for line in commands(block):
        match = re.search(r"\.venv/bin/python (?:-m )?(\S+)(.*)", line)
        if match and not match.group(1).startswith("-"):
          # After a lone "--" come a pipeline's own options (Beam's), not the command's.
          found.append((page, match.group(1), match.group(2).split(" -- ")[0]))
  return found


def test_manual_commands_name_existing_commands_and_flags():
  """Every `.venv/bin/python -m X --flag ...` in README and docs/: X runs, and each flag is
  one of X's (checked against `X --helpfull` in a fresh process); flagfiles exist."""
  by_command = {}  # module -> flag -> the pages that use it
  for page, module, rest in _manual_commands():
    module = module.replace("/", ".").removesuffix(".py")
    flags = by_command.setdefault(module, {})
    for flag in re.findall(r"\s--(?:no)?([a-z_0-9]+)", rest):
      flags.setdefault(flag, set()).add(page)
    for flagfile in re.findall(r"--flagfile=(configs/\S+)", rest):
      assert os.path.isfile(os.path.join(REPO, flagfile)), (page, flagfile)
  assert {
      "recurrent_bert.pretrain",
      "recurrent_bert.finetune_glue",
      "recurrent_bert.export",
      "recurrent_bert.tools.create_pretraining_data",
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
      unknown = {
          flag: sorted(pages)
          for flag, pages in by_command[module].items()
          if flag not in defined and flag != "flagfile"
      }
      assert not unknown, f"{module} does not define these flags (used in): {unknown}"
  finally:
    for process in helps.values():
      if process.poll() is None:
        process.kill()
        process.communicate()


def _broken_links(page: str) -> list:
  """The relative links of `page` (a path under REPO, or absolute) whose file does not
  exist, or whose #anchor is no heading of it. Links inside code are not links."""
  text = read_page(page)
  prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
  prose = re.sub(r"`[^`]*`", "", prose)
  broken = []
  for target in re.findall(r"\]\(([^)\s]+)\)", prose):
    if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
      continue
    path, _, anchor = target.partition("#")
    where = (
        os.path.join(REPO, page) if not path else os.path.join(REPO, os.path.dirname(page), path)
    )
    if not os.path.exists(where):
      broken.append(f"{page}: {target} (no such file)")
    elif anchor and where.endswith(".md") and anchor not in anchors(read_page(where)):
      broken.append(f"{page}: {target} (no such heading)")
  return broken


def test_manual_links_lead_to_existing_files_and_headings():
  assert not [link for page in manual_pages() for link in _broken_links(page)]


def test_a_broken_link_would_be_found(tmp_path):
  (tmp_path / "other.md").write_text("# Other\n\n## It's here: `x`\n", encoding="utf-8")
  (tmp_path / "page.md").write_text(
      "# Page\n\n[ok](other.md#its-here-x) [self](#page) [web](https://example.com/x)\n"
      "`[code](nowhere.md)` [gone](nowhere.md) [wrong](other.md#missing) [self](#none)\n"
      "```sh\n# [block](nowhere.md)\n```\n",
      encoding="utf-8",
  )
  assert _broken_links(str(tmp_path / "page.md")) == [
      f"{tmp_path}/page.md: nowhere.md (no such file)",
      f"{tmp_path}/page.md: other.md#missing (no such heading)",
      f"{tmp_path}/page.md: #none (no such heading)",
  ]


def test_readme_is_short():
  lines = read_page("README.md").count("\n")
  assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the rest belongs in docs/"


def test_readme_links_every_manual_page():
  section = doc_section("README.md", "Documentation")
  missing = [page for page in manual_pages()[1:] if f"]({page})" not in section]
  assert not missing, f"README's Documentation section does not link {missing}"


def test_readme_commands_table_is_the_console_commands():
  """README's Commands table: each console script with the module it runs, all of them."""
  rows = re.findall(
      r"^\| `(rbert-[a-z-]+)` \| `([a-z_.]+)` \|", doc_section("README.md", "Commands"), re.M
  )
  assert dict(rows) == COMMANDS and len(rows) == len(COMMANDS)


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
  assert (
      "recurrent_bert.tools.build_vocab" in line and f"--output_file={tmp_path}/vocab.txt" in line
  )

  (tmp_path / "vocab.txt").write_text(
      "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n"
  )
  missing_data = run_module("recurrent_bert.pretrain", flagfile, f"--run_dir={tmp_path}")
  assert missing_data.returncode == 2 and "Traceback" not in missing_data.stderr
  line = missing_data.stderr.strip().splitlines()[-1]
  assert f"no file matches '{tmp_path}/tiny_data/*.tfrecord'" in line
  assert (
      "recurrent_bert.tools.create_pretraining_data" in line
      and f"--output_dir={tmp_path}/tiny_data" in line
  )
