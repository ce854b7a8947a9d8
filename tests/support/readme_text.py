"""The manual, README.md and the pages of docs/, read as the tests read it: its sections,
shell blocks, command lines, headings and links, and the commands run as it runs them (from
the repository root, in a fresh process)."""

import json
import os
import re
import subprocess
import sys

from tests.support import forkserver

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(REPO, "README.md")
DOCS = os.path.join(REPO, "docs")
# docs/ pages that are not the manual: the specification is checked by test_docs.py.
NOT_MANUAL = {"SPEC.md"}


def manual_pages() -> list:
  """README.md and every docs/*.md page but the specification, relative to the repository
  root: read from the folder, so a new page is checked without a list to update."""
  pages = sorted(name for name in os.listdir(DOCS) if name.endswith(".md"))
  return ["README.md"] + [f"docs/{name}" for name in pages if name not in NOT_MANUAL]


def read_page(page: str) -> str:
  """The text of `page`, a path relative to the repository root (or absolute)."""
  with open(os.path.join(REPO, page), encoding="utf-8") as f:
    return f.read()


def env(**extra):
  """The test process's environment with TensorFlow's start-up logs quiet, plus `extra`."""
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **extra)


def _prose_lines(markdown: str):
  """(line, heading level or 0) for each line, fenced code counted as level 0: a `# comment`
  in a shell block is not a heading."""
  fenced = False
  for line in markdown.splitlines(keepends=True):
    if line.startswith("```"):
      fenced = not fenced
    match = None if fenced else re.match(r"(#{1,6}) ", line)
    yield line, len(match.group(1)) if match else 0


def _title(heading_line: str) -> str:
  return heading_line.lstrip("#").strip()


def headings(markdown: str) -> list:
  """The titles of the page's headings, in order."""
  return [_title(line) for line, level in _prose_lines(markdown) if level]


def anchors(markdown: str) -> set:
  """The #anchors GitHub gives the page's headings: lowercase, punctuation other than hyphens
  and underscores dropped, spaces to hyphens; a repeated one gets -1, -2, ..."""
  found = set()
  for title in headings(markdown):
    base = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
    anchor, n = base, 0
    while anchor in found:
      n += 1
      anchor = f"{base}-{n}"
    found.add(anchor)
  return found


def doc_section(page: str, title: str) -> str:
  """The text under the heading `title` of `page` (README.md or docs/NAME.md), up to the
  next heading of the same or a higher level: a section keeps its subsections."""
  lines, level = [], 0
  for line, line_level in _prose_lines(read_page(page)):
    if level and line_level and line_level <= level:
      break
    if level:
      lines.append(line)
    elif line_level and _title(line) == title:
      level = line_level
  assert level, f"{page} has no heading '{title}'"
  return "".join(lines)


def readme_section(title: str) -> str:
  """`doc_section` of README.md."""
  return doc_section("README.md", title)


def shell_blocks(markdown: str) -> list:
  return re.findall(r"^```sh\n(.*?)^```", markdown, re.S | re.M)


def commands(block: str) -> list:
  """The block's command lines, continuation lines joined (comments dropped)."""
  joined = block.replace("\\\n", " ")
  return [
      line.strip()
      for line in joined.splitlines()
      if line.strip() and not line.lstrip().startswith("#")
  ]


def start_module(*args, **extra_env) -> subprocess.Popen:
  """`python -m args...` started from the repository root, its output captured as text
  (a child of tests/support/forkserver.py, where TensorFlow is imported once)."""
  return forkserver.start([sys.executable, "-m", *args], REPO, env(**extra_env))


def finish(process: subprocess.Popen, timeout: float = 600) -> subprocess.CompletedProcess:
  """Waits for a `start_module` process; killed if it is still running after `timeout` s."""
  try:
    stdout, stderr = process.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    process.kill()
    process.communicate()
    raise
  return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_module(*args, **extra_env) -> subprocess.CompletedProcess:
  """`python -m args...` from the repository root, run to its end."""
  return finish(start_module(*args, **extra_env))


# Documented flags that make the walkthrough CI-sized, appended per command.
TINY_FLAGS = {
    "recurrent_bert.tools.build_vocab": "--builtin_max_bytes=300000 --vocab_size=2000",
    "recurrent_bert.tools.create_pretraining_data": "--builtin_max_bytes=300000 --dupe_factor=1",
    "recurrent_bert.pretrain": (
        "--num_train_steps=6 --warmup_steps=1 --train_batch_size=8 "
        "--steps_per_loop=3 --log_steps=3 --save_checkpoints_steps=3"
    ),
    "recurrent_bert.tools.make_sample_tasks": "--num_train=48 --num_dev=16",
    "recurrent_bert.finetune_glue": "--max_train_steps=4 --steps_per_loop=2 --log_steps=2",
    "recurrent_bert.finetune_squad": "--max_train_steps=4 --steps_per_loop=2 --log_steps=2",
}


def tiny(block: str) -> str:
  """The block with TINY_FLAGS appended to the first line of each matching command."""
  lines = block.replace("\\\n", " ").splitlines()
  for i, line in enumerate(lines):
    match = re.match(r"\s*\.venv/bin/python -m (\S+)", line)
    if match and match.group(1) in TINY_FLAGS:
      lines[i] = line.rstrip() + " " + TINY_FLAGS[match.group(1)]
  return "\n".join(lines) + "\n"


def run_walkthrough(cwd, run_dir, cache_dir, prelude: str = "") -> subprocess.CompletedProcess:
  """README's walkthrough, CI-sized (`tiny`), run by bash from `cwd` after `prelude`."""
  (block,) = shell_blocks(doc_section("README.md", "Walkthrough: raw text to a served model"))
  environment = env(RUN=str(run_dir), RECURRENT_BERT_CACHE=str(cache_dir))
  # As a user runs it: the package `.venv/bin/python` has installed, nothing put on the path.
  environment.pop("PYTHONPATH", None)
  result = subprocess.run(
      ["bash", "-c", "set -euo pipefail\n" + prelude + tiny(block)],
      cwd=cwd,
      capture_output=True,
      text=True,
      timeout=1200,
      env=environment,
  )
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
  return result


def check_walkthrough(run_dir, result: subprocess.CompletedProcess) -> None:
  """What the walkthrough promises: the served answers, the model dirs' files."""
  served = result.stdout.strip().splitlines()[-2:]
  assert re.fullmatch(r"\[b'(entailment|not_entailment)'\]", served[0]), served
  assert re.fullmatch(r"\[b'.*'\]", served[1]), served
  pretraining = run_dir / "models" / "tiny_bert"
  for name in (
      "model_config.json",
      "vocab.txt",
      "tokenizer.json",
      "metrics.jsonl",
      "encoder/encoder.index",
      "encoder/tokenizer.json",
  ):
    assert (pretraining / name).exists(), name
  info = json.loads((run_dir / "finetune" / "rte" / "task_info.json").read_text())
  assert info["max_seq_length"] == 64 and info["text_pair"] is True
  squad = json.loads((run_dir / "finetune" / "squad" / "task_info.json").read_text())
  assert (squad["doc_stride"], squad["max_query_length"]) == (32, 16)
