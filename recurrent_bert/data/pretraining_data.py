"""Raw text -> pretraining instances -> TFRecord shards (google-research/bert semantics).

Input: one sentence per line, a blank line between documents (the end of a file also ends
a document). Output: TFRecords in the SPEC §8 schema (`schema.py`).

Instance building follows BERT's generator:
- per document and per duplication round, a target length of max_seq_length - 3 tokens,
  or with probability `short_seq_prob` a uniform length in [2, max_seq_length - 3];
- sentences are gathered until the target is reached; a random split point makes segment
  A; segment B is the rest (IsNext, label 0) or, with probability 1/2 (and always when only
  one sentence was gathered), text from a random point of *another* document (label 1),
  in which case the unused sentences go back for the next instance;
- the longer segment is truncated, one token at a time from a random end, to fit;
- [CLS] A [SEP] B [SEP], segment ids 0 for [CLS] A [SEP] and 1 for B [SEP].
Without NSP (`use_nsp=False`, the SwishRNN recipe): [CLS] text [SEP], one segment packed
with consecutive whole sentences of one document up to the target length, segment ids 0,
next_sentence_labels 0.

Long lines. A line with more tokens than fit in a sequence (max_seq_length - 3 with NSP,
- 2 without) is cut, after tokenization, into sentence-sized pieces of at most a quarter of
that (`LONG_LINE_PIECES_PER_SEQUENCE`; 31 tokens at max_seq_length 128), which then count
as sentences: each cut goes after the last ".", "!" or "?" in the second half of the
piece, else before the last word start, else (one word longer than a piece) at the
piece's end. So a corpus that is one line per paragraph, or a whole book on one line,
yields as many instances as the same text one sentence per line, in linear time. The
stats report `long_lines_split` and `long_line_pieces`.
Masking is `dynamic_masking.mask_input_ids` — the same function the read-time path uses.

Streaming and parallelism. The main process reads the input once, line by line, and cuts
it into *chunks* of whole documents (about `chunk_bytes` of text each). A chunk is the unit
of work: its instances depend only on its text, the seed and its index, so the output does
not depend on how many workers process the chunks. Workers (spawned processes, each with its
own TensorFlow tokenizer) turn chunks into serialized examples; the main process writes them
in chunk order, instance k of the run going to shard k mod num_output_shards. At most
2 * num_workers chunks are in flight, so memory is flat in the corpus size.

The "random next" document: BERT draws it from the whole corpus, which needs the corpus in
memory. Here it is drawn uniformly from the *other* documents of the same chunk (hundreds
to thousands of documents at the default 1 MiB chunk), a bounded pool that keeps memory
flat; a trailing chunk smaller than half the chunk size is merged into the one before, so
every chunk has other documents unless the whole corpus has a single document (then, as in
BERT, the segment comes from the same document and the stats report it).
"""

import collections
import contextlib
import dataclasses
import os
import random
import re
import sys
import time
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from recurrent_bert.data import io_utils
from recurrent_bert.data.dynamic_masking import MaskingConfig, mask_input_ids

DEFAULT_CHUNK_BYTES = 1 << 20
STATS_FILE = "stats.json"
SHARD_PATTERN = re.compile(r"pretraining-\d{5}-of-\d{5}\.tfrecord")
# Per-file temp names of earlier versions of this tool (io_utils.temp_path_for).
_OLD_TEMP_PATTERN = re.compile(r"\.(pretraining-\d{5}-of-\d{5}\.tfrecord|stats\.json)\..*\.tmp")
# A line longer than a sequence is cut into pieces of at most this fraction of it.
LONG_LINE_PIECES_PER_SEQUENCE = 4
_TOKENIZE_BATCH_SIZE = 2048
_MASK_BATCH_SIZE = 1024


# A tokenized sentence: piece ids and, per piece, whether it starts a word.
Sentence = Tuple[List[int], List[bool]]


@dataclasses.dataclass
class TrainingInstance:
  """One unmasked sequence before padding.

  Attributes:
    token_ids: [CLS] A [SEP] (B [SEP]) ids, length <= max_seq_length.
    word_starts: per token, False for `##` continuation pieces.
    segment_ids: 0 for [CLS] A [SEP], 1 for B [SEP].
    is_random_next: the NSP label (True = 1 = random next).
    truncated_tokens: how many tokens truncation removed.
  """
  token_ids: List[int]
  word_starts: List[bool]
  segment_ids: List[int]
  is_random_next: bool
  truncated_tokens: int = 0


