"""A real English corpus with no download: the docstrings of the installed Python.

The standard library and the installed dependencies (TensorFlow, Keras, NumPy, ...) carry
many megabytes of edited English prose in their docstrings. This module extracts them with
`ast` (nothing is imported or executed), one module per document, drops code (doctest
`>>>`/`...` lines, indented example blocks, reST directives, lines that look like code),
splits the prose into sentences and writes the standard pretraining text format: one
sentence per line, a blank line between documents.

The output depends only on the files installed (walked in sorted order) and the options, so
it is deterministic for a given environment. `--input_files=builtin` in the data tools means
this corpus, built once into a cache directory (atomically) and reused; `python -m
recurrent_bert.tools.builtin_corpus --output_file=corpus.txt` writes it to a file of your choice.
"""

import ast
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import sysconfig
from typing import Iterator, List, Optional, Sequence, Tuple
import warnings

from recurrent_bert import io_utils
from recurrent_bert.errors import InputError

BUILTIN_NAMES = ("builtin", "builtin:", "@builtin")
# Bumped whenever extraction changes, so stale caches are rebuilt.
_FORMAT_VERSION = 1
# The direct dependencies first, then other documented libraries commonly installed with
# them; packages that are not installed are skipped.
DEFAULT_PACKAGES = (
    "tensorflow",
    "keras",
    "numpy",
    "keras_hub",
    "absl",
    "tensorflow_text",
    "tensorflow_datasets",
    "matplotlib",
    "tqdm",
    "psutil",
    "google",
    "h5py",
    "pyarrow",
    "huggingface_hub",
    "PIL",
    "fontTools",
    "pip",
    "setuptools",
    "pygments",
    "requests",
    "urllib3",
    "_pytest",
    "click",
    "rich",
    "pyparsing",
    "etils",
    "scipy",
    "pandas",
    "sklearn",
    "torch",
    "jax",
)
_SKIPPED_DIRS = frozenset(
    {
        "test",
        "tests",
        "testing",
        "idlelib",
        "lib2to3",
        "__pycache__",
        "site-packages",
        "dist-packages",
        "turtledemo",
        "_vendor",
        "vendored",
        "third_party",
        "include",
    }
)

# Sentence ends: . ! ? (optionally closing quotes/brackets) then space and a capital,
# digit, quote or bracket. Abbreviations below are re-joined afterwards.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z0-9\"'(\[`])")
_ABBREVIATIONS = re.compile(
    r"(?:\b(?:e\.g|i\.e|etc|vs|cf|Mr|Mrs|Dr|St|No|Fig|approx|resp|incl|viz|al)\.|\b[A-Z]\.)$"
)
_DIRECTIVE = re.compile(r"^\s*(\.\.\s|:[a-zA-Z_ ]+:\s*$|[-=~^*#+`]{3,}\s*$)")
_SECTION_HEADER = re.compile(
    r"^\s*(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples?|Example usage|"
    r"Usage|Notes?|See Also|References|Attributes|Methods|Call arguments|Input shape|"
    r"Output shape|Reference|Warning|Todo|Properties)\s*:?\s*$",
    re.IGNORECASE,
)
_CODE_START = re.compile(
    r"^\s*(>>>|\.\.\.|\$ |#|@|def |class |import |from \S+ import|return\b|raise |if .*:$|"
    r"for .*:$|while .*:$|with .*:$|try:|except|elif |else:|print\(|assert |lambda\b|"
    r"[\w.\[\]'\"]+\s*[+\-*/]?=\s*\S|[\w.]+\(.*\)\s*[;:]?$|[\[{(]|[\]})]|<)"
)


def _site_roots(package_names: Sequence[str]) -> List[Tuple[str, str]]:
  """(label, directory) of the stdlib and each installed package, without importing them."""
  roots = [("stdlib", sysconfig.get_paths()["stdlib"])]
  for name in package_names:
    try:
      spec = importlib.util.find_spec(name)  # top-level: locates, does not execute
    except (ImportError, ValueError):
      spec = None
    if spec is None or not spec.submodule_search_locations:
      continue
    for location in sorted(spec.submodule_search_locations):
      roots.append((name, location))
  return roots


def _iter_python_files(root: str, skip_site_packages: bool) -> Iterator[str]:
  for directory, subdirs, files in os.walk(root):
    subdirs[:] = sorted(
        d
        for d in subdirs
        if d not in _SKIPPED_DIRS
        and not d.startswith(".")
        and not (skip_site_packages and d.startswith("site-packages"))
    )
    for name in sorted(files):
      if name.endswith(".py") and not name.startswith("test_") and not name.endswith("_test.py"):
        yield os.path.join(directory, name)


def _docstrings(source: str) -> Iterator[str]:
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # SyntaxWarnings of old escape sequences
    tree = ast.parse(source)
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      doc = ast.get_docstring(node, clean=True)
      if doc:
        yield doc


def _looks_like_prose(line: str) -> bool:
  stripped = line.strip()
  if not stripped or _CODE_START.match(stripped) or _DIRECTIVE.match(stripped):
    return False
  letters = sum(c.isalpha() for c in stripped)
  symbols = sum(c in "{}[]()<>=;_|\\*/$%#@^~`" for c in stripped)
  return letters >= 0.6 * len(stripped) and symbols <= 0.08 * len(stripped) + 1


