r"""The whole reproduction, end to end, in one command (`make demo`).

  python -m recurrent_bert.demo [--work_dir=demo_output] [--models=bert,swishrnn]
      [--input_files='my_corpus/*.txt'] [--pretrain_steps=2000] [--size=mini] ...

Stages, each run by the project's own entry points (subprocesses, one log file each):

  corpus         the built-in corpus (docstrings of the installed Python, each module
                 labelled with its library) or --input_files (each document labelled with
                 its file); documents are split into train / dev / test per source. Dev and
                 test documents are never trained on: not in pretraining, not in fine-tuning.
  vocab          a WordPiece vocabulary learned from the train documents (tools.build_vocab)
  pretrain_data  MLM + NSP TFRecords of the train documents (tools.create_pretraining_data)
  task           the fine-tuning task "which library (or file) is this passage from?":
                 passages of consecutive sentences, balanced over the --task_classes
                 sources with the most text; train / dev / test from the three document
                 splits, as a custom-task TSV folder (test labels kept apart)
  pretrain       every model on the same records, batch, steps and seed, hence the same
                 tokens (python -m recurrent_bert.pretrain)
  finetune       every model x every seed (python -m recurrent_bert.finetune_glue
                 --task=custom); test accuracy from its test predictions and the held-out
                 labels
  export         the best run by dev accuracy -> raw-text SavedModel (recurrent_bert.export)
  query          the SavedModel classifies raw text in a fresh process that imports only
                 tensorflow and tensorflow_text
  report         report/report.md (table per model), report/mlm_loss.png (MLM training
                 loss curves), report/tensorboard/ (event files), report/results.json

Restarting: a finished stage leaves <work_dir>/stages/<stage>.json (written last,
atomically) and is reused by the next run; an interrupted pretraining or fine-tuning run
resumes from the checkpoints in its model dir. The settings that shape the outputs are
recorded in <work_dir>/demo_settings.json: re-running with different ones stops with the
difference named (use another --work_dir). --models and --finetune_seeds may change
between runs: new ones are trained, the report covers the ones asked for.
"""

import dataclasses
import hashlib
import json
import os
import queue
import random
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
import traceback
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from absl import app
from absl import flags

from recurrent_bert import cli
from recurrent_bert import config as config_lib
from recurrent_bert import model_dir as layout
from recurrent_bert import io_utils
from recurrent_bert.demo_report import display_name, family_of, format_duration

FLAGS = flags.FLAGS
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before any TensorFlow import

DEFAULT_FAMILIES = ("bert", "bert_rab", "trans_blstm_small_2", "trans_blstm_2", "swishrnn")

def define_flags() -> None:
  """The demo's flags (defined by `main`, not on import, so that tests and other tools can
  import this module beside entry points whose flags share names)."""
  flags.DEFINE_string("work_dir", "demo_output", "Where everything goes (created; re-running "
                      "with the same --work_dir reuses finished stages).")
  flags.DEFINE_list("input_files", ["builtin"], "Your corpus instead of the built-in one: "
                    "text files or globs, one sentence per line, a blank line between "
                    "documents. `builtin` = the docstrings of the installed Python.")
  flags.DEFINE_string("cache_dir", None, "Where the built-in corpus is built once (default "
                      "$RECURRENT_BERT_CACHE or ~/.cache/recurrent_bert).")
  flags.DEFINE_integer("corpus_max_bytes", 0, "Use only the first ~N bytes of the corpus "
                       "(whole documents); 0 = all of it.")
  flags.DEFINE_list("models", list(DEFAULT_FAMILIES), "Model families (" +
                    ", ".join(config_lib.FAMILIES) + ") or full preset names.")
  flags.DEFINE_enum("size", "mini", list(config_lib.SIZES), "Preset size of every family.")
  flags.DEFINE_integer("vocab_size", 8000, "WordPiece vocabulary size.")
  flags.DEFINE_integer("vocab_max_lines", 60000, "Learn the vocabulary from the first N "
                       "lines of the (shuffled) train documents; 0 = all (the learner is "
                       "slow: ~1.5 min for the whole built-in corpus).")
  flags.DEFINE_integer("seq_length", 64, "Tokens per sequence, pretraining and fine-tuning.")
  flags.DEFINE_integer("max_predictions_per_seq", None,
                       "Masked positions per sequence (default: 15.6% of --seq_length, "
                       "BERT's 20 of 128).")
  flags.DEFINE_integer("dupe_factor", 1, "Passes over the corpus with fresh masks.")
  flags.DEFINE_integer("batch_size", 16, "Pretraining batch (sequences per step).")
  flags.DEFINE_integer("pretrain_steps", 300, "Pretraining steps, the same for every model.")
  flags.DEFINE_float("learning_rate", 1e-3, "Pretraining peak learning rate.")
  flags.DEFINE_integer("warmup_steps", None, "Pretraining warmup (default: 10% of steps).")
  flags.DEFINE_list("finetune_seeds", ["1", "2", "3"], "One fine-tuning run per seed.")
  flags.DEFINE_integer("finetune_steps", 100, "Fine-tuning steps per run.")
  flags.DEFINE_integer("finetune_batch_size", 16, "Fine-tuning batch.")
  flags.DEFINE_float("finetune_learning_rate", 2e-4, "Fine-tuning peak learning rate.")
  flags.DEFINE_integer("task_classes", 4, "Sources (libraries, or your files) the task "
                       "tells apart: the ones with the most text.")
  flags.DEFINE_integer("task_train_examples", 6000, "Passages in train.tsv (balanced).")
  flags.DEFINE_integer("task_eval_examples", 600, "Passages in dev.tsv and in test.tsv.")
  flags.DEFINE_float("eval_documents_fraction", 0.08,
                     "Fraction of the documents held out for dev, and again for test.")
  flags.DEFINE_integer("seed", 12345, "Seed of the document split, the task passages and the "
                       "pretraining data.")
  flags.DEFINE_integer("jobs", 2, "Fine-tuning runs at a time (pretraining always runs one "
                       "model at a time so that its step times are comparable).")
  flags.DEFINE_integer("num_workers", 2, "Worker processes of the pretraining-data tool.")
  flags.DEFINE_list("redo", [], "Stages to run again although finished, e.g. "
                    "pretrain:bert_mini (its model dir is deleted first) or report; later "
                    "stages are not redone unless named too. Pretraining and fine-tuning are "
                    "seeded, so a redone stage repeats its numbers; only its timing changes.")
  flags.DEFINE_multi_string("query", None, "Your own raw-text query for the exported model "
                            "(repeatable; default: passages of held-out test documents).")

  for _name in ("vocab_size", "seq_length", "dupe_factor", "batch_size", "pretrain_steps",
                "finetune_steps", "finetune_batch_size", "task_train_examples",
                "task_eval_examples", "jobs", "num_workers"):
    flags.register_validator(_name, lambda v: v >= 1, f"--{_name} must be >= 1")
  flags.register_validator("task_classes", lambda v: v >= 2, "--task_classes must be >= 2")
  flags.register_validator("corpus_max_bytes", lambda v: v >= 0, "--corpus_max_bytes >= 0")
  flags.register_validator("vocab_max_lines", lambda v: v >= 0, "--vocab_max_lines >= 0")
  flags.register_validator("eval_documents_fraction", lambda v: 0 < v < 0.5,
                           "--eval_documents_fraction must be in (0, 0.5)")


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS_FILE = "demo_settings.json"
_ABSL_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] ")
# TensorFlow start-up chatter, never echoed (it stays in the log files).
_NOISE = re.compile(r"oneDNN|cuda|cuInit|absl::InitializeLog|AVX|TF_ENABLE_ONEDNN_OPTS|"
                    r"cpu_feature_guard|rebuild TensorFlow")


