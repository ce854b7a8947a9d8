"""Token tagging (CoNLL-2003 NER, BERT §5.3) for the fine-tuning loop.

`tagging_reader` reads CoNLL-format or word-tag files (tasks/tagging/conll.py) or TFDS conll2003;
`TaggingAdapter` cuts each sentence into window rows with document context
(tagging_features.py), trains the tagger on the first piece of every word
(`objectives.TaggingObjective`), gathers each word's prediction back into its sentence,
scores them with conlleval's definitions (tasks/tagging/conlleval.py: chunk precision, recall and
F1 in percent, per type, and token accuracy; main metric "f1") and writes
predictions/<split>_predictions.txt in CoNLL format: "word gold predicted" per line
("word predicted" for an unlabeled split), a blank line after every sentence, and, for a
file with more than one document, a "-DOCSTART- O O" line (then a blank line) before each
document: the readers number documents by their -DOCSTART- lines but do not record
whether the first one had its own (CoNLL-2003's files do). TFDS's conll2003 has no
document boundaries (each sentence is its own document): no document context, and no
-DOCSTART- lines written.
"""

import dataclasses
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from recurrent_bert import io_utils
from recurrent_bert.data import feature_cache
from recurrent_bert.data.feature_cache import Features
from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import InputError
from recurrent_bert.model_dir import TaskInfo
from recurrent_bert.tasks import text_rows
from recurrent_bert.tasks.tagging import conll
from recurrent_bert.tasks.tagging import conlleval
from recurrent_bert.tasks.tagging import tagging_features
from recurrent_bert.tasks.tagging import tfds_reader
from recurrent_bert.training import objectives
from recurrent_bert.training.task_adapter import TaskAdapter

FILE_FORMATS = ("conll", "word_tag")
# The split scored by evaluation, and the one only predicted.
DEV_SPLIT, TEST_SPLIT = "dev", "test"
DOCSTART = "-DOCSTART-"


@dataclasses.dataclass(frozen=True)
class TaggingSettings:
  """How sentences become windows.

  Attributes:
    max_seq_length: T, pieces per row.
    doc_stride: pieces between the starts of a long sentence's windows.
    document_context: fill each window with the document's neighbouring pieces.
  """

  max_seq_length: int = 128
  doc_stride: int = 64
  document_context: bool = True


def tagging_reader(
    files: Mapping[str, str],
    label_list: Optional[Sequence[str]],
    *,
    file_format: str = "conll",
    tag_column: int = -1,
    use_tfds: bool = False,
    tfds_data_dir: Optional[str] = None,
    tfds_download: bool = False,
    skip_bad_rows: bool = False,
) -> Callable[[str], SplitData]:
  """split ("train", "dev", "test") -> `SplitData` of `conll.TaggedSentence`s.

  train and dev must be labeled. The test file is read labeled when its first token line
  has more than the word (then its predictions file has a gold column, and a bad tag in it
  is an error as in the other splits), as words only when that line is the word alone.

  Args:
    files: split -> file (unused with use_tfds).
    label_list: the tags; a tag outside it is bad input. None: any tag (train: to infer
      the list from).
    file_format: "conll" (whitespace columns, the tag in `tag_column`) or "word_tag".
    tag_column: conll: the column of the tag (-1: the last).
    use_tfds: read conll2003 from tensorflow-datasets.
    tfds_data_dir, tfds_download: TFDS's data dir and whether it may download.
    skip_bad_rows: skip (and count) bad sentences instead of raising.
  """
  if file_format not in FILE_FORMATS:
    raise ValueError(f"file format {file_format!r}: choose one of {FILE_FORMATS}")

  def read(path: str, labeled: bool) -> SplitData:
    options = dict(label_list=label_list, skip_bad_rows=skip_bad_rows, labeled=labeled)
    if file_format == "conll":
      return conll.read_conll(path, tag_column=tag_column, **options)
    return conll.read_word_tag(path, **options)

  def read_split(split: str) -> SplitData:
    if use_tfds:
      return tfds_reader.load_tfds_conll2003(
          split, tfds_data_dir, tfds_download, label_list, skip_bad_rows
      )
    if split not in files:
      raise InputError(f"tagging: no {split} file given")
    return read(files[split], labeled=split != TEST_SPLIT or _has_tags(files[split]))

  return read_split


def _has_tags(path: str) -> bool:
  """Whether the first token line of a tagging file (either format) holds more than a word.

  Decided from the file's shape, not by trying to read it labeled: a labeled test file
  with one bad line must be refused, not silently read without its tags.
  """
  for _, text, _ in text_rows.read_text_lines(path):
    fields = (text or "").split()
    if fields and fields[0] != conll.DOCSTART:
      return len(fields) > 1
  return False