def docstring_paragraphs(doc: str) -> List[str]:
  """Prose paragraphs of one cleaned docstring (code, doctests and markup removed)."""
  paragraphs: List[str] = []
  current: List[str] = []
  in_block = False  # inside an indented block after "::" or an "Example:" header
  for raw in doc.splitlines():
    if not raw.strip():
      if current:
        paragraphs.append(" ".join(current))
        current = []
      continue
    indent = len(raw) - len(raw.lstrip())
    line = raw.strip()
    if in_block and indent > 0:
      continue
    in_block = False
    if _SECTION_HEADER.match(line):
      if current:
        paragraphs.append(" ".join(current))
        current = []
      in_block = line.lower().startswith(("example", "usage"))
      continue
    if line.endswith("::"):
      line = line[:-1]
      in_block = True
    if indent >= 4 and not current:
      continue  # an indented block of its own: usually code or a literal
    if not _looks_like_prose(line):
      if current:
        paragraphs.append(" ".join(current))
        current = []
      continue
    # "name: description" argument lines keep only the description.
    match = re.match(r"^[\w*]+(\s*\([^)]*\))?\s*:\s+(.*)$", line)
    if match and not current:
      line = match.group(2)
    current.append(line)
  if current:
    paragraphs.append(" ".join(current))
  return paragraphs


def split_sentences(paragraph: str) -> List[str]:
  """Regex sentence splitter with an abbreviation guard."""
  paragraph = re.sub(r"\s+", " ", paragraph).strip()
  if not paragraph:
    return []
  pieces = _SENTENCE_END.split(paragraph)
  sentences: List[str] = []
  for piece in pieces:
    if sentences and _ABBREVIATIONS.search(sentences[-1]):
      sentences[-1] = sentences[-1] + " " + piece
    else:
      sentences.append(piece)
  return [s.strip() for s in sentences if s.strip()]


def _good_sentence(sentence: str) -> bool:
  words = sentence.split()
  return (
      3 <= len(words) <= 120
      and sentence[0].isalnum()
      and sum(c.isalpha() for c in sentence) >= 0.6 * len(sentence)
  )


def iter_documents(package_names: Sequence[str] = DEFAULT_PACKAGES) -> Iterator[List[str]]:
  """Yields one document (list of sentences) per Python module with enough prose.

  Identical docstrings (re-exported or overriding methods) are kept once.
  """
  seen = set()
  for label, root in _site_roots(package_names):
    for path in _iter_python_files(root, skip_site_packages=(label == "stdlib")):
      try:
        with open(path, "rb") as f:
          source = f.read()
        docs = list(_docstrings(source.decode("utf-8")))
      except (SyntaxError, UnicodeDecodeError, ValueError, OSError, RecursionError):
        continue
      sentences: List[str] = []
      for doc in docs:
        key = hashlib.blake2b(doc.encode("utf-8"), digest_size=12).digest()
        if key in seen:
          continue
        seen.add(key)
        for paragraph in docstring_paragraphs(doc):
          sentences.extend(s for s in split_sentences(paragraph) if _good_sentence(s))
      if len(sentences) >= 2:
        yield sentences


def write_corpus(
    output_file: str,
    max_bytes: Optional[int] = None,
    max_documents: Optional[int] = None,
    package_names: Sequence[str] = DEFAULT_PACKAGES,
) -> dict:
  """Writes the corpus atomically; stops after max_bytes / max_documents (whole documents).

  Returns:
    {"documents", "sentences", "bytes"} of what was written.
  """
  documents = sentences = size = 0
  with io_utils.atomic_write(output_file, "w") as f:
    for document in iter_documents(package_names):
      text = "\n".join(document) + "\n\n"
      f.write(text)
      documents += 1
      sentences += len(document)
      size += len(text.encode("utf-8"))
      if (max_bytes and size >= max_bytes) or (max_documents and documents >= max_documents):
        break
  return {"documents": documents, "sentences": sentences, "bytes": size}


def _environment_key(max_bytes, max_documents, package_names) -> str:
  parts = [f"v{_FORMAT_VERSION}", sys.version, str(max_bytes), str(max_documents)]
  for name in package_names:
    try:
      parts.append(f"{name}={importlib.metadata.version(name.replace('_', '-'))}")
    except importlib.metadata.PackageNotFoundError:
      parts.append(f"{name}=?")
  return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def default_cache_dir() -> str:
  return os.environ.get(
      "RECURRENT_BERT_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "recurrent_bert")
  )


def ensure_builtin_corpus(
    cache_dir: Optional[str] = None,
    max_bytes: Optional[int] = None,
    max_documents: Optional[int] = None,
    package_names: Sequence[str] = DEFAULT_PACKAGES,
) -> str:
  """Returns the path of the built-in corpus, building it into cache_dir if needed."""
  cache_dir = cache_dir or default_cache_dir()
  key = _environment_key(max_bytes, max_documents, package_names)
  path = os.path.join(cache_dir, f"builtin_corpus-{key}.txt")
  if not os.path.isfile(path):
    write_corpus(
        path, max_bytes=max_bytes, max_documents=max_documents, package_names=package_names
    )
  return path


def is_builtin(name: str) -> bool:
  return name.strip().lower() in BUILTIN_NAMES


def resolve_input_files(
    patterns: Sequence[str],
    flag_name: str = "input_files",
    cache_dir: Optional[str] = None,
    max_bytes: Optional[int] = None,
) -> List[str]:
  """Expands files/globs (io_utils.expand_input_patterns), `builtin` meaning this corpus."""
  entries = [p.strip() for entry in patterns for p in str(entry).split(",") if p.strip()]
  files: List[str] = []
  for entry in entries:
    if is_builtin(entry):
      files.append(ensure_builtin_corpus(cache_dir, max_bytes=max_bytes))
    else:
      files.extend(f for f in io_utils.expand_input_patterns([entry], flag_name) if f not in files)
  if not files:
    raise InputError(f"--{flag_name}: no input files given")
  return files
