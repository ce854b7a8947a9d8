"""The demo's fine-tuning task: "which library (or file) is this passage from?"

The corpus is read as documents that keep their source: the library of each module for the
built-in corpus (docstrings of the installed Python), the file for your own text. The
documents are split into train / dev / test within each source, so that dev and test text
is never trained on; passages of consecutive sentences from the sources with the most text
make a balanced custom-task TSV folder for `finetune_glue --task=custom`, with the test
labels kept apart to score its test predictions.
"""

import dataclasses
import hashlib
import json
import os
import random
from typing import Dict, List, Optional, Sequence, Tuple

from recurrent_bert import io_utils
from recurrent_bert.data import builtin_corpus as bc
from recurrent_bert.errors import InputError


@dataclasses.dataclass
class Document:
  """One document of the corpus and where it comes from.

  Attributes:
    source: its library ("stdlib", "numpy", ...) or the name of its file: its class.
    sentences: its text, one sentence per item.
  """

  source: str
  sentences: List[str]


def builtin_documents(cache_dir: Optional[str], max_bytes: int = 0) -> List[Document]:
  """The built-in corpus, each document with its library ("stdlib", "numpy", ...).

  The extraction is builtin_corpus's own (its functions do the work, in the same order
  and with the same de-duplication as `builtin_corpus.iter_documents`, so without
  max_bytes the text is that of `ensure_builtin_corpus`); the library of each module is
  kept as the label of the fine-tuning task. With max_bytes every library contributes
  its first ~max_bytes / (number of libraries) bytes, so a small slice still holds every
  library. Cached (JSON lines) in cache_dir.

  Args:
    cache_dir: where the cache file goes (None: builtin_corpus's default cache dir).
    max_bytes: about how much text, spread evenly over the libraries; 0 for all of it.

  Returns:
    The documents with two sentences or more, library by library.
  """
  cache_dir = cache_dir or bc.default_cache_dir()
  key = bc._environment_key(max_bytes or None, None, bc.DEFAULT_PACKAGES)
  path = os.path.join(cache_dir, f"builtin_corpus_sources-{key}.jsonl")
  if os.path.isfile(path):
    with open(path, encoding="utf-8") as f:
      return [Document(**json.loads(line)) for line in f if line.strip()]
  roots = bc._site_roots(bc.DEFAULT_PACKAGES)
  budget = max_bytes / len(roots) if max_bytes else 0
  documents: List[Document] = []
  seen = set()
  for label, root in roots:
    size = 0
    for file_path in bc._iter_python_files(root, skip_site_packages=(label == "stdlib")):
      if budget and size >= budget:
        break
      try:
        with open(file_path, "rb") as f:
          docs = list(bc._docstrings(f.read().decode("utf-8")))
      except (SyntaxError, UnicodeDecodeError, ValueError, OSError, RecursionError):
        continue
      sentences: List[str] = []
      for doc in docs:
        doc_key = hashlib.blake2b(doc.encode("utf-8"), digest_size=12).digest()
        if doc_key in seen:
          continue
        seen.add(doc_key)
        for paragraph in bc.docstring_paragraphs(doc):
          sentences.extend(x for x in bc.split_sentences(paragraph) if bc._good_sentence(x))
      if len(sentences) >= 2:
        documents.append(Document(label, sentences))
        size += sum(len(x.encode("utf-8")) + 1 for x in sentences) + 1
  with io_utils.atomic_write(path) as f:
    for document in documents:
      f.write(json.dumps(dataclasses.asdict(document)) + "\n")
  return documents


def read_documents(path: str, source: str = "", max_bytes: int = 0) -> List[Document]:
  """The documents of one text file: one sentence per line, blank lines between them.

  Args:
    path: the file.
    source: the source given to every document.
    max_bytes: stop after the document that reaches about this much text; 0: never.

  Returns:
    The documents, in the file's order (runs of white space made single spaces: the
    task files are tab-separated).

  Raises:
    InputError: the file cannot be read as UTF-8 text.
  """
  documents: List[Document] = []
  current: List[str] = []
  size = 0
  for _, line in io_utils.read_lines_checked(path):
    line = " ".join(line.split())
    if line:
      current.append(line)
      size += len(line.encode("utf-8")) + 1
      continue
    if current:
      documents.append(Document(source, current))
      current = []
      if max_bytes and size >= max_bytes:
        return documents
  if current:
    documents.append(Document(source, current))
  return documents