class DemoError(Exception):
  """A stage failed: the message names the stage and its log file."""


def say(message: str = "") -> None:
  print(message, flush=True)


# ------------------------------------------------------------------------- settings


@dataclasses.dataclass
class Settings:
  """The flags, resolved; `fingerprint()` is what must not change within a work_dir."""
  work_dir: str
  input_files: List[str]
  cache_dir: Optional[str]
  corpus_max_bytes: int
  presets: List[str]
  size: str
  vocab_size: int
  vocab_max_lines: int
  seq_length: int
  max_predictions_per_seq: int
  dupe_factor: int
  batch_size: int
  pretrain_steps: int
  learning_rate: float
  warmup_steps: int
  finetune_seeds: List[int]
  finetune_steps: int
  finetune_batch_size: int
  finetune_learning_rate: float
  task_train_examples: int
  task_eval_examples: int
  eval_documents_fraction: float
  seed: int
  jobs: int = 1
  num_workers: int = 2
  task_classes: int = 4
  queries: Optional[List[str]] = None
  redo: List[str] = dataclasses.field(default_factory=list)

  def fingerprint(self) -> Dict:
    """Settings that shape the stage outputs (the models and seeds may change)."""
    skip = {"work_dir", "presets", "finetune_seeds", "jobs", "num_workers", "queries",
            "cache_dir", "size", "redo"}
    return {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}

  def path(self, *parts: str) -> str:
    return os.path.join(self.work_dir, *parts)


def preset_name(model: str, size: str) -> str:
  """--models entry -> preset name: a family gets --size, a preset stays as it is."""
  if model in config_lib.FAMILIES:
    return f"{model}_{size}"
  if model in config_lib.PRESETS:
    return model
  raise app.UsageError(f"--models: unknown model {model!r}; give families "
                       f"({', '.join(config_lib.FAMILIES)}) or preset names")


def settings_from_flags() -> Settings:
  presets = []
  for model in FLAGS.models:
    name = preset_name(model.strip(), FLAGS.size)
    if name not in presets:
      presets.append(name)
  if not presets:
    raise app.UsageError("--models: give at least one model")
  try:
    seeds = sorted({int(s) for s in FLAGS.finetune_seeds})
  except ValueError:
    raise app.UsageError(f"--finetune_seeds: integers expected, got {FLAGS.finetune_seeds}")
  if not seeds:
    raise app.UsageError("--finetune_seeds: give at least one seed")
  max_predictions = FLAGS.max_predictions_per_seq or max(1, round(FLAGS.seq_length * 0.15625))
  if max_predictions > FLAGS.seq_length:
    raise app.UsageError("--max_predictions_per_seq must be <= --seq_length")
  warmup = (FLAGS.warmup_steps if FLAGS.warmup_steps is not None
            else FLAGS.pretrain_steps // 10)
  if not 0 <= warmup < FLAGS.pretrain_steps:
    raise app.UsageError("--warmup_steps must be in [0, --pretrain_steps)")
  for preset in presets:
    config = config_lib.PRESETS[preset]
    if config.position_embedding == "absolute" and (
        FLAGS.seq_length > config.max_position_embeddings):
      raise app.UsageError(f"--seq_length={FLAGS.seq_length} exceeds {preset}'s "
                           f"max_position_embeddings={config.max_position_embeddings}")
  queries = list(FLAGS.query) if FLAGS.query else None
  return Settings(
      work_dir=os.path.abspath(FLAGS.work_dir),
      input_files=[f.strip() for f in FLAGS.input_files if f.strip()],
      cache_dir=FLAGS.cache_dir, corpus_max_bytes=FLAGS.corpus_max_bytes, presets=presets,
      size=FLAGS.size, vocab_size=FLAGS.vocab_size, vocab_max_lines=FLAGS.vocab_max_lines,
      seq_length=FLAGS.seq_length, max_predictions_per_seq=max_predictions,
      dupe_factor=FLAGS.dupe_factor, batch_size=FLAGS.batch_size,
      pretrain_steps=FLAGS.pretrain_steps, learning_rate=FLAGS.learning_rate,
      warmup_steps=warmup, finetune_seeds=seeds, finetune_steps=FLAGS.finetune_steps,
      finetune_batch_size=FLAGS.finetune_batch_size,
      finetune_learning_rate=FLAGS.finetune_learning_rate,
      task_train_examples=FLAGS.task_train_examples,
      task_eval_examples=FLAGS.task_eval_examples,
      eval_documents_fraction=FLAGS.eval_documents_fraction, seed=FLAGS.seed,
      task_classes=FLAGS.task_classes, jobs=FLAGS.jobs, num_workers=FLAGS.num_workers,
      queries=queries, redo=[r.strip() for r in FLAGS.redo if r.strip()])


def check_settings(settings: Settings) -> None:
  """Records the settings of a new work_dir; refuses to mix settings in an old one.

  A work_dir where nothing has finished yet (say, the corpus stage failed on a bad
  --input_files) takes the new settings.
  """
  path = settings.path(SETTINGS_FILE)
  current = settings.fingerprint()
  made = any(os.listdir(settings.path(d)) for d in ("stages", "pretrain", "finetune")
             if os.path.isdir(settings.path(d)))
  if os.path.exists(path) and made:
    with open(path, encoding="utf-8") as f:
      recorded = json.load(f)
    changed = {k: (recorded.get(k), v) for k, v in current.items() if recorded.get(k) != v}
    if changed:
      lines = [f"  --{k}: {old!r} there, {new!r} now" for k, (old, new) in changed.items()]
      raise DemoError(
          f"{settings.work_dir} holds a demo made with other settings:\n" +
          "\n".join(lines) + "\nRe-run with the same settings to resume it, or give "
          "another --work_dir (or delete this one) to start afresh.")
  else:
    os.makedirs(settings.work_dir, exist_ok=True)
    io_utils.atomic_write_json(path, current)


# --------------------------------------------------------------------------- corpus


@dataclasses.dataclass
class Document:
  """One document of the corpus and where it comes from (its library, or its file)."""
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
  """
  # pylint: disable=protected-access
  from recurrent_bert.data import builtin_corpus as bc  # pylint: disable=g-import-not-at-top
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
  """Documents of one text file (blank lines between them); stops after ~max_bytes."""
  documents: List[Document] = []
  current: List[str] = []
  size = 0
  for _, line in io_utils.read_lines_checked(path):
    line = " ".join(line.split())  # tabs and odd spaces: the task TSVs are tab-separated
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
  """Documents of your files, each labelled with its file's name (the task's classes)."""
  names = [os.path.splitext(os.path.basename(p))[0] for p in paths]
  if len(set(names)) < len(names):  # same base names in different directories
    names = [os.path.relpath(p, os.path.commonpath([os.path.abspath(q) for q in paths]))
             for p in paths]
  budget = max_bytes // len(paths) if max_bytes else 0
  documents: List[Document] = []
  for path, name in zip(paths, names):
    documents.extend(read_documents(path, name, budget))
  return documents


def split_documents(documents: Sequence[Document], eval_fraction: float, seed: int
                    ) -> Dict[str, List[Document]]:
  """Holds out two disjoint sets of documents, dev and test, per source (stratified).

  A source with fewer than 3 documents goes to train only. The train documents are
  shuffled, so that the first lines of the train file are a sample of every source.
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
    splits["test"] += docs[num_eval:2 * num_eval]
    splits["train"] += docs[2 * num_eval:]
  rng.shuffle(splits["train"])
  if not splits["dev"] or len(splits["train"]) < 2:
    raise io_utils.InputError(
        f"the corpus has {len(documents)} documents: too few to hold out dev and test "
        "documents (one sentence per line, blank lines between documents)")
  return splits