class TaggingAdapter(TaskAdapter):
  """A token tagging task, for the `Finetuner`: window rows, predictions per word.

  The model's "logits" are [N, T, K] over the N rows of a split and the K tags.

  Args:
    read_split: split -> `SplitData` of `TaggedSentence`s (e.g. `tagging_reader`).
    tokenizer: a `BertWordpieceTokenizer`; its vocabulary file and casing key the caches.
    cache_dir: where the feature caches go.
    label_list: the K tags.
    settings: the window settings.
    task: the task's name (task_info.json, cache file names).
    eval_splits: labeled splits scored ("dev").
    predict_splits: splits written as prediction files (dev and/or test).
    docstart_lines: the splits come from files whose documents start with -DOCSTART-
      lines (not TFDS): prediction files get them back.
  """

  def __init__(
      self,
      read_split: Callable[[str], SplitData],
      tokenizer,
      cache_dir: str,
      label_list: Sequence[str],
      settings: TaggingSettings,
      *,
      task: str = "conll2003",
      eval_splits: Sequence[str] = (DEV_SPLIT,),
      predict_splits: Sequence[str] = (DEV_SPLIT,),
      docstart_lines: bool = True,
  ):
    super().__init__(
        cache_dir,
        [
            feature_cache.file_fingerprint(tokenizer.vocab_file),
            tokenizer.do_lower_case,
            list(label_list),
            dataclasses.asdict(settings),
        ],
    )
    self._read_split = read_split
    self._tokenizer = tokenizer
    self.settings = settings
    self.label_list = tuple(label_list)
    self.info = TaskInfo(
        task=task,
        kind="tagger",
        label_names=self.label_list,
        do_lower_case=tokenizer.do_lower_case,
        max_seq_length=settings.max_seq_length,
        main_metric="f1",
        doc_stride=settings.doc_stride,
        document_context=settings.document_context,
    )
    self.objective = objectives.TaggingObjective()
    self.output_keys = ("logits",)
    self.eval_splits = tuple(eval_splits)
    self.predict_splits = tuple(predict_splits)
    self.skipped_rows: Dict[str, int] = {}
    self.docstart_lines = docstart_lines

  def read_split(self, split: str) -> SplitData:
    data = self._read_split(split)
    self.skipped_rows[data.source] = len(data.skipped)
    return data

  def convert(self, examples) -> Features:
    s = self.settings
    return tagging_features.tagging_features(
        examples,
        self._tokenizer,
        self.label_list,
        s.max_seq_length,
        s.doc_stride,
        s.document_context,
    )

  def prepare(self, splits: Sequence[str]) -> None:
    """Converts `splits`; an eval split without tags is refused (it cannot be scored)."""
    for split in splits:
      if split in self.eval_splits and not any(s.tags for s in self.examples(split)):
        raise InputError(f"{split}: the file has no tags to score")
    super().prepare(splits)

  def predicted_tags(self, split: str, outputs: Dict[str, np.ndarray]) -> List[List[str]]:
    """The tag predicted for every word of every sentence of the split."""
    sentences = self.examples(split)
    ids = tagging_features.gather_word_predictions(
        self.features(split), outputs["logits"], [len(s.words) for s in sentences]
    )
    return [[self.label_list[i] for i in row] for row in ids]

  def evaluate(self, split: str, outputs: Dict[str, np.ndarray]) -> Dict[str, float]:
    sentences = self.examples(split)
    scores = conlleval.conlleval_scores(
        [s.tags for s in sentences], self.predicted_tags(split, outputs)
    )
    return {**{k: float(v) for k, v in scores.items()}, "num_sentences": len(sentences)}

  def write_predictions(
      self, split: str, outputs: Dict[str, np.ndarray], output_dir: str
  ) -> List[str]:
    sentences = self.examples(split)
    predicted = self.predicted_tags(split, outputs)
    with_docstart = self.docstart_lines and len({s.document for s in sentences}) > 1
    labeled = any(s.tags for s in sentences)
    lines: List[str] = []
    previous = None
    for sentence, tags in zip(sentences, predicted):
      if with_docstart and sentence.document != previous:
        lines += [f"{DOCSTART} O O" if labeled else f"{DOCSTART} O", ""]
      previous = sentence.document
      for w, (word, tag) in enumerate(zip(sentence.words, tags)):
        lines.append(f"{word} {sentence.tags[w]} {tag}" if labeled else f"{word} {tag}")
      lines.append("")
    path = os.path.join(output_dir, f"{split}_predictions.txt")
    io_utils.atomic_write_text(path, "\n".join(lines) + ("\n" if lines else ""))
    return [path]