def file_documents(paths: Sequence[str], max_bytes: int = 0) -> List[Document]:
  """The documents of your files, each labelled with its file: the task's classes.

  Args:
    paths: the text files.
    max_bytes: about how much text in all, spread evenly over the files; 0 for all.

  Returns:
    The documents, file by file; their source is the file's base name without its
    extension (the path under the files' common directory when base names repeat).
  """
  names = [os.path.splitext(os.path.basename(p))[0] for p in paths]
  if len(set(names)) < len(names):  # same base names in different directories
    names = [
        os.path.relpath(p, os.path.commonpath([os.path.abspath(q) for q in paths])) for p in paths
    ]
  budget = max_bytes // len(paths) if max_bytes else 0
  documents: List[Document] = []
  for path, name in zip(paths, names):
    documents.extend(read_documents(path, name, budget))
  return documents


def split_documents(
    documents: Sequence[Document], eval_fraction: float, seed: int
) -> Dict[str, List[Document]]:
  """Holds out two disjoint sets of documents, dev and test, per source (stratified).

  A source with fewer than 3 documents goes to train only. The train documents are
  shuffled, so that the first lines of the train file are a sample of every source.

  Args:
    documents: the corpus; documents of fewer than two sentences are dropped.
    eval_fraction: the fraction of each source's documents held out for dev, and again
      for test (at least one document each).
    seed: seeds the split.

  Returns:
    {"train": documents, "dev": documents, "test": documents}.

  Raises:
    InputError: too few documents to hold out dev and test ones.
  """
  rng = random.Random(seed)
  by_source: Dict[str, List[Document]] = {}
  for document in documents:
    if len(document.sentences) >= 2:
      by_source.setdefault(document.source, []).append(document)
  splits: Dict[str, List[Document]] = {"train": [], "dev": [], "test": []}
  for docs in by_source.values():
    docs = list(docs)
    rng.shuffle(docs)
    num_eval = max(1, int(round(eval_fraction * len(docs)))) if len(docs) >= 3 else 0
    splits["dev"] += docs[:num_eval]
    splits["test"] += docs[num_eval : 2 * num_eval]
    splits["train"] += docs[2 * num_eval :]
  rng.shuffle(splits["train"])
  if not splits["dev"] or len(splits["train"]) < 2:
    raise InputError(
        f"the corpus has {len(documents)} documents: too few to hold out dev and test "
        "documents (one sentence per line, blank lines between documents)"
    )
  return splits


def write_documents(directory: str, split: str, documents: Sequence[Document]) -> None:
  """Writes one split: <split>_documents.txt (the pretraining text format) and
  <split>_sources.txt (a document's source per line).

  Args:
    directory: where the two files go.
    split: "train", "dev" or "test".
    documents: the split's documents.
  """
  with io_utils.atomic_write(os.path.join(directory, f"{split}_documents.txt")) as f:
    for document in documents:
      f.write("\n".join(document.sentences) + "\n\n")
  io_utils.atomic_write_text(
      os.path.join(directory, f"{split}_sources.txt"), "".join(d.source + "\n" for d in documents)
  )


def load_split(directory: str, split: str) -> List[Document]:
  """Reads back what `write_documents` wrote.

  Args:
    directory: where the split's two files are.
    split: "train", "dev" or "test".

  Returns:
    The split's documents with their sources.

  Raises:
    InputError: the two files do not match.
  """
  documents = read_documents(os.path.join(directory, f"{split}_documents.txt"))
  with open(os.path.join(directory, f"{split}_sources.txt"), encoding="utf-8") as f:
    sources = [line.rstrip("\n") for line in f]
  if len(sources) != len(documents):
    raise InputError(
        f"{directory}: {split} has {len(documents)} documents but {len(sources)} sources"
    )
  return [Document(source, d.sentences) for source, d in zip(sources, documents)]


def passages(sentences: Sequence[str], min_words: int = 20, max_words: int = 40) -> List[str]:
  """Consecutive sentences joined into passages of about min_words..max_words words.

  Args:
    sentences: a document's sentences, in order.
    min_words: a passage ends once it has this many words.
    max_words: a passage never grows beyond this many (longer sentences are skipped).

  Returns:
    The passages; the last, shorter one only if it has min_words // 4 words or more.
  """
  out: List[str] = []
  current: List[str] = []
  words = 0
  for sentence in sentences:
    n = len(sentence.split())
    if n > max_words:
      continue
    if current and words + n > max_words:
      out.append(" ".join(current))
      current, words = [], 0
    current.append(sentence)
    words += n
    if words >= min_words:
      out.append(" ".join(current))
      current, words = [], 0
  if current and words >= min_words // 4:
    out.append(" ".join(current))
  return out