@dataclasses.dataclass
class GeneratorOptions:
  """Everything create_pretraining_data needs; see tools/create_pretraining_data.py flags."""
  input_files: List[str]
  output_files: List[str]
  vocab_file: str
  do_lower_case: bool = True
  max_seq_length: int = 128
  masking: MaskingConfig = dataclasses.field(default_factory=MaskingConfig)
  dupe_factor: int = 10
  short_seq_prob: float = 0.1
  random_seed: int = 12345
  use_nsp: bool = True
  dynamic_masking: bool = False  # True: write unmasked records (mask at read time)
  num_workers: int = 1
  chunk_bytes: int = DEFAULT_CHUNK_BYTES
  stats_file: Optional[str] = None
  show_progress: bool = True
  # Set: output_files are output_dir/shard_names(n) and stats_file output_dir/stats.json,
  # and the folder is replaced as a unit (built beside it, swapped in at the end).
  output_dir: Optional[str] = None

  def validate(self) -> None:
    if self.max_seq_length < (5 if self.use_nsp else 3):
      raise ValueError(f"max_seq_length too small: {self.max_seq_length}")
    if self.dupe_factor < 1:
      raise ValueError(f"dupe_factor must be >= 1, got {self.dupe_factor}")
    if not 0.0 <= self.short_seq_prob <= 1.0:
      raise ValueError(f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}")
    if self.num_workers < 1:
      raise ValueError(f"num_workers must be >= 1, got {self.num_workers}")
    if not self.output_files:
      raise ValueError("no output files")
    if self.masking.max_predictions_per_seq > self.max_seq_length:
      raise ValueError("max_predictions_per_seq must be <= max_seq_length")
    if self.output_dir and (
        [os.path.basename(p) for p in self.output_files] != shard_names(
            len(self.output_files)) or os.path.basename(self.stats_file or "") != STATS_FILE):
      raise ValueError("with output_dir, output_files must be its shard_names() and "
                       "stats_file its stats.json")


# ---------------------------------------------------------------------- the output folder


def shard_names(num_shards: int) -> List[str]:
  """pretraining-SSSSS-of-NNNNN.tfrecord, the names of --output_dir shards."""
  return [f"pretraining-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]


def foreign_output_files(names: Sequence[str]) -> List[str]:
  """The names in an output folder this tool did not make (it replaces the folder whole)."""
  return sorted(n for n in names if not (SHARD_PATTERN.fullmatch(n) or n == STATS_FILE or
                                         _OLD_TEMP_PATTERN.fullmatch(n)))


def check_output_dir(output_dir: str, names: Sequence[str]) -> None:
  """Raises InputError naming the files of `names` (output_dir's listing) not made here."""
  foreign = foreign_output_files(names)
  if foreign:
    shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5
                                      else "")
    raise io_utils.InputError(
        f"--output_dir {output_dir!r} holds files this tool did not make ({shown}); it "
        "replaces the folder as a unit: move them or give another --output_dir")


def prepare_output_dir(output_dir: str) -> List[str]:
  """Checks a local or scheme (gs://) --output_dir and cleans leftovers of killed runs.

  Returns:
    What was cleaned (io_utils.clean_atomic_directory_leftovers), for a log line.
  """
  if "://" in output_dir:
    gfile = io_utils._gfile()  # pylint: disable=protected-access
    if gfile.exists(output_dir):
      if not gfile.isdir(output_dir):
        raise io_utils.InputError(f"--output_dir {output_dir!r} is not a directory")
      check_output_dir(output_dir, [n.rstrip("/") for n in gfile.listdir(output_dir)])
  elif os.path.exists(output_dir):
    if not os.path.isdir(output_dir):
      raise io_utils.InputError(f"--output_dir {output_dir!r} is not a directory")
    check_output_dir(output_dir, os.listdir(output_dir))
  return io_utils.clean_atomic_directory_leftovers(output_dir)


# ----------------------------------------------------------------------------- reading


@dataclasses.dataclass
class Document:
  sentences: List[str]
  source: str  # "file:first_line", for messages