def write_documents(directory: str, split: str, documents: Sequence[Document]) -> None:
  """<split>_documents.txt (the pretraining text format) + <split>_sources.txt."""
  with io_utils.atomic_write(os.path.join(directory, f"{split}_documents.txt")) as f:
    for document in documents:
      f.write("\n".join(document.sentences) + "\n\n")
  io_utils.atomic_write_text(os.path.join(directory, f"{split}_sources.txt"),
                             "".join(d.source + "\n" for d in documents))


def load_split(directory: str, split: str) -> List[Document]:
  documents = read_documents(os.path.join(directory, f"{split}_documents.txt"))
  with open(os.path.join(directory, f"{split}_sources.txt"), encoding="utf-8") as f:
    sources = [line.rstrip("\n") for line in f]
  if len(sources) != len(documents):
    raise io_utils.InputError(f"{directory}: {split} has {len(documents)} documents but "
                              f"{len(sources)} sources")
  return [Document(source, d.sentences) for source, d in zip(sources, documents)]


# ----------------------------------------------------------------------------- task


def passages(sentences: Sequence[str], min_words: int = 20, max_words: int = 40
             ) -> List[str]:
  """Consecutive sentences joined into passages of about min_words..max_words words."""
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
  """The sources with documents in every split, the most sentences first."""
  present = [{d.source for d in splits[s]} for s in ("train", "dev", "test")]
  sentences: Dict[str, int] = {}
  for document in splits["train"]:
    sentences[document.source] = sentences.get(document.source, 0) + len(
        document.sentences)
  candidates = [c for c in sentences if all(c in p for p in present)]
  candidates.sort(key=lambda c: (-sentences[c], c))
  if len(candidates) < 2:
    raise io_utils.InputError(
        "the fine-tuning task asks which source a passage comes from: it needs at least "
        "two sources with 3+ documents each (with --input_files: two or more files, e.g. "
        "one file per book); found " + (", ".join(candidates) or "none"))
  return candidates[:num_classes]