def choose_classes(splits: Dict[str, List[Document]], num_classes: int) -> List[str]:
  """The task's classes: sources with documents in every split, most sentences first.

  Args:
    splits: the documents of "train", "dev" and "test".
    num_classes: how many at most.

  Returns:
    The sources, the most train sentences first (ties by name).

  Raises:
    InputError: fewer than two sources qualify.
  """
  present = [{d.source for d in splits[s]} for s in ("train", "dev", "test")]
  sentences: Dict[str, int] = {}
  for document in splits["train"]:
    sentences[document.source] = sentences.get(document.source, 0) + len(document.sentences)
  candidates = [c for c in sentences if all(c in p for p in present)]
  candidates.sort(key=lambda c: (-sentences[c], c))
  if len(candidates) < 2:
    raise InputError(
        "the fine-tuning task asks which source a passage comes from: it needs at least "
        "two sources with 3+ documents each (with --input_files: two or more files, e.g. "
        "one file per book); found " + (", ".join(candidates) or "none")
    )
  return candidates[:num_classes]


def write_task(
    task_dir: str,
    splits: Dict[str, List[Document]],
    classes: Sequence[str],
    num_train: int,
    num_eval: int,
    seed: int,
) -> Dict:
  """Writes the custom-task folder: train.tsv, dev.tsv, test.tsv and test_labels.tsv.

  Every split has the same number of passages of each class (the smallest pool's, at
  most total / classes): train.tsv and dev.tsv as index, sentence, label; test.tsv
  without the label, which goes to test_labels.tsv (index, label).

  Args:
    task_dir: the folder (created).
    splits: the documents of "train", "dev" and "test".
    classes: the sources the task tells apart.
    num_train: train passages wanted.
    num_eval: dev passages wanted, and test passages.
    seed: seeds the choice and order of the passages.

  Returns:
    Per split: {"examples", "per_class", "documents"} (documents of the classes).

  Raises:
    InputError: a class has no passage in a split.
  """
  os.makedirs(task_dir, exist_ok=True)
  counts = {}
  for offset, (split, total) in enumerate(
      (("train", num_train), ("dev", num_eval), ("test", num_eval))
  ):
    rng = random.Random(seed + 1000 * (offset + 1))
    pools = {c: [] for c in classes}
    for document in splits[split]:
      if document.source in pools:
        pools[document.source].extend(passages(document.sentences))
    per_class = min([max(1, total // len(classes))] + [len(p) for p in pools.values()])
    if per_class < 1:
      empty = [c for c, p in pools.items() if not p]
      raise InputError(f"no {split} passages for {empty}: the corpus is too small")
    rows = [(text, c) for c in classes for text in rng.sample(pools[c], per_class)]
    rng.shuffle(rows)
    lines = ["index\tsentence" + ("" if split == "test" else "\tlabel")]
    for i, (text, label) in enumerate(rows):
      lines.append(f"{split}-{i}\t{text}" + ("" if split == "test" else f"\t{label}"))
    io_utils.atomic_write_text(os.path.join(task_dir, f"{split}.tsv"), "\n".join(lines) + "\n")
    if split == "test":
      labels = ["index\tlabel"] + [f"test-{i}\t{r[1]}" for i, r in enumerate(rows)]
      io_utils.atomic_write_text(
          os.path.join(task_dir, "test_labels.tsv"), "\n".join(labels) + "\n"
      )
    counts[split] = {
        "examples": len(rows),
        "per_class": per_class,
        "documents": sum(d.source in pools for d in splits[split]),
    }
  return counts


def read_tsv(path: str) -> List[Dict[str, str]]:
  """The rows of a task TSV file as {column: value}, by its header line."""
  with open(path, encoding="utf-8") as f:
    header = f.readline().rstrip("\n").split("\t")
    return [dict(zip(header, line.rstrip("\n").split("\t"))) for line in f if line.strip()]


def read_labels(labels_file: str) -> Dict[str, str]:
  """{index: label} of a labels TSV (the task's test_labels.tsv)."""
  return {row["index"]: row["label"] for row in read_tsv(labels_file)}


def accuracy_on_test(predictions_file: str, labels_file: str) -> Tuple[float, int]:
  """Accuracy of finetune_glue's test predictions against the held-out labels.

  Args:
    predictions_file: test_predictions.tsv of a fine-tuning model dir.
    labels_file: the task's test_labels.tsv.

  Returns:
    (accuracy, number of test examples).

  Raises:
    InputError: the predictions miss examples.
  """
  truth = read_labels(labels_file)
  predicted = {row["index"]: row["prediction"] for row in read_tsv(predictions_file)}
  missing = set(truth) - set(predicted)
  if missing:
    raise InputError(
        f"{predictions_file} lacks {len(missing)} test examples, e.g. {sorted(missing)[:3]}"
    )
  correct = sum(predicted[i] == label for i, label in truth.items())
  return correct / len(truth), len(truth)