def iter_documents(input_files: Sequence[str],
                   read_lines: Callable[[str], Iterator[Tuple[int, str]]] =
                   io_utils.read_lines_checked) -> Iterator[Document]:
  """Streams documents: runs of non-blank lines, split at blank lines and file ends.

  `read_lines(path)` yields (line number, line); the Beam pipeline passes one that also
  reads remote (gs://, hdfs://) files.
  """
  for path in input_files:
    sentences: List[str] = []
    first_line = 0
    for line_number, line in read_lines(path):
      line = line.strip()
      if line:
        if not sentences:
          first_line = line_number
        sentences.append(line)
      elif sentences:
        yield Document(sentences, f"{path}:{first_line}")
        sentences = []
    if sentences:
      yield Document(sentences, f"{path}:{first_line}")


def document_text_size(sentences: Sequence[str]) -> int:
  """The text size of a document as the stats count it: its lines and the blank line."""
  return sum(len(s) + 1 for s in sentences) + 1


def iter_chunks(documents: Iterator[Document], chunk_bytes: int
                ) -> Iterator[Tuple[List[List[str]], int]]:
  """Groups documents into chunks of about `chunk_bytes` of text.

  Yields:
    (documents as lists of sentences, text bytes of the chunk). A final chunk smaller than
    chunk_bytes / 2 is merged into the previous one (see the module docstring).
  """
  pending: Optional[Tuple[List[List[str]], int]] = None
  current: List[List[str]] = []
  size = 0
  for document in documents:
    current.append(document.sentences)
    size += document_text_size(document.sentences)
    if size >= chunk_bytes:
      if pending is not None:
        yield pending
      pending, current, size = (current, size), [], 0
  if current:
    if pending is not None and size < chunk_bytes // 2:
      pending = (pending[0] + current, pending[1] + size)
    else:
      if pending is not None:
        yield pending
      pending = (current, size)
  if pending is not None:
    yield pending


# ----------------------------------------------------------------------- instance rules


def split_long_sentence(ids: Sequence[int], starts: Sequence[bool], piece_length: int,
                        end_ids: Sequence[int]) -> List[Sentence]:
  """Cuts a sentence into pieces of at most `piece_length` tokens, in O(len(ids)).

  Each cut is after the last sentence end (`end_ids`: ".", "!", "?") in the second half of
  the piece's window, else before the last word start in it, else at the window's end.

  Args:
    ids: piece ids [n]; starts: per piece, whether it starts a word [n].
    piece_length: the longest piece, >= 1.
    end_ids: ids that end a sentence.

  Returns:
    The pieces, in order; their concatenation is (ids, starts).
  """
  ids_array = np.asarray(ids)
  cut_after_end = np.flatnonzero(np.isin(ids_array, list(end_ids))) + 1
  cut_before_word = np.flatnonzero(np.asarray(starts, bool))
  pieces = []
  begin, n = 0, len(ids_array)
  while n - begin > piece_length:
    limit = begin + piece_length
    k = np.searchsorted(cut_after_end, limit, side="right") - 1
    if k >= 0 and cut_after_end[k] > begin + piece_length // 2:
      cut = int(cut_after_end[k])
    else:
      k = np.searchsorted(cut_before_word, limit, side="right") - 1
      cut = int(cut_before_word[k]) if k >= 0 and cut_before_word[k] > begin else limit
    pieces.append((list(ids[begin:cut]), list(starts[begin:cut])))
    begin = cut
  pieces.append((list(ids[begin:]), list(starts[begin:])))
  return pieces


def truncate_seq_pair(tokens_a: Sentence, tokens_b: Sentence, max_num_tokens: int,
                      rng: random.Random) -> Tuple[Sentence, Sentence, int]:
  """Truncates the longer segment, one token at a time from a random end.

  BERT's rule and random draws, but the cuts are counted first and applied as one slice
  per end, so the cost is linear in the segment lengths (deleting list heads one at a
  time was quadratic).

  Returns:
    (truncated a, truncated b, number of tokens removed).
  """
  lengths = [len(tokens_a[0]), len(tokens_b[0])]
  cut = [[0, 0], [0, 0]]  # [segment][front, back]
  removed = 0
  while lengths[0] + lengths[1] > max_num_tokens:
    longer = 0 if lengths[0] > lengths[1] else 1
    # Random end: avoids always cutting the same side, as BERT does.
    cut[longer][0 if rng.random() < 0.5 else 1] += 1
    lengths[longer] -= 1
    removed += 1

  def sliced(tokens, front_back):
    front, back = front_back
    end = len(tokens[0]) - back
    return tokens[0][front:end], tokens[1][front:end]

  return sliced(tokens_a, cut[0]), sliced(tokens_b, cut[1]), removed