def write_task(task_dir: str, splits: Dict[str, List[Document]], classes: Sequence[str],
               num_train: int, num_eval: int, seed: int) -> Dict:
  """train.tsv, dev.tsv, test.tsv (no labels) + test_labels.tsv; balanced classes."""
  os.makedirs(task_dir, exist_ok=True)
  counts = {}
  for offset, (split, total) in enumerate((("train", num_train), ("dev", num_eval),
                                           ("test", num_eval))):
    rng = random.Random(seed + 1000 * (offset + 1))
    pools = {c: [] for c in classes}
    for document in splits[split]:
      if document.source in pools:
        pools[document.source].extend(passages(document.sentences))
    per_class = min([max(1, total // len(classes))] + [len(p) for p in pools.values()])
    if per_class < 1:
      empty = [c for c, p in pools.items() if not p]
      raise io_utils.InputError(f"no {split} passages for {empty}: the corpus is too small")
    rows = [(text, c) for c in classes for text in rng.sample(pools[c], per_class)]
    rng.shuffle(rows)
    lines = ["index\tsentence" + ("" if split == "test" else "\tlabel")]
    for i, (text, label) in enumerate(rows):
      lines.append(f"{split}-{i}\t{text}" + ("" if split == "test" else f"\t{label}"))
    io_utils.atomic_write_text(os.path.join(task_dir, f"{split}.tsv"), "\n".join(lines) + "\n")
    if split == "test":
      labels = ["index\tlabel"] + [f"test-{i}\t{r[1]}" for i, r in enumerate(rows)]
      io_utils.atomic_write_text(os.path.join(task_dir, "test_labels.tsv"),
                                 "\n".join(labels) + "\n")
    counts[split] = {"examples": len(rows), "per_class": per_class,
                     "documents": sum(d.source in pools for d in splits[split])}
  return counts


def read_tsv(path: str) -> List[Dict[str, str]]:
  with open(path, encoding="utf-8") as f:
    header = f.readline().rstrip("\n").split("\t")
    return [dict(zip(header, line.rstrip("\n").split("\t"))) for line in f if line.strip()]


def test_accuracy(predictions_file: str, labels_file: str) -> Tuple[float, int]:
  """Accuracy of finetune_glue's test predictions against the held-out labels."""
  truth = {row["index"]: row["label"] for row in read_tsv(labels_file)}
  predicted = {row["index"]: row["prediction"] for row in read_tsv(predictions_file)}
  missing = set(truth) - set(predicted)
  if missing:
    raise DemoError(f"{predictions_file} lacks {len(missing)} test examples, e.g. "
                    f"{sorted(missing)[:3]}")
  correct = sum(predicted[i] == label for i, label in truth.items())
  return correct / len(truth), len(truth)


# ------------------------------------------------------------------- running things


class Subprocess:
  """Runs one command, its output to a log file; progress lines echoed with a prefix.

  Output is read as it comes (tqdm's carriage returns split lines too). Lines matching
  `echo` are printed (a progress bar at most every 10 s); when nothing has been echoed
  for 30 s a "still running" line says so.
  """

  def __init__(self, cmd: List[str], log_path: str, label: str, echo: re.Pattern,
               cwd: str = REPO):
    self.cmd, self.log_path, self.label, self.echo, self.cwd = cmd, log_path, label, echo, cwd
    self.process: Optional[subprocess.Popen] = None
    self._lines: "queue.Queue[Optional[str]]" = queue.Queue()
    self._log = None
    self.start_time = 0.0
    self._last_echo = 0.0
    self._last_bar = 0.0

  def start(self) -> None:
    os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
    self._log = open(self.log_path, "a", encoding="utf-8")
    self._log.write(f"\n$ cd {self.cwd} && {' '.join(self.cmd)}\n")
    self._log.flush()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    self.process = subprocess.Popen(self.cmd, cwd=self.cwd, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    self.start_time = self._last_echo = time.time()
    threading.Thread(target=self._reader, daemon=True).start()

  def _reader(self) -> None:
    buffer = b""
    stream = self.process.stdout
    while True:
      chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(4096)
      if not chunk:
        break
      buffer += chunk
      parts = re.split(rb"[\r\n]", buffer)
      buffer = parts.pop()
      for part in parts:
        self._lines.put(part.decode("utf-8", "replace"))
    if buffer:
      self._lines.put(buffer.decode("utf-8", "replace"))
    self._lines.put(None)

  def _handle(self, line: str) -> None:
    self._log.write(line + "\n")
    text = _ABSL_PREFIX.sub("", line).rstrip()
    if not text.strip() or _NOISE.search(text) or not self.echo.search(text.strip()):
      return
    now = time.time()
    if "%|" in text:  # a tqdm bar: throttled
      if now - self._last_bar < 10 and "100%" not in text:
        return
      self._last_bar = now
    self._last_echo = now
    say(f"    {self.label}{text}")

  def poll(self, timeout: float) -> Optional[int]:
    """Handles output for up to `timeout` s; returns the exit code once finished."""
    deadline = time.time() + timeout
    while True:
      try:
        line = self._lines.get(timeout=max(0.0, min(1.0, deadline - time.time())))
      except queue.Empty:
        line = ""
      if line is None:
        code = self.process.wait()
        self._log.write(f"[exit code {code} after {time.time() - self.start_time:.1f} s]\n")
        self._log.close()
        return code
      if line:
        self._handle(line)
      now = time.time()
      if now - self._last_echo >= 30:
        self._last_echo = now
        say(f"    {self.label}... still running ({format_duration(now - self.start_time)}"
            f", log: {self.log_path})")
      if now >= deadline:
        return None

  def stop(self) -> None:
    if self.process is not None and self.process.poll() is None:
      self.process.terminate()
      try:
        self.process.wait(timeout=10)
      except subprocess.TimeoutExpired:
        self.process.kill()


def log_tail(path: str, lines: int = 15) -> str:
  try:
    with open(path, encoding="utf-8", errors="replace") as f:
      content = [l.rstrip("\n") for l in f if l.strip()]
  except OSError:
    return ""
  content = [l for l in content if "cuda" not in l.lower() and "oneDNN" not in l]
  return "\n".join("      | " + l for l in content[-lines:])


def run_commands(jobs: List[Tuple[str, List[str], str, re.Pattern]], parallel: int,
                 on_done: Callable[[str, float, Optional[float]], None]) -> None:
  """Runs (name, cmd, log, echo) jobs, `parallel` at a time; raises DemoError on a failure.

  on_done(name, wall seconds, cpu seconds) is called as each finishes successfully; cpu
  seconds are None when jobs ran side by side (the children's usage cannot be told
  apart then).
  """
  pending = list(jobs)
  running: List[Tuple[str, Subprocess, float]] = []
  try:
    while pending or running:
      while pending and len(running) < parallel:
        name, cmd, log_path, echo = pending.pop(0)
        label = f"[{name}] " if parallel > 1 else ""
        proc = Subprocess(cmd, log_path, label, echo)
        proc.start()
        running.append((name, proc, _children_cpu()))
      for entry in list(running):
        name, proc, cpu_start = entry
        code = proc.poll(timeout=0.2 if len(running) > 1 else 5.0)
        if code is None:
          continue
        running.remove(entry)
        if code != 0:
          raise DemoError(f"stage {name!r} failed (exit code {code}).\n"
                          f"  Last lines of its log:\n{log_tail(proc.log_path)}\n"
                          f"  Full log: {proc.log_path}\n"
                          f"  Command: cd {proc.cwd} && {' '.join(proc.cmd)}")
        on_done(name, time.time() - proc.start_time,
                _children_cpu() - cpu_start if parallel == 1 else None)
  finally:
    for _, proc, _ in running:
      proc.stop()


def _children_cpu() -> float:
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def python_module(module: str, *args: str) -> List[str]:
  return [sys.executable, "-m", module, *args]


ECHO_PRETRAIN = re.compile(r"^step \d+/\d+|resumed from|already at step|error|Error")
ECHO_FINETUNE = re.compile(r"^step \d+/\d+|^eval dev|resumed from|already at step|"
                           r"training examples|error|Error")
ECHO_VOCAB = re.compile(r"distinct words|^wrote|error|Error")
ECHO_DATA = re.compile(r"create_pretraining_data:|^documents |^instances |^truncation |"
                       r"^random next |^masked |^throughput |^wrote|error|Error")
ECHO_EXPORT = re.compile(r"SavedModel written|^classify|^encode|error|Error")
ECHO_QUERY = re.compile(r".")
ECHO_REPORT = re.compile(r"^wrote|Error|error")


# --------------------------------------------------------------------------- stages


@dataclasses.dataclass
class Stage:
  """One restartable unit of work."""
  name: str                      # unique, also the marker and log file name
  title: str
  estimate: float                # expected seconds (for the ETA), before calibration
  key: Dict = dataclasses.field(default_factory=dict)  # rerun when it changes
  run: Optional[Callable[[], Dict]] = None          # in-process stages
  command: Optional[Callable[[], List[str]]] = None  # subprocess stages
  echo: Optional[re.Pattern] = None
  after: Optional[Callable[[], Dict]] = None         # result of a subprocess stage
  parallel_group: Optional[str] = None               # stages run together with --jobs


class Demo:
  """Plans the stages for the settings and runs them, reusing the finished ones."""

  # Seconds on 2 CPU cores, calibrated as stages finish. Per-step costs relative to
  # bert_mini at 64 tokens x 32 sequences; sizes and token counts scale them.
  STEP_COST = {"bert": 1.0, "bert_rab": 1.0, "swishrnn": 1.1, "trans_blstm_small_1": 1.6,
               "trans_blstm_small_2": 1.7, "trans_blstm_1": 2.6, "trans_blstm_2": 2.8,
               "blstm": 2.2}
  SIZE_COST = {"tiny": 0.15, "mini": 1.0, "base": 12.0, "large": 40.0}
  BERT_MINI_STEP = 0.32  # seconds per step of 2048 tokens (32 x 64), 2 idle cores

  def __init__(self, settings: Settings):
    self.s = settings
    self.results: Dict[str, Dict] = {}
    self.timings: List[Dict] = []
    self._calibration = []  # (estimated, actual) of stages run now
    self._start = time.time()

  # -- paths -----------------------------------------------------------------------

  def marker(self, name: str) -> str:
    return self.s.path("stages", name.replace(":", "_") + ".json")

  def log(self, name: str) -> str:
    return self.s.path("logs", name.replace(":", "_") + ".log")

  def pretrain_dir(self, preset: str) -> str:
    return self.s.path("pretrain", preset)

  def finetune_dir(self, preset: str, seed: int) -> str:
    return self.s.path("finetune", preset, f"seed{seed}")

  # -- cost model ------------------------------------------------------------------

  def step_cost(self, preset: str, tokens: int) -> float:
    family, size = family_of(preset), preset.rsplit("_", 1)[1]
    return (self.BERT_MINI_STEP * self.STEP_COST.get(family, 2.0) *
            self.SIZE_COST.get(size, 1.0) * tokens / 2048)

  def _startup(self, preset: str) -> float:
    return 10.0 + (10.0 if "blstm" in preset else 0.0)

  # -- the plan --------------------------------------------------------------------

  def plan(self) -> List[Stage]:
    s = self.s
    corpus_mb = (s.corpus_max_bytes / 1e6 if s.corpus_max_bytes else
                 (14.0 if self.builtin else 10.0))
    stages = [
        Stage("corpus", "corpus: read, split documents train/dev/test",
              5 + 2 * corpus_mb, run=self.stage_corpus),
        Stage("vocab", f"vocabulary: WordPiece, {s.vocab_size} tokens (tools.build_vocab)",
              15 + 6e-4 * (s.vocab_max_lines or 15000 * corpus_mb),
              command=self.vocab_command, echo=ECHO_VOCAB, after=self.vocab_result),
        Stage("pretrain_data", f"pretraining data: MLM + NSP TFRecords, {s.seq_length} "
              "tokens (tools.create_pretraining_data)", 10 + 2 * corpus_mb * s.dupe_factor,
              command=self.data_command, echo=ECHO_DATA, after=self.data_result),
        Stage("task", "fine-tuning task: which source is a passage from?", 2,
              run=self.stage_task),
    ]
    tokens = s.batch_size * s.seq_length
    for preset in s.presets:
      stages.append(Stage(
          f"pretrain:{preset}", f"pretrain {display_name(preset)} ({preset}): "
          f"{s.pretrain_steps} steps x {s.batch_size} x {s.seq_length} tokens",
          self._startup(preset) + s.pretrain_steps * self.step_cost(preset, tokens),
          command=lambda p=preset: self.pretrain_command(p), echo=ECHO_PRETRAIN,
          after=lambda p=preset: self.pretrain_result(p)))
    ft_tokens = s.finetune_batch_size * s.seq_length
    for preset in s.presets:
      for seed in s.finetune_seeds:
        stages.append(Stage(
            f"finetune:{preset}:seed{seed}", f"fine-tune {display_name(preset)} "
            f"({preset}), seed {seed}: {s.finetune_steps} steps",
            (self._startup(preset) + 10 + 0.9 * s.finetune_steps *
             self.step_cost(preset, ft_tokens)) / min(s.jobs, 2) ** 0.5,
            command=lambda p=preset, r=seed: self.finetune_command(p, r),
            echo=ECHO_FINETUNE, after=lambda p=preset, r=seed: self.finetune_result(p, r),
            parallel_group="finetune"))
    runs = [(p, r) for p in s.presets for r in s.finetune_seeds]
    stages += [
        Stage("export", "export the best fine-tuned model (recurrent_bert.export)", 30,
              key={"runs": runs}, command=self.export_command, echo=ECHO_EXPORT,
              after=self.export_result),
        Stage("query", "query the SavedModel with raw text (TF + tf-text only)", 15,
              key={"runs": runs, "queries": s.queries}, command=self.query_command,
              echo=ECHO_QUERY, after=self.query_result),
        Stage("report", "report: report.md, mlm_loss.png, tensorboard/", 15,
              key={"runs": runs, "queries": s.queries}, command=self.report_command,
              echo=ECHO_REPORT, after=self.report_result),
    ]
    return stages

  @staticmethod
  def _is_builtin(entry: str) -> bool:
    from recurrent_bert.data import builtin_corpus  # pylint: disable=g-import-not-at-top
    return builtin_corpus.is_builtin(entry)

  @property
  def builtin(self) -> bool:
    return any(self._is_builtin(f) for f in self.s.input_files)

  # -- the driver ------------------------------------------------------------------

  def _eta(self, remaining: List[Stage]) -> float:
    """The estimates of the stages left, scaled by how the ones run so far compared.

    The scale starts at 1 and moves as stages finish (a prior worth two minutes keeps
    a few short stages from swinging it).
    """
    prior = 120.0
    factor = ((sum(a for _, a in self._calibration) + prior) /
              (sum(e for e, _ in self._calibration) + prior))
    return factor * sum(st.estimate for st in remaining)

  def _reusable(self, stage: Stage) -> Optional[Dict]:
    path = self.marker(stage.name)
    if not os.path.exists(path):
      return None
    with open(path, encoding="utf-8") as f:
      record = json.load(f)
    if record.get("key", {}) != json.loads(json.dumps(stage.key)):
      return None
    return record

  def _finish(self, stage: Stage, result: Dict, wall: float, cpu: Optional[float]) -> None:
    record = {"stage": stage.name, "seconds": round(wall, 2),
              "cpu_seconds": None if cpu is None else round(cpu, 2),
              "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
              "key": stage.key, "result": result}
    io_utils.atomic_write_json(self.marker(stage.name), record)
    self.results[stage.name] = result
    self.timings.append({"stage": stage.name, "status": "ran", "seconds": wall,
                         "cpu_seconds": cpu})
    self._calibration.append((stage.estimate, wall))

  def _forget(self, names: Sequence[str], stages: List[Stage]) -> None:
    """--redo: drops the markers (and model dirs) of the named stages."""
    known = {st.name for st in stages}
    unknown = [n for n in names if n not in known]
    if unknown:
      raise DemoError(f"--redo: no stage {unknown}; the stages are: "
                      + ", ".join(st.name for st in stages))
    for name in names:
      if os.path.exists(self.marker(name)):
        os.remove(self.marker(name))
      parts = name.split(":")
      directory = (self.pretrain_dir(parts[1]) if parts[0] == "pretrain" else
                   self.finetune_dir(parts[1], int(parts[2][4:])) if parts[0] == "finetune"
                   else None)
      if directory and os.path.isdir(directory):
        shutil.rmtree(directory)

  def run(self) -> None:
    stages = self.plan()
    self._forget(self.s.redo, stages)
    total = len(stages)
    say(f"recurrent_bert demo: {total} stages in {self.s.work_dir} "
        f"(models: {', '.join(self.s.presets)}; seeds: "
        f"{', '.join(map(str, self.s.finetune_seeds))})")
    index = 0
    executed = set()  # run ahead of their turn, in a parallel group
    while index < len(stages):
      stage = stages[index]
      if stage.name in executed:
        index += 1
        continue
      record = self._reusable(stage)
      elapsed = format_duration(time.time() - self._start)
      if record is not None:
        self.results[stage.name] = record["result"]
        self.timings.append({"stage": stage.name, "status": "reused",
                             "seconds": record["seconds"],
                             "cpu_seconds": record.get("cpu_seconds")})
        say(f"[{index + 1}/{total}] {stage.title}: reused (finished earlier in "
            f"{format_duration(record['seconds'])})")
        index += 1
        continue
      group = [stage]
      if stage.parallel_group and self.s.jobs > 1:
        j = index + 1
        while j < len(stages) and stages[j].parallel_group == stage.parallel_group:
          if self._reusable(stages[j]) is None:
            group.append(stages[j])
          j += 1
      eta = format_duration(self._eta(stages[index:]))
      if len(group) == 1:
        say(f"\n[{index + 1}/{total}] {stage.title}  (elapsed {elapsed}, ETA ~{eta})")
      else:
        say(f"\n[{index + 1}/{total}] {len(group)} runs, {self.s.jobs} at a time: "
            f"{stage.parallel_group}  (elapsed {elapsed}, ETA ~{eta})")
      self._execute(group)
      executed.update(g.name for g in group)
      index += 1

  def _execute(self, group: List[Stage]) -> None:
    if len(group) == 1 and group[0].run is not None:
      stage = group[0]
      start, cpu = time.time(), time.process_time() + _children_cpu()
      try:
        result = stage.run()
      except (DemoError, KeyboardInterrupt):
        raise
      except Exception as e:  # pylint: disable=broad-except
        log_path = self.log(stage.name)
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as f:
          f.write(traceback.format_exc())
        raise DemoError(f"stage {stage.name!r} failed: {type(e).__name__}: {e}\n"
                        f"  Traceback in {log_path}") from e
      self._finish(stage, result, time.time() - start,
                   time.process_time() + _children_cpu() - cpu)
      self._print_result(stage)
      return
    by_name = {g.name: g for g in group}

    def done(name: str, wall: float, cpu: Optional[float]) -> None:
      stage = by_name[name]
      try:
        result = stage.after() if stage.after else {}
      except (io_utils.InputError, OSError, ValueError, KeyError) as e:
        raise DemoError(f"stage {name!r}: its outputs are not what was expected: {e}. "
                        f"Log: {self.log(name)}") from e
      self._finish(stage, result, wall, cpu)
      self._print_result(stage, wall, label=f"[{name}] " if len(group) > 1 else "")

    jobs = [(g.name, g.command(), self.log(g.name), g.echo) for g in group]
    run_commands(jobs, self.s.jobs if len(group) > 1 else 1, done)

  def _print_result(self, stage: Stage, wall: Optional[float] = None,
                    label: str = "") -> None:
    result = self.results.get(stage.name, {})
    summary = result.get("summary")
    wall = wall if wall is not None else self.timings[-1]["seconds"]
    say(f"    {label}done in {format_duration(wall)}" + (f": {summary}" if summary else ""))

  # -- corpus, vocabulary, data, task ------------------------------------------------

  def stage_corpus(self) -> Dict:
    s = self.s
    documents: List[Document] = []
    files = []
    for entry in s.input_files:
      if self._is_builtin(entry):
        say("    reading the built-in corpus (docstrings of the installed Python, labelled "
            "by library; cached after the first time)")
        documents.extend(builtin_documents(s.cache_dir, s.corpus_max_bytes))
      else:
        files.extend(io_utils.expand_input_patterns([entry], "input_files"))
    if files:
      documents.extend(file_documents(files, s.corpus_max_bytes))
    splits = split_documents(documents, s.eval_documents_fraction, s.seed)
    for split, docs in splits.items():
      write_documents(s.path("corpus"), split, docs)
    stats = {split: {"documents": len(docs), "sentences": sum(len(d.sentences) for d in docs),
                     "bytes": sum(len(x.encode("utf-8")) + 1 for d in docs
                                  for x in d.sentences),
                     "sources": len({d.source for d in docs})}
             for split, docs in splits.items()}
    total_mb = sum(v["bytes"] for v in stats.values()) / 1e6
    return {"input_files": files, "builtin": self.builtin, "splits": stats,
            "summary": f"{sum(v['documents'] for v in stats.values()):,} documents from "
                       f"{stats['train']['sources']} sources, {total_mb:.1f} MB; held out "
                       f"{stats['dev']['documents']} dev + {stats['test']['documents']} "
                       "test documents"}

  def vocab_command(self) -> List[str]:
    s = self.s
    return python_module("tools.build_vocab",
                         f"--input_files={s.path('corpus', 'train_documents.txt')}",
                         f"--vocab_size={s.vocab_size}", f"--max_lines={s.vocab_max_lines}",
                         "--do_lower_case=true",
                         f"--output_file={s.path('vocab', 'vocab.txt')}")

  def vocab_result(self) -> Dict:
    with open(self.s.path("vocab", "vocab.txt"), encoding="utf-8") as f:
      tokens = [line.rstrip("\n") for line in f]
    unused = sum(t.startswith("[unused") for t in tokens)
    return {"tokens": len(tokens), "unused": unused,
            "summary": f"{len(tokens)} tokens ({unused} [unused] padding)"}

  def data_command(self) -> List[str]:
    s = self.s
    return python_module(
        "tools.create_pretraining_data",
        f"--input_files={s.path('corpus', 'train_documents.txt')}",
        f"--vocab_file={s.path('vocab', 'vocab.txt')}", "--do_lower_case=true",
        f"--output_dir={s.path('pretrain_data')}", f"--max_seq_length={s.seq_length}",
        f"--max_predictions_per_seq={s.max_predictions_per_seq}",
        f"--dupe_factor={s.dupe_factor}", f"--random_seed={s.seed}",
        f"--num_output_shards={max(1, s.num_workers)}", f"--num_workers={s.num_workers}")

  def data_result(self) -> Dict:
    with open(self.s.path("pretrain_data", "stats.json"), encoding="utf-8") as f:
      stats = json.load(f)
    consumed = self.s.pretrain_steps * self.s.batch_size
    return {"instances": stats["instances"], "instance_tokens": stats["instance_tokens"],
            "masked_fraction": stats["masked_fraction"],
            "epochs": consumed / max(1, stats["instances"]),
            "summary": f"{stats['instances']:,} sequences; pretraining reads {consumed:,} "
                       f"of them ({consumed / max(1, stats['instances']):.2f} epochs)"}

  def stage_task(self) -> Dict:
    s = self.s
    splits = {split: load_split(s.path("corpus"), split) for split in ("train", "dev", "test")}
    classes = choose_classes(splits, s.task_classes)
    counts = write_task(s.path("task"), splits, classes, s.task_train_examples,
                        s.task_eval_examples, s.seed)
    return {"classes": classes, "splits": counts,
            "summary": f"{len(classes)} classes ({', '.join(classes)}); " + ", ".join(
                f"{split} {c['examples']:,} passages" for split, c in counts.items())}

  # -- pretraining and fine-tuning ---------------------------------------------------

  def pretrain_command(self, preset: str) -> List[str]:
    s = self.s
    log_steps = max(1, s.pretrain_steps // 15)
    return python_module(
        "recurrent_bert.pretrain", f"--model_config={preset}",
        f"--input_files={s.path('pretrain_data', '*.tfrecord')}",
        f"--vocab_file={s.path('vocab', 'vocab.txt')}", "--do_lower_case=true",
        f"--model_dir={self.pretrain_dir(preset)}", f"--max_seq_length={s.seq_length}",
        f"--max_predictions_per_seq={s.max_predictions_per_seq}",
        f"--train_batch_size={s.batch_size}", f"--num_train_steps={s.pretrain_steps}",
        f"--learning_rate={s.learning_rate}", f"--warmup_steps={s.warmup_steps}",
        f"--log_steps={log_steps}", f"--steps_per_loop={log_steps}",
        f"--save_checkpoints_steps={max(log_steps, s.pretrain_steps // 4)}",
        "--keep_checkpoint_max=2", "--seed=0")

  def pretrain_result(self, preset: str) -> Dict:
    from recurrent_bert import demo_report  # pylint: disable=g-import-not-at-top
    model_dir = self.pretrain_dir(preset)
    if not os.path.isfile(os.path.join(model_dir, layout.EXPORT_DIR, layout.EXPORT_INFO_FILE)):
      raise ValueError(f"no encoder export in {model_dir}")
    losses = io_utils.read_metrics_log(model_dir)
    final = demo_report.final_loss(losses, "mlm_loss")
    return {"model_dir": model_dir, "steps": max(losses) if losses else 0,
            "final_mlm_loss": final, "load_average": os.getloadavg()[1],
            "summary": f"MLM loss {final:.3f} (mean of the last "
                       f"{demo_report.last_n(len(losses))} steps)"}

  def finetune_command(self, preset: str, seed: int) -> List[str]:
    s = self.s
    log_steps = max(1, s.finetune_steps // 5)
    return python_module(
        "recurrent_bert.finetune_glue", "--task=custom", f"--data_dir={s.path('task')}",
        f"--init_checkpoint={os.path.join(self.pretrain_dir(preset), 'encoder')}",
        f"--model_dir={self.finetune_dir(preset, seed)}", f"--seed={seed}",
        f"--max_seq_length={s.seq_length}", f"--train_batch_size={s.finetune_batch_size}",
        "--eval_batch_size=64", f"--learning_rate={s.finetune_learning_rate}",
        f"--max_train_steps={s.finetune_steps}", "--warmup_proportion=0.1",
        f"--log_steps={log_steps}", f"--steps_per_loop={log_steps}",
        f"--save_checkpoints_steps={max(log_steps, s.finetune_steps // 2)}",
        "--keep_checkpoint_max=1", "--shuffle_buffer_size=10000")

  def finetune_result(self, preset: str, seed: int) -> Dict:
    model_dir = self.finetune_dir(preset, seed)
    with open(os.path.join(model_dir, layout.EVAL_RESULTS_FILE), encoding="utf-8") as f:
      results = json.load(f)
    accuracy, num_test = test_accuracy(
        os.path.join(model_dir, layout.PREDICTIONS_DIR, "test_predictions.tsv"),
        self.s.path("task", "test_labels.tsv"))
    dev = results["dev"]["accuracy"]
    return {"model_dir": model_dir, "dev_accuracy": dev, "test_accuracy": accuracy,
            "num_test": num_test, "num_dev": results["dev"].get("num_examples"),
            "seconds_per_train_step": results.get("seconds_per_train_step"),
            "summary": f"dev accuracy {dev:.3f}, test accuracy {accuracy:.3f}"}

  # -- export, query, report ---------------------------------------------------------

  def best_run(self) -> Tuple[str, int, Dict]:
    best = None
    for preset in self.s.presets:
      for seed in self.s.finetune_seeds:
        result = self.results[f"finetune:{preset}:seed{seed}"]
        if best is None or result["dev_accuracy"] > best[2]["dev_accuracy"]:
          best = (preset, seed, result)
    return best

  def export_command(self) -> List[str]:
    preset, seed, _ = self.best_run()
    say(f"    best run by dev accuracy: {preset}, seed {seed}")
    return python_module("recurrent_bert.export",
                         f"--model_dir={self.finetune_dir(preset, seed)}",
                         f"--export_dir={self.s.path('export', 'saved_model')}")

  def export_result(self) -> Dict:
    preset, seed, result = self.best_run()
    export_dir = self.s.path("export", "saved_model")
    if not os.path.isfile(os.path.join(export_dir, "saved_model.pb")):
      raise ValueError(f"no saved_model.pb in {export_dir}")
    return {"export_dir": export_dir, "preset": preset, "seed": seed,
            "dev_accuracy": result["dev_accuracy"], "test_accuracy": result["test_accuracy"],
            "summary": f"{export_dir} ({display_name(preset)}, seed {seed}, dev accuracy "
                       f"{result['dev_accuracy']:.3f})"}

  def queries(self) -> List[Dict]:
    """--query texts, else a passage of a held-out test document of three classes."""
    if self.s.queries:
      return [{"text": text, "truth": None} for text in self.s.queries]
    rows = read_tsv(self.s.path("task", "test.tsv"))
    labels = {r["index"]: r["label"]
              for r in read_tsv(self.s.path("task", "test_labels.tsv"))}
    chosen = []
    for wanted in self.results["task"]["classes"][:3]:
      row = next(r for r in rows if labels[r["index"]] == wanted)
      chosen.append({"text": row["sentence"], "truth": wanted})
    return chosen

  def query_command(self) -> List[str]:
    queries_file = self.s.path("export", "queries.json")
    io_utils.atomic_write_json(queries_file, self.queries())
    return [sys.executable, "-c", QUERY_PROGRAM, self.s.path("export", "saved_model"),
            queries_file, self.s.path("export", "answers.json")]

  def query_result(self) -> Dict:
    with open(self.s.path("export", "answers.json"), encoding="utf-8") as f:
      answers = json.load(f)
    return {"answers": answers, "summary": "; ".join(
        f"{a['label']} (p={a['probability']:.2f})" for a in answers)}

  def report_command(self) -> List[str]:
    s = self.s
    inputs = {
        "settings": dataclasses.asdict(s), "results": self.results, "timings": self.timings,
        "pretrain_dirs": {p: self.pretrain_dir(p) for p in s.presets},
        "finetune_dirs": {p: {str(r): self.finetune_dir(p, r) for r in s.finetune_seeds}
                          for p in s.presets},
        "out_dir": s.path("report")}
    path = s.path("report", "inputs.json")
    io_utils.atomic_write_json(path, inputs)
    return python_module("recurrent_bert.demo_report", path)

  def report_result(self) -> Dict:
    with open(self.s.path("report", "paths.json"), encoding="utf-8") as f:
      paths = json.load(f)
    return {**paths, "summary": paths["report_md"]}

  def print_summary(self) -> None:
    say("\nstage timings (wall; cpu = user + sys of the stage's processes, when it ran alone):")
    for t in self.timings:
      cpu = t.get("cpu_seconds")
      say(f"  {t['stage']:40s} {t['status']:7s} {t['seconds']:8.1f} s" +
          (f"  cpu {cpu:8.1f} s" if cpu is not None else ""))
    report = self.results.get("report", {})
    say(f"\ntotal {format_duration(time.time() - self._start)} this run.")
    if report:
      if report.get("table"):
        say("\n" + report["table"])
      answers = self.results.get("query", {}).get("answers", [])
      for a in answers:
        say(f"query: {a['text'][:100]!r}\n"
            f"  -> {a['label']} (p={a['probability']:.2f})" +
            (f", truth: {a['truth']}" if a.get("truth") else ""))
      say(f"\nreport:       {report['report_md']}")
      say(f"loss curves:  {report['mlm_loss_png']}")
      say(f"TensorBoard:  {report['tensorboard_dir']}  (tensorboard --logdir "
          f"{report['tensorboard_dir']})")
      say(f"SavedModel:   {self.results.get('export', {}).get('export_dir')}")


# The query, in a fresh interpreter: only TensorFlow and tensorflow-text are imported.
QUERY_PROGRAM = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops of the SavedModel)
export_dir, queries_file, answers_file = sys.argv[1:4]
with open(queries_file, encoding="utf-8") as f:
    queries = json.load(f)
model = tf.saved_model.load(export_dir)
classify = model.signatures["classify"]
out = classify(text=tf.constant([q["text"] for q in queries]))
answers = []
for i, q in enumerate(queries):
    label = out["label"][i].numpy().decode("utf-8")
    probability = float(out["probabilities"][i][int(out["label_id"][i])])
    answers.append(dict(q, label=label, probability=probability))
    print(f"query {i + 1}: {q['text']!r}")
    print(f"  answer: {label} (probability {probability:.2f})" +
          (f"; truth: {q['truth']}" if q.get("truth") else ""))
ours = sorted(m for m in sys.modules if m.split(".")[0] == "recurrent_bert")
assert not ours, f"the query process imported {ours}"
print("(SavedModel loaded in a fresh process with tensorflow + tensorflow_text only)")
with open(answers_file + ".tmp", "w", encoding="utf-8") as f:
    json.dump(answers, f, indent=2)
import os
os.replace(answers_file + ".tmp", answers_file)
"""


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  settings = settings_from_flags()
  if not os.path.isfile(os.path.join(REPO, "tools", "build_vocab.py")):
    say(f"error: the demo runs the data tools of a source checkout; {REPO}/tools/ not found")
    sys.exit(2)
  demo = Demo(settings)
  try:
    check_settings(settings)
    demo.run()
  except DemoError as e:
    say(f"\ndemo stopped: {e}")
    say("Fix the cause and run the same command again: finished stages are reused.")
    sys.exit(1)
  except KeyboardInterrupt:
    say("\ninterrupted: run the same command again to resume (finished stages are reused, "
        "pretraining and fine-tuning resume from their checkpoints).")
    sys.exit(130)
  demo.print_summary()


if __name__ == "__main__":
  define_flags()
  cli.run(main)
