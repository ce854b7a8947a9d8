"""Small generated tasks that a tiny model learns in a few hundred steps, written in the
official file formats (GLUE RTE TSV, SQuAD JSON): data to try the fine-tuning commands on
without downloading a benchmark (`rbert-make-sample-tasks`), and for the tests.
No network, seeded.

  rte/    {train,dev,test}.tsv: sentence pairs; the label (entailment / not_entailment)
          is a marker word ("yes" / "no") hidden in sentence 2.
  squad/  {train,dev}-v1.1.json: "which fruit is it ?" over a paragraph of filler words
          with one fruit in it, the answer.
  swag/   {train,val,test}.csv (SWAG's columns): sent1 holds a marker word ("yes" /
          "no"); of the four endings the right one holds the same marker, the other three
          the other marker (so only reading context and ending together tells).
  conll/  {train,dev,test}.txt: CoNLL-2003-format NER; each document is about one entity
          type (PER, LOC, ORG or MISC), and each of its sentences holds that type's cue
          word ("mister", "city", "company", "festival") before a one- or two-word name
          of nonsense words shared by all types: the type is learnable only from context.

The word lists are plain English words, so the tokenizer splits them into one piece each
with the vocabulary of `write_vocab` (entities=True for conll/).
"""

import csv
import io
import json
import os

import numpy as np

from recurrent_bert import io_utils

FILLER = (
    "the cat dog bird fish tree house road river stone cloud rain wind green blue "
    "small large quick slow bright dark warm cold happy quiet loud old new red "
    "walks runs sees finds makes takes holds likes wants needs"
).split()
MARKERS = {"entailment": "yes", "not_entailment": "no"}
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
FRUITS = ("apple", "banana", "cherry", "grape", "lemon", "mango", "melon", "peach")
# Entity type -> the cue word before a name of that type. Names are shared by all types:
# a first word of FIRST_NAMES (B-), maybe a second of LAST_NAMES (I-).
ENTITY_CUES = {"PER": "mister", "LOC": "city", "ORG": "company", "MISC": "festival"}
FIRST_NAMES = ("zork", "blit", "quax", "vorn")
LAST_NAMES = ("plim", "drav")


def write_vocab(path, entities=False):
  """The generated tasks' vocabulary; `entities`: with the NER task's cue words and names."""
  words = (
      set(FILLER) | set(MARKERS.values()) | set(FRUITS) | {"which", "fruit", "is", "it", "?", "."}
  )
  if entities:
    words |= set(ENTITY_CUES.values()) | set(FIRST_NAMES) | set(LAST_NAMES)
  io_utils.atomic_write_text(str(path), "\n".join(SPECIAL + sorted(words)) + "\n")
  return str(path)


def _sentence(rng, length):
  return " ".join(rng.choice(FILLER, size=length))


def marker_pairs(num_examples, seed):
  """(sentence1, sentence2, label): the label is the marker word hidden in sentence2."""
  rng = np.random.default_rng(seed)
  rows = []
  for _ in range(num_examples):
    label = rng.choice(sorted(MARKERS))
    words = list(rng.choice(FILLER, size=int(rng.integers(3, 8))))
    words.insert(int(rng.integers(0, len(words) + 1)), MARKERS[label])
    rows.append((_sentence(rng, int(rng.integers(3, 8))), " ".join(words), str(label)))
  return rows


def write_rte_folder(directory, num_train=400, num_dev=100, num_test=20, seed=0):
  """An RTE-format GLUE folder (index, sentence1, sentence2[, label]) of marker pairs."""
  for split, count, offset in (("train", num_train, 0), ("dev", num_dev, 1), ("test", num_test, 2)):
    rows = marker_pairs(count, seed * 10 + offset)
    header = "index\tsentence1\tsentence2" + ("" if split == "test" else "\tlabel")
    lines = [header]
    for i, (a, b, label) in enumerate(rows):
      lines.append(f"{i}\t{a}\t{b}" + ("" if split == "test" else f"\t{label}"))
    io_utils.atomic_write_text(os.path.join(directory, f"{split}.tsv"), "\n".join(lines) + "\n")
  return str(directory)


def squad_examples(num_examples, seed):
  """SQuAD v1.1 paragraphs of filler words with one fruit in them: the answer."""
  rng = np.random.default_rng(seed)
  paragraphs = []
  for n in range(num_examples):
    before = _sentence(rng, int(rng.integers(2, 14)))
    answer = str(rng.choice(FRUITS))
    context = f"{before} {answer} {_sentence(rng, int(rng.integers(2, 14)))} ."
    start = len(before) + 1
    paragraphs.append(
        {
            "context": context,
            "qas": [
                {
                    "id": f"q{seed}-{n}",
                    "question": "which fruit is it ?",
                    "answers": [{"text": answer, "answer_start": start}],
                }
            ],
        }
    )
  return {"version": "1.1", "data": [{"title": "generated", "paragraphs": paragraphs}]}