def _concat(sentences: Sequence[Sentence]) -> Sentence:
  ids: List[int] = []
  starts: List[bool] = []
  for sentence_ids, sentence_starts in sentences:
    ids.extend(sentence_ids)
    starts.extend(sentence_starts)
  return ids, starts


class InstanceBuilder:
  """Builds TrainingInstances from tokenized documents (BERT rules, module docstring)."""

  def __init__(self, max_seq_length: int, short_seq_prob: float, use_nsp: bool,
               cls_id: int, sep_id: int):
    self.max_seq_length = max_seq_length
    self.short_seq_prob = short_seq_prob
    self.use_nsp = use_nsp
    self.cls_id = cls_id
    self.sep_id = sep_id

  @property
  def max_num_tokens(self) -> int:
    """Tokens of text per sequence: [CLS] A [SEP] B [SEP], or [CLS] text [SEP]."""
    return self.max_seq_length - (3 if self.use_nsp else 2)

  @property
  def piece_length(self) -> int:
    """The longest piece of a split long line (module docstring): about a sentence."""
    return max(1, self.max_num_tokens // LONG_LINE_PIECES_PER_SEQUENCE)

  def split_long_sentences(self, document: List[Sentence], end_ids: Sequence[int],
                           stats: collections.Counter) -> List[Sentence]:
    """The document with every sentence longer than a sequence split (module docstring)."""
    if all(len(ids) <= self.max_num_tokens for ids, _ in document):
      return document
    split = []
    for ids, starts in document:
      if len(ids) <= self.max_num_tokens:
        split.append((ids, starts))
        continue
      pieces = split_long_sentence(ids, starts, self.piece_length, end_ids)
      stats["long_lines_split"] += 1
      stats["long_line_pieces"] += len(pieces)
      split.extend(pieces)
    return split

  def _target_length(self, max_num_tokens: int, rng: random.Random) -> int:
    # Short sequences now and then so the model also sees lengths it meets in fine-tuning.
    if rng.random() < self.short_seq_prob:
      return rng.randint(2, max_num_tokens)
    return max_num_tokens

  def from_document(self, documents: Sequence[Sequence[Sentence]], document_index: int,
                    rng: random.Random) -> List[TrainingInstance]:
    if self.use_nsp:
      return self._nsp_instances(documents, document_index, rng)
    return self._packed_instances(documents[document_index], rng)

  def _make(self, segment_a: Sentence, segment_b: Optional[Sentence], is_random_next: bool,
            truncated: int) -> TrainingInstance:
    ids = [self.cls_id] + segment_a[0] + [self.sep_id]
    starts = [True] + segment_a[1] + [True]
    segment_ids = [0] * len(ids)
    if segment_b is not None:
      ids += segment_b[0] + [self.sep_id]
      starts += segment_b[1] + [True]
      segment_ids += [1] * (len(segment_b[0]) + 1)
    return TrainingInstance(ids, starts, segment_ids, is_random_next, truncated)

  def _nsp_instances(self, documents, document_index, rng) -> List[TrainingInstance]:
    document = documents[document_index]
    max_num_tokens = self.max_seq_length - 3  # [CLS], [SEP], [SEP]
    target_length = self._target_length(max_num_tokens, rng)
    instances = []
    current: List[Sentence] = []
    current_length = 0
    i = 0
    while i < len(document):
      current.append(document[i])
      current_length += len(document[i][0])
      if i == len(document) - 1 or current_length >= target_length:
        a_end = rng.randint(1, len(current) - 1) if len(current) >= 2 else 1
        segment_a = _concat(current[:a_end])
        if len(current) == 1 or rng.random() < 0.5:
          is_random_next = True
          target_b_length = target_length - len(segment_a[0])
          random_document = documents[self._other_document(len(documents), document_index,
                                                           rng)]
          start = rng.randint(0, len(random_document) - 1)
          # At least one sentence, then up to the target. By index, not by copying
          # random_document[start:] per instance, which made long documents quadratic.
          end, taken_length = start + 1, len(random_document[start][0])
          while end < len(random_document) and taken_length < target_b_length:
            taken_length += len(random_document[end][0])
            end += 1
          segment_b = _concat(random_document[start:end])
          # The sentences after A were not used: they start the next instance.
          i -= len(current) - a_end
        else:
          is_random_next = False
          segment_b = _concat(current[a_end:])
        segment_a, segment_b, truncated = truncate_seq_pair(segment_a, segment_b,
                                                            max_num_tokens, rng)
        instances.append(self._make(segment_a, segment_b, is_random_next, truncated))
        current, current_length = [], 0
      i += 1
    return instances

  @staticmethod
  def _other_document(num_documents: int, document_index: int, rng: random.Random) -> int:
    if num_documents < 2:
      return document_index  # nothing else to draw from (reported in the stats)
    other = rng.randint(0, num_documents - 2)
    return other + 1 if other >= document_index else other

  def _packed_instances(self, document, rng) -> List[TrainingInstance]:
    max_num_tokens = self.max_seq_length - 2  # [CLS], [SEP]
    target_length = self._target_length(max_num_tokens, rng)
    instances = []
    current: List[Sentence] = []
    current_length = 0

    def flush():
      if current:
        instances.append(self._make(_concat(current), None, False, 0))

    for ids, starts in document:  # no longer than a sequence: see split_long_sentences
      if current_length + len(ids) > target_length:
        flush()
        current, current_length = [], 0
      current.append((ids, starts))
      current_length += len(ids)
    flush()
    return instances


# -------------------------------------------------------------------------- the worker


class ChunkProcessor:
  """Turns a chunk of raw documents into serialized tf.train.Examples (one process)."""

  def __init__(self, options: GeneratorOptions):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from recurrent_bert.data.tokenization import BertWordpieceTokenizer

    self.tf = tf
    self.options = options
    self.tokenizer = BertWordpieceTokenizer(options.vocab_file, options.do_lower_case)
    self.builder = InstanceBuilder(options.max_seq_length, options.short_seq_prob,
                                   options.use_nsp, self.tokenizer.cls_id,
                                   self.tokenizer.sep_id)
    tokenizer = self.tokenizer
    # Sentence ends, where a long line is preferably cut (ids absent from the vocab: none).
    self._end_ids = [i for i in tokenizer.convert_tokens_to_ids([".", "!", "?"])
                     if i != tokenizer.unk_id]
    masking = options.masking
    self._tokenize = tf.function(tokenizer.tokenize, input_signature=[
        tf.TensorSpec([None], tf.string)])

    @tf.function(reduce_retracing=True)
    def mask(ids, input_mask, word_starts, seed):
      return mask_input_ids(ids, input_mask, word_starts, seed, masking,
                            vocab_size=tokenizer.vocab_size, mask_id=tokenizer.mask_id,
                            cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id)

    self._mask = mask

  def tokenize_documents(self, documents: Sequence[Sequence[str]]
                         ) -> List[List[Sentence]]:
    """Tokenizes every sentence (in large batches); drops sentences with no tokens."""
    flat = [s for document in documents for s in document]
    sentences: List[Sentence] = []
    for begin in range(0, len(flat), _TOKENIZE_BATCH_SIZE):
      pieces = self._tokenize(self.tf.constant(flat[begin:begin + _TOKENIZE_BATCH_SIZE]))
      ids = pieces.flat_values.numpy().tolist()
      word_splits = pieces.values.row_splits.numpy()  # piece offsets of the words
      sentence_splits = pieces.row_splits.numpy()  # word offsets of the sentences
      starts = np.zeros(len(ids), dtype=bool)
      starts[word_splits[:-1][np.diff(word_splits) > 0]] = True
      starts = starts.tolist()
      piece_bounds = word_splits[sentence_splits]
      for k in range(len(sentence_splits) - 1):
        lo, hi = int(piece_bounds[k]), int(piece_bounds[k + 1])
        sentences.append((ids[lo:hi], starts[lo:hi]))
    tokenized: List[List[Sentence]] = []
    cursor = 0
    for document in documents:
      kept = [s for s in sentences[cursor:cursor + len(document)] if s[0]]
      cursor += len(document)
      if kept:
        tokenized.append(kept)
    return tokenized

  def process(self, chunk_index: int, documents: List[List[str]]
              ) -> Tuple[List[bytes], Dict[str, int]]:
    """Returns (serialized examples in output order, counters for the stats report)."""
    options = self.options
    stats = collections.Counter()
    tokenized = [self.builder.split_long_sentences(d, self._end_ids, stats)
                 for d in self.tokenize_documents(documents)]
    stats["documents"] += len(documents)
    stats["documents_without_tokens"] += len(documents) - len(tokenized)
    stats["sentences"] += sum(len(d) for d in documents)
    stats["input_tokens"] += sum(len(s[0]) for d in tokenized for s in d)
    if len(tokenized) < 2 and options.use_nsp:
      stats["chunks_with_single_document"] += 1
    # Seeded by (seed, chunk): independent of the number of workers.
    rng = random.Random(f"{options.random_seed}:{chunk_index}")
    instances: List[TrainingInstance] = []
    for _ in range(options.dupe_factor):
      for document_index in range(len(tokenized)):
        instances.extend(self.builder.from_document(tokenized, document_index, rng))
    rng.shuffle(instances)
    serialized = []
    for batch_index, begin in enumerate(range(0, len(instances), _MASK_BATCH_SIZE)):
      serialized.extend(self._serialize_batch(
          instances[begin:begin + _MASK_BATCH_SIZE], (chunk_index, batch_index), stats))
    return serialized, dict(stats)

  def _serialize_batch(self, instances: List[TrainingInstance], seed_parts: Tuple[int, int],
                       stats: collections.Counter) -> List[bytes]:
    from recurrent_bert.data import schema  # pylint: disable=g-import-not-at-top

    options = self.options
    n, length = len(instances), options.max_seq_length
    input_ids = np.zeros([n, length], np.int64)
    input_mask = np.zeros([n, length], np.int64)
    segment_ids = np.zeros([n, length], np.int64)
    word_starts = np.ones([n, length], bool)
    for row, instance in enumerate(instances):
      size = len(instance.token_ids)
      input_ids[row, :size] = instance.token_ids
      input_mask[row, :size] = 1
      segment_ids[row, :size] = instance.segment_ids
      word_starts[row, :size] = instance.word_starts
      stats["instance_tokens"] += size
      stats["truncated_instances"] += instance.truncated_tokens > 0
      stats["truncated_tokens"] += instance.truncated_tokens
      stats["random_next"] += instance.is_random_next
    stats["instances"] += n
    nsp = np.array([[int(x.is_random_next)] for x in instances], np.int64).reshape([n, 1])
    if options.dynamic_masking:
      return [schema.serialize_example({
          "input_ids": input_ids[r], "input_mask": input_mask[r],
          "segment_ids": segment_ids[r], "next_sentence_labels": nsp[r]}) for r in range(n)]
    chunk_index, batch_index = seed_parts
    seed = self.tf.constant([options.random_seed, chunk_index * 65536 + batch_index],
                            self.tf.int64)
    masked = {k: v.numpy() for k, v in self._mask(
        self.tf.constant(input_ids), self.tf.constant(input_mask),
        self.tf.constant(word_starts), seed).items()}
    weights = masked["masked_lm_weights"]
    positions = masked["masked_lm_positions"]
    real = weights > 0
    new_ids = np.take_along_axis(masked["input_ids"], positions, axis=1)[real]
    old_ids = masked["masked_lm_ids"][real]
    stats["masked_positions"] += int(real.sum())
    stats["masked_as_mask_token"] += int((new_ids == self.tokenizer.mask_id).sum())
    stats["masked_kept"] += int((new_ids == old_ids).sum())
    stats["masked_as_random_token"] += int(((new_ids != old_ids) &
                                            (new_ids != self.tokenizer.mask_id)).sum())
    return [schema.serialize_example({
        "input_ids": masked["input_ids"][r], "input_mask": input_mask[r],
        "segment_ids": segment_ids[r], "masked_lm_positions": positions[r],
        "masked_lm_ids": masked["masked_lm_ids"][r], "masked_lm_weights": weights[r],
        "next_sentence_labels": nsp[r]}) for r in range(n)]


_WORKER: Optional[ChunkProcessor] = None


def _init_worker(options: GeneratorOptions) -> None:
  global _WORKER
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  _WORKER = ChunkProcessor(options)


def _process_in_worker(chunk_index: int, documents: List[List[str]]):
  return _WORKER.process(chunk_index, documents)


# ---------------------------------------------------------------------------- the driver


def _summarize(counters: collections.Counter, options: GeneratorOptions, seconds: float,
               text_bytes: int) -> Dict:
  def ratio(a, b):
    return (counters[a] / counters[b]) if counters[b] else 0.0
  instances = counters["instances"]
  return {
      "documents": counters["documents"],
      "documents_without_tokens": counters["documents_without_tokens"],
      "sentences": counters["sentences"],
      "input_tokens": counters["input_tokens"],
      "input_text_bytes": text_bytes,
      "instances": instances,
      "instance_tokens": counters["instance_tokens"],
      "mean_tokens_per_instance": ratio("instance_tokens", "instances"),
      "truncated_instances": counters["truncated_instances"],
      "truncation_rate": ratio("truncated_instances", "instances"),
      "truncated_tokens": counters["truncated_tokens"],
      "long_lines_split": counters["long_lines_split"],
      "long_line_pieces": counters["long_line_pieces"],
      "masked_positions": counters["masked_positions"],
      "masked_fraction": ratio("masked_positions", "instance_tokens"),
      "masked_as_mask_token": ratio("masked_as_mask_token", "masked_positions"),
      "masked_as_random_token": ratio("masked_as_random_token", "masked_positions"),
      "masked_kept": ratio("masked_kept", "masked_positions"),
      "random_next": counters["random_next"],
      "random_next_fraction": ratio("random_next", "instances"),
      "chunks": counters["chunks"],
      "chunks_with_single_document": counters["chunks_with_single_document"],
      "num_output_shards": len(options.output_files),
      "num_workers": options.num_workers,
      "dynamic_masking": options.dynamic_masking,
      "seconds": round(seconds, 3),
      "documents_per_second": counters["documents"] / seconds if seconds else 0.0,
      "instances_per_second": instances / seconds if seconds else 0.0,
      "text_megabytes_per_second": text_bytes / 1e6 / seconds if seconds else 0.0,
      "options": {
          "input_files": list(options.input_files), "vocab_file": options.vocab_file,
          "do_lower_case": options.do_lower_case, "max_seq_length": options.max_seq_length,
          "max_predictions_per_seq": options.masking.max_predictions_per_seq,
          "masked_lm_prob": options.masking.masked_lm_prob,
          "mask_token_prob": options.masking.mask_token_prob,
          "random_token_prob": options.masking.random_token_prob,
          "do_whole_word_mask": options.masking.whole_word_mask,
          "dupe_factor": options.dupe_factor, "short_seq_prob": options.short_seq_prob,
          "random_seed": options.random_seed, "use_nsp": options.use_nsp,
      },
  }


def create_pretraining_data(options: GeneratorOptions) -> Dict:
  """Runs the whole generator: reads, builds, masks, writes shards and the stats JSON.

  Args:
    options: GeneratorOptions (input files already expanded, output shard paths).

  Returns:
    The stats dict (also written as JSON to options.stats_file when set).

  Raises:
    io_utils.InputError: unreadable or non-UTF-8 input (file and line named), a vocabulary
      without the reserved tokens, or an input without any document.
  """
  from recurrent_bert.data.tokenization import load_vocab  # pylint: disable=g-import-not-at-top

  options.validate()
  load_vocab(options.vocab_file)  # fail before any work on a bad vocabulary
  total_bytes = sum(os.path.getsize(p) for p in options.input_files)
  if options.output_dir:
    for cleaned in prepare_output_dir(options.output_dir):
      print(f"removed the leftover of a killed run: {cleaned}", file=sys.stderr)
    staging = io_utils.atomic_directory(options.output_dir)
  else:
    staging = contextlib.nullcontext(None)
  start = time.time()
  with staging as stage_dir:
    if stage_dir is None:  # explicit --output_files: each file is replaced atomically
      with contextlib.ExitStack() as stack:
        temp_paths = [stack.enter_context(io_utils.atomic_output(p))
                      for p in options.output_files]
        counters, text_bytes = _generate(options, temp_paths, total_bytes, start)
    else:  # the whole folder is staged: nobody reads it before the swap
      counters, text_bytes = _generate(
          options, [os.path.join(stage_dir, os.path.basename(p)) for p in options.output_files],
          total_bytes, start)
    stats = _summarize(counters, options, time.time() - start, text_bytes)
    if stage_dir is not None:
      io_utils.atomic_write_json(os.path.join(stage_dir, STATS_FILE), stats)
  if stage_dir is None and options.stats_file:
    io_utils.atomic_write_json(options.stats_file, stats)
  return stats


def _generate(options: GeneratorOptions, paths: Sequence[str], total_bytes: int,
              start: float) -> Tuple[collections.Counter, int]:
  """Writes the shards to `paths`; returns (counters, text bytes read)."""
  import multiprocessing  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  num_shards = len(paths)
  counters: collections.Counter = collections.Counter()
  pool = None
  progress = None
  text_bytes = 0
  writers = [tf.io.TFRecordWriter(p) for p in paths]
  try:
    if options.show_progress:
      from tqdm import tqdm  # pylint: disable=g-import-not-at-top
      progress = tqdm(total=total_bytes, unit="B", unit_scale=True, smoothing=0.1,
                      desc="create_pretraining_data", dynamic_ncols=True)
    chunks = iter_chunks(iter_documents(options.input_files), options.chunk_bytes)
    if options.num_workers == 1:
      processor = ChunkProcessor(options)
      results = ((processor.process(i, docs), size) for i, (docs, size) in enumerate(chunks))
    else:
      pool = multiprocessing.get_context("spawn").Pool(
          options.num_workers, initializer=_init_worker, initargs=(options,))
      results = _bounded_imap(pool, chunks, 2 * options.num_workers)
    written = 0
    for (serialized, chunk_stats), size in results:
      counters.update(chunk_stats)
      counters["chunks"] += 1
      for record in serialized:
        writers[written % num_shards].write(record)
        written += 1
      text_bytes += size
      if progress is not None:
        progress.update(min(size, total_bytes - progress.n))
        elapsed = max(time.time() - start, 1e-9)
        progress.set_postfix(docs=counters["documents"],
                             docs_per_s=f"{counters['documents'] / elapsed:.0f}",
                             instances=written, refresh=False)
    if counters["documents"] - counters["documents_without_tokens"] == 0:
      raise io_utils.InputError(
          "the input has no document with any text: " + ", ".join(options.input_files) +
          " (expected one sentence per line, a blank line between documents)")
  finally:
    for writer in writers:
      writer.close()
    if progress is not None:
      progress.close()
    if pool is not None:
      pool.terminate()
      pool.join()
  return counters, text_bytes


def _bounded_imap(pool, chunks, max_in_flight: int):
  """Like pool.imap over enumerate(chunks), but reads ahead at most max_in_flight chunks."""
  pending = collections.deque()
  for index, (documents, size) in enumerate(chunks):
    pending.append((pool.apply_async(_process_in_worker, (index, documents)), size))
    if len(pending) >= max_in_flight:
      result, result_size = pending.popleft()
      yield result.get(), result_size
  while pending:
    result, result_size = pending.popleft()
    yield result.get(), result_size


def format_stats(stats: Dict) -> str:
  """A human-readable report of the stats dict."""
  lines = [
      f"documents        {stats['documents']:,} ({stats['sentences']:,} sentences, "
      f"{stats['input_text_bytes'] / 1e6:.1f} MB of text, {stats['input_tokens']:,} tokens)",
      f"instances        {stats['instances']:,} in {stats['num_output_shards']} shard(s), "
      f"{stats['mean_tokens_per_instance']:.1f} tokens each on average",
      f"truncation       {stats['truncation_rate']:.2%} of instances, "
      f"{stats['truncated_tokens']:,} tokens",
      f"random next      {stats['random_next_fraction']:.2%} (NSP label 1)",
  ]
  if not stats["dynamic_masking"]:
    lines.append(
        f"masked           {stats['masked_fraction']:.2%} of tokens: "
        f"{stats['masked_as_mask_token']:.1%} [MASK], "
        f"{stats['masked_as_random_token']:.1%} random, {stats['masked_kept']:.1%} kept")
  else:
    lines.append("masked           none (unmasked records for dynamic masking)")
  lines.append(f"throughput       {stats['documents_per_second']:.0f} documents/s, "
               f"{stats['instances_per_second']:.0f} instances/s, "
               f"{stats['text_megabytes_per_second']:.2f} MB/s in {stats['seconds']:.1f} s")
  return "\n".join(lines)
