"""The specification in docs/ and the references to it from code, tests and configs."""

import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(REPO, "docs", "SPEC.md")
# Where "SPEC §N" (or "SPEC section N", "SPEC §N-M") may be written.
SEARCHED = (
    "recurrent_bert",
    "tools",
    "tests",
    "benchmarks",
    "configs",
    "docs",
    "README.md",
    "Makefile",
)
REFERENCE = re.compile(r"SPEC (?:§|section )(\d+)(?:\s*[-–]\s*(\d+))?")


def _spec_sections():
  with open(SPEC, encoding="utf-8") as f:
    return {int(m.group(1)) for m in re.finditer(r"^## (\d+)\. \S", f.read(), re.M)}


def _references(repo=REPO):
  """(path:line, section number) for every reference in the searched files of `repo`."""
  paths = []
  for entry in SEARCHED:
    top = os.path.join(repo, entry)
    if os.path.isfile(top):
      paths.append(top)
    for root, dirs, files in os.walk(top):
      dirs[:] = [d for d in dirs if not d.startswith((".", "__pycache__"))]
      paths += [
          os.path.join(root, name)
          for name in files
          if name.endswith((".py", ".md", ".flags", ".json", ".txt"))
      ]
  found = []
  for path in sorted(paths):
    with open(path, encoding="utf-8") as f:
      for number, line in enumerate(f, 1):
        for m in REFERENCE.finditer(line):
          where = f"{os.path.relpath(path, repo)}:{number}"
          first, last = int(m.group(1)), int(m.group(2) or m.group(1))
          found += [(where, n) for n in range(first, last + 1)]
  return found


def test_spec_sections_are_numbered_one_to_n():
  sections = _spec_sections()
  assert sections == set(range(1, len(sections) + 1)), sorted(sections)


def test_every_spec_reference_names_an_existing_section():
  references = _references()
  assert len(references) > 20  # the pattern still finds the references it guards
  sections = _spec_sections()
  dangling = [f"{where}: SPEC §{n}" for where, n in references if n not in sections]
  assert not dangling, f"no such section in docs/SPEC.md: {dangling}"


@pytest.mark.parametrize("form", ["§{n}", "section {n}", "§2-{n}"])
def test_a_dangling_reference_would_be_found(form, tmp_path):
  (tmp_path / "configs").mkdir()
  # Built here, so this file holds no reference to a missing section itself.
  line = "SPEC " + form.format(n=len(_spec_sections()) + 1)
  (tmp_path / "configs" / "x.flags").write_text(f"# {line}\n", encoding="utf-8")
  assert len(_spec_sections()) + 1 in [n for _, n in _references(str(tmp_path))]