def write_squad_files(directory, num_train=300, num_dev=60, seed=0):
  paths = {}
  for split, count, offset in (("train", num_train, 0), ("dev", num_dev, 1)):
    paths[split] = os.path.join(directory, f"{split}-v1.1.json")
    io_utils.atomic_write_text(paths[split], json.dumps(squad_examples(count, seed * 10 + offset)))
  return paths


SWAG_HEADER = (
    "",
    "video-id",
    "fold-ind",
    "startphrase",
    "sent1",
    "sent2",
    "gold-source",
    "ending0",
    "ending1",
    "ending2",
    "ending3",
    "label",
)


def choice_examples(num_examples, seed, num_choices=4):
  """(sent1, sent2, endings, label): sent1 holds a marker word ("yes" / "no"); the right
  ending holds the same marker, every other ending the other one."""
  rng = np.random.default_rng(seed)
  markers = sorted(MARKERS.values())
  rows = []
  for _ in range(num_examples):
    marker = int(rng.integers(2))
    label = int(rng.integers(num_choices))
    sent1 = f"{_sentence(rng, int(rng.integers(1, 4)))} {markers[marker]} {_sentence(rng, 2)}"
    endings = [
        f"{_sentence(rng, 1)} {markers[marker if c == label else 1 - marker]} "
        f"{_sentence(rng, int(rng.integers(1, 3)))}"
        for c in range(num_choices)
    ]
    rows.append((sent1, _sentence(rng, 2), endings, label))
  return rows


def write_swag_folder(directory, num_train=400, num_dev=100, num_test=20, seed=0):
  """A SWAG-format folder (train.csv, val.csv, test.csv without labels) of marker choices."""
  for name, count, offset in (("train", num_train, 0), ("val", num_dev, 1), ("test", num_test, 2)):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    header = SWAG_HEADER if name != "test" else SWAG_HEADER[:-1]
    writer.writerow(header)
    for i, (sent1, sent2, endings, label) in enumerate(choice_examples(count, seed * 10 + offset)):
      row = [i, f"generated-{i}", str(i), f"{sent1} {sent2}", sent1, sent2, "gold", *endings]
      writer.writerow(row + ([] if name == "test" else [label]))
    io_utils.atomic_write_text(os.path.join(directory, f"{name}.csv"), out.getvalue())
  return str(directory)


def tagged_documents(num_sentences, seed):
  """Documents (lists of sentences) of (word, NER tag) pairs, CoNLL-2003's IOB2 tags.

  A document has 2-4 sentences about one entity type; each sentence holds one entity:
  the type's cue word (O) right before a one- or two-word name, among filler words.
  """
  rng = np.random.default_rng(seed)
  documents = []
  while sum(map(len, documents)) < num_sentences:
    entity = str(rng.choice(sorted(ENTITY_CUES)))
    document = []
    for _ in range(min(int(rng.integers(2, 5)), num_sentences - sum(map(len, documents)))):
      name = [str(rng.choice(FIRST_NAMES))]
      if rng.random() < 0.5:
        name.append(str(rng.choice(LAST_NAMES)))
      words = [(str(w), "O") for w in rng.choice(FILLER, size=int(rng.integers(1, 5)))]
      words.append((ENTITY_CUES[entity], "O"))
      words += [(w, ("B-" if i == 0 else "I-") + entity) for i, w in enumerate(name)]
      words += [(str(w), "O") for w in rng.choice(FILLER, size=int(rng.integers(0, 4)))]
      words.append((".", "O"))
      document.append(words)
    documents.append(document)
  return documents


def conll_text(documents):
  """CoNLL-2003 text: "-DOCSTART- -X- -X- O" per document, "word POS chunk tag" lines."""
  lines = []
  for document in documents:
    lines += ["-DOCSTART- -X- -X- O", ""]
    for sentence in document:
      lines += [f"{word} NN I-NP {tag}" for word, tag in sentence]
      lines.append("")
  return "\n".join(lines) + "\n"


def write_conll_files(directory, num_train=400, num_dev=80, num_test=20, seed=0):
  """{split: path} of CoNLL-2003-format files of `tagged_documents`."""
  paths = {}
  for split, count, offset in (("train", num_train, 0), ("dev", num_dev, 1), ("test", num_test, 2)):
    paths[split] = os.path.join(directory, f"{split}.txt")
    io_utils.atomic_write_text(
        paths[split], conll_text(tagged_documents(count, seed * 10 + offset))
    )
  return paths
