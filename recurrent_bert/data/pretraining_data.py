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
Masking is `masking.mask_batch`, the numpy twin of the read-time `dynamic_masking`
function (same rules, checked by the same tests).

Streaming and parallelism. The main process reads the input once, line by line, and cuts
it into *chunks* of whole documents (about `chunk_bytes` of text each). A chunk is the unit
of work: its instances depend only on its text, the seed and its index, so the output does
not depend on how many workers process the chunks. Workers (processes, forked where safe,
started first so their start-up overlaps the reading) turn chunks into TFRecord-framed examples
without TensorFlow: the native tokenizer over the whole chunk (WordPiece, or a SentencePiece
`.model` through the `sentencepiece` package), instances as token spans,
then filling, masking and serialisation by numpy over batches (`ChunkProcessor`). The main
process appends them to the shards in chunk order, instance k of the run going to shard
k mod num_output_shards. At most 2 * num_workers chunks are in flight, so memory is flat in
the corpus size. The stats report the seconds spent per stage (`stage_seconds`).

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

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert.data.masking import MaskingConfig
from recurrent_bert.data.vocab import vocab_kind
from recurrent_bert.errors import InputError

DEFAULT_CHUNK_BYTES = 1 << 20
STATS_FILE = "stats.json"
SHARD_PATTERN = re.compile(r"pretraining-\d{5}-of-\d{5}\.tfrecord")
# Per-file temp names of earlier versions of this tool (io_utils.temp_path_for).
_OLD_TEMP_PATTERN = re.compile(r"\.(pretraining-\d{5}-of-\d{5}\.tfrecord|stats\.json)\..*\.tmp")
# A line longer than a sequence is cut into pieces of at most this fraction of it.
LONG_LINE_PIECES_PER_SEQUENCE = 4
_MASK_BATCH_SIZE = 2048


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
        [os.path.basename(p) for p in self.output_files] != shard_names(len(self.output_files))
        or os.path.basename(self.stats_file or "") != STATS_FILE
    ):
      raise ValueError(
          "with output_dir, output_files must be its shard_names() and stats_file its stats.json"
      )


# ---------------------------------------------------------------------- the output folder


def shard_names(num_shards: int) -> List[str]:
  """pretraining-SSSSS-of-NNNNN.tfrecord, the names of --output_dir shards."""
  return [f"pretraining-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]


def foreign_output_files(names: Sequence[str]) -> List[str]:
  """The names in an output folder this tool did not make (it replaces the folder whole)."""
  return sorted(
      n
      for n in names
      if not (SHARD_PATTERN.fullmatch(n) or n == STATS_FILE or _OLD_TEMP_PATTERN.fullmatch(n))
  )


def check_output_dir(output_dir: str, names: Sequence[str]) -> None:
  """Raises InputError naming the files of `names` (output_dir's listing) not made here."""
  foreign = foreign_output_files(names)
  if foreign:
    shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    raise InputError(
        f"--output_dir {output_dir!r} holds files this tool did not make ({shown}); it "
        "replaces the folder as a unit: move them or give another --output_dir"
    )


def prepare_output_dir(output_dir: str) -> List[str]:
  """Checks a local or scheme (gs://) --output_dir and cleans leftovers of killed runs.

  Returns:
    What was cleaned (io_utils.clean_atomic_directory_leftovers), for a log line.
  """
  if layout.has_scheme(output_dir):
    gfile = layout.gfile()
    if gfile.exists(output_dir):
      if not gfile.isdir(output_dir):
        raise InputError(f"--output_dir {output_dir!r} is not a directory")
      check_output_dir(output_dir, [n.rstrip("/") for n in gfile.listdir(output_dir)])
  elif os.path.exists(output_dir):
    if not os.path.isdir(output_dir):
      raise InputError(f"--output_dir {output_dir!r} is not a directory")
    check_output_dir(output_dir, os.listdir(output_dir))
  return io_utils.clean_atomic_directory_leftovers(output_dir)


# ----------------------------------------------------------------------------- reading


@dataclasses.dataclass
class Document:
  sentences: List[str]
  source: str  # "file:first_line", for messages


def iter_documents(
    input_files: Sequence[str],
    read_lines: Callable[[str], Iterator[Tuple[int, str]]] = io_utils.read_lines_checked,
) -> Iterator[Document]:
  """Streams documents: runs of non-blank lines, split at blank lines and file ends.

  `read_lines(path)` yields (line number, line); the default ends lines at \n, \r\n or a
  lone \r (io_utils.read_lines_checked), so a corpus with old Mac line ends is its
  sentences, not one. The Beam pipeline passes one that also reads remote (gs://, hdfs://)
  files.
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


def iter_chunks(
    documents: Iterator[Document], chunk_bytes: int
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
#
# A chunk's tokens are one flat array; a sentence is a span (begin, end) of it, and the
# sentences of a document are adjacent spans. Segment A (consecutive sentences) and segment
# B (the rest, or consecutive sentences of another document) are therefore each one span,
# and so is a truncated segment: an instance is four ints, and the [batch, max_seq_length]
# arrays are gathered from the flat tokens by array operations (`fill_instances`).

Span = Tuple[int, int]


def split_long_sentence(
    ids: np.ndarray, starts: np.ndarray, piece_length: int, end_ids: Sequence[int]
) -> List[Span]:
  """Cuts a sentence into pieces of at most `piece_length` tokens, in O(len(ids)).

  Each cut is after the last sentence end (`end_ids`: ".", "!", "?") in the second half of
  the piece's window, else before the last word start in it, else at the window's end.

  Args:
    ids: piece ids [n]; starts: per piece, whether it starts a word [n].
    piece_length: the longest piece, >= 1.
    end_ids: ids that end a sentence.

  Returns:
    The pieces as spans of the sentence, in order, covering it.
  """
  cut_after_end = np.flatnonzero(np.isin(ids, list(end_ids))) + 1
  cut_before_word = np.flatnonzero(np.asarray(starts, bool))
  pieces = []
  begin, n = 0, len(ids)
  while n - begin > piece_length:
    limit = begin + piece_length
    k = np.searchsorted(cut_after_end, limit, side="right") - 1
    if k >= 0 and cut_after_end[k] > begin + piece_length // 2:
      cut = int(cut_after_end[k])
    else:
      k = np.searchsorted(cut_before_word, limit, side="right") - 1
      cut = int(cut_before_word[k]) if k >= 0 and cut_before_word[k] > begin else limit
    pieces.append((begin, cut))
    begin = cut
  pieces.append((begin, n))
  return pieces


def truncate_seq_pair(
    span_a: Span, span_b: Span, max_num_tokens: int, rng: random.Random
) -> Tuple[Span, Span, int]:
  """Truncates the longer segment, one token at a time from a random end, in O(1).

  BERT's loop removes a token from the longer segment (from b on a tie) until the pair
  fits, each from the front or the back with probability 1/2. Which segment loses how
  many tokens does not depend on the coin flips, so it is computed directly; the number
  taken from the front of a segment losing k tokens is then Binomial(k, 1/2), drawn as the
  number of set bits of k random bits: the same distribution as the loop's, without a
  Python step (and a random draw) per token.

  Returns:
    (truncated span a, truncated span b, number of tokens removed).
  """
  length_a, length_b = span_a[1] - span_a[0], span_b[1] - span_b[0]
  excess = length_a + length_b - max_num_tokens
  if excess <= 0:
    return span_a, span_b, 0
  gap = abs(length_a - length_b)
  if gap >= excess:  # the longer one loses it all
    cut_a, cut_b = (excess, 0) if length_a > length_b else (0, excess)
  else:  # the longer one comes down to a tie, then they alternate, b first
    rest = excess - gap
    cut_a = rest // 2 + (gap if length_a > length_b else 0)
    cut_b = rest - rest // 2 + (gap if length_b > length_a else 0)

  def cut(span, count):
    if count == 0:
      return span
    front = bin(rng.getrandbits(count)).count("1")
    return span[0] + front, span[1] - (count - front)

  return cut(span_a, cut_a), cut(span_b, cut_b), excess


class InstanceBuilder:
  """Builds instances from documents of sentence spans (BERT rules, module docstring).

  An instance is (a_begin, a_end, b_begin, b_end, is_random_next, truncated_tokens), spans
  of the chunk's flat tokens; without NSP, b is (0, 0).
  """

  def __init__(self, max_seq_length: int, short_seq_prob: float, use_nsp: bool):
    self.max_seq_length = max_seq_length
    self.short_seq_prob = short_seq_prob
    self.use_nsp = use_nsp

  @property
  def max_num_tokens(self) -> int:
    """Tokens of text per sequence: [CLS] A [SEP] B [SEP], or [CLS] text [SEP]."""
    return self.max_seq_length - (3 if self.use_nsp else 2)

  @property
  def piece_length(self) -> int:
    """The longest piece of a split long line (module docstring): about a sentence."""
    return max(1, self.max_num_tokens // LONG_LINE_PIECES_PER_SEQUENCE)

  def split_long_sentences(
      self,
      document: List[Span],
      ids: np.ndarray,
      starts: np.ndarray,
      end_ids: Sequence[int],
      stats: collections.Counter,
  ) -> List[Span]:
    """The document with every sentence longer than a sequence split (module docstring)."""
    if all(end - begin <= self.max_num_tokens for begin, end in document):
      return document
    split = []
    for begin, end in document:
      if end - begin <= self.max_num_tokens:
        split.append((begin, end))
        continue
      pieces = split_long_sentence(ids[begin:end], starts[begin:end], self.piece_length, end_ids)
      stats["long_lines_split"] += 1
      stats["long_line_pieces"] += len(pieces)
      split.extend((begin + a, begin + b) for a, b in pieces)
    return split

  def _target_length(self, max_num_tokens: int, rng: random.Random) -> int:
    # Short sequences now and then so the model also sees lengths it meets in fine-tuning.
    if rng.random() < self.short_seq_prob:
      return rng.randint(2, max_num_tokens)
    return max_num_tokens

  def from_document(
      self, documents: Sequence[Sequence[Span]], document_index: int, rng: random.Random
  ) -> List[Tuple]:
    if self.use_nsp:
      return self._nsp_instances(documents, document_index, rng)
    return self._packed_instances(documents[document_index], rng)

  def _nsp_instances(self, documents, document_index, rng) -> List[Tuple]:
    document = documents[document_index]
    max_num_tokens = self.max_num_tokens
    target_length = self._target_length(max_num_tokens, rng)
    instances = []
    first = 0  # the first sentence of the instance being gathered
    current_length = 0
    i = 0
    while i < len(document):
      current_length += document[i][1] - document[i][0]
      if i == len(document) - 1 or current_length >= target_length:
        count = i - first + 1
        a_end = rng.randint(1, count - 1) if count >= 2 else 1
        span_a = (document[first][0], document[first + a_end - 1][1])
        if count == 1 or rng.random() < 0.5:
          is_random_next = True
          target_b_length = target_length - (span_a[1] - span_a[0])
          random_document = documents[self._other_document(len(documents), document_index, rng)]
          start = rng.randint(0, len(random_document) - 1)
          # At least one sentence, then up to the target.
          end = start + 1
          taken_length = random_document[start][1] - random_document[start][0]
          while end < len(random_document) and taken_length < target_b_length:
            taken_length += random_document[end][1] - random_document[end][0]
            end += 1
          span_b = (random_document[start][0], random_document[end - 1][1])
          # The sentences after A were not used: they start the next instance.
          i = first + a_end - 1
        else:
          is_random_next = False
          span_b = (document[first + a_end][0], document[i][1])
        span_a, span_b, truncated = truncate_seq_pair(span_a, span_b, max_num_tokens, rng)
        instances.append((*span_a, *span_b, is_random_next, truncated))
        first, current_length = i + 1, 0
      i += 1
    return instances

  @staticmethod
  def _other_document(num_documents: int, document_index: int, rng: random.Random) -> int:
    if num_documents < 2:
      return document_index  # nothing else to draw from (reported in the stats)
    other = rng.randint(0, num_documents - 2)
    return other + 1 if other >= document_index else other

  def _packed_instances(self, document, rng) -> List[Tuple]:
    target_length = self._target_length(self.max_num_tokens, rng)
    instances = []
    begin = end = None
    for sentence_begin, sentence_end in document:  # each fits: see split_long_sentences
      if begin is not None and (end - begin) + (sentence_end - sentence_begin) > target_length:
        instances.append((begin, end, 0, 0, False, 0))
        begin = None
      if begin is None:
        begin = sentence_begin
      end = sentence_end
    if begin is not None:
      instances.append((begin, end, 0, 0, False, 0))
    return instances


def fill_instances(
    instances: np.ndarray,
    ids: np.ndarray,
    starts: np.ndarray,
    max_seq_length: int,
    use_nsp: bool,
    cls_id: int,
    sep_id: int,
) -> Dict[str, np.ndarray]:
  """[CLS] A [SEP] (B [SEP]) rows, gathered from the flat tokens by array operations.

  Args:
    instances: int64 [n, 6] rows of InstanceBuilder instances.
    ids, starts: the chunk's flat piece ids and word-start flags [tokens].
    max_seq_length, use_nsp, cls_id, sep_id: the sequence layout.

  Returns:
    input_ids, input_mask, segment_ids int64 [n, max_seq_length]; word_starts bool
    [n, max_seq_length]; next_sentence_labels int64 [n, 1].
  """
  a_begin, a_end, b_begin, b_end = (instances[:, k : k + 1] for k in range(4))
  len_a, len_b = a_end - a_begin, b_end - b_begin
  t = np.arange(max_seq_length)[None, :]
  in_a = (t >= 1) & (t <= len_a)
  in_b = (t >= len_a + 2) & (t < len_a + 2 + len_b)
  size = len_a + 2 + (len_b + 1 if use_nsp else 0)
  last = max(len(ids) - 1, 0)
  source = np.where(in_a, a_begin + t - 1, np.where(in_b, b_begin + t - len_a - 2, 0))
  source = np.clip(source, 0, last)
  text = in_a | in_b
  is_sep = (t == len_a + 1) | ((t == size - 1) & use_nsp)
  input_ids = np.where(text, ids[source], 0)
  input_ids = np.where(is_sep, sep_id, np.where(t == 0, cls_id, input_ids))
  real = t < size
  return {
      "input_ids": input_ids.astype(np.int64),
      "input_mask": real.astype(np.int64),
      "segment_ids": ((t >= len_a + 2) & real).astype(np.int64),
      "word_starts": np.where(text, starts[source], True),
      "next_sentence_labels": instances[:, 4:5].astype(np.int64),
  }


# -------------------------------------------------------------------------- the worker


class ChunkProcessor:
  """Turns a chunk of raw documents into framed TFRecords (one process, no TensorFlow).

  Tokenization is the native tokenizer over the whole chunk, instances are spans, and
  filling, masking (`masking.mask_batch`) and serialisation (`example_codec`) are numpy
  over batches of instances.
  """

  def __init__(self, options: GeneratorOptions):
    from recurrent_bert.data.native_tokenizer import make_native_tokenizer

    self.options = options
    self.tokenizer = make_native_tokenizer(options.vocab_file, options.do_lower_case)
    self.builder = InstanceBuilder(options.max_seq_length, options.short_seq_prob, options.use_nsp)
    # Sentence ends, where a long line is preferably cut (ids absent from the vocab: none).
    self._end_ids = [
        self.tokenizer.token_id(t)
        for t in (".", "!", "?")
        if self.tokenizer.token_id(t) != self.tokenizer.unk_id
    ]
    self.stage_seconds: collections.Counter = collections.Counter()

  def tokenize_documents(
      self, documents: Sequence[Sequence[str]]
  ) -> Tuple[np.ndarray, np.ndarray, List[List[Span]]]:
    """Tokenizes the chunk in one call.

    Returns:
      (ids int32 [tokens], word starts bool [tokens], documents as lists of sentence spans);
      sentences without tokens are dropped, and documents left without sentences.
    """
    flat = [s for document in documents for s in document]
    ids, splits = self.tokenizer.tokenize(flat)
    starts = self.tokenizer.is_word_start[ids]
    bounds = splits.tolist()
    tokenized: List[List[Span]] = []
    cursor = 0
    for document in documents:
      spans = [
          (bounds[k], bounds[k + 1])
          for k in range(cursor, cursor + len(document))
          if bounds[k + 1] > bounds[k]
      ]
      cursor += len(document)
      if spans:
        tokenized.append(spans)
    return ids, starts, tokenized

  def process(
      self, chunk_index: int, documents: List[List[str]], frame: bool = True
  ) -> Tuple[bytes, np.ndarray, Dict[str, int]]:
    """Returns (records in output order, their offsets [n + 1], counters).

    The records are TFRecord-framed (ready to append to a shard) with `frame`, else bare
    serialized tf.train.Examples (for writers that frame them, e.g. Beam's).
    """
    options = self.options
    stats = collections.Counter()
    clock = time.perf_counter()
    ids, starts, tokenized = self.tokenize_documents(documents)
    clock = self._lap("tokenization", clock)
    tokenized = [
        self.builder.split_long_sentences(d, ids, starts, self._end_ids, stats) for d in tokenized
    ]
    stats["documents"] += len(documents)
    stats["documents_without_tokens"] += len(documents) - len(tokenized)
    stats["sentences"] += sum(len(d) for d in documents)
    stats["input_tokens"] += len(ids)
    if len(tokenized) < 2 and options.use_nsp:
      stats["chunks_with_single_document"] += 1
    # Seeded by (seed, chunk): independent of the number of workers.
    rng = random.Random(f"{options.random_seed}:{chunk_index}")
    instances: List[Tuple] = []
    for _ in range(options.dupe_factor):
      for document_index in range(len(tokenized)):
        instances.extend(self.builder.from_document(tokenized, document_index, rng))
    rng.shuffle(instances)
    table = np.array(instances, np.int64).reshape(-1, 6)
    clock = self._lap("instance building", clock)
    framed, offsets = [], [np.zeros(1, np.int64)]
    for batch_index, begin in enumerate(range(0, len(table), _MASK_BATCH_SIZE)):
      data, batch_offsets = self._serialize_batch(
          table[begin : begin + _MASK_BATCH_SIZE],
          ids,
          starts,
          (chunk_index, batch_index),
          stats,
          frame,
      )
      offsets.append(batch_offsets[1:] + sum(len(f) for f in framed))
      framed.append(data)
    return b"".join(framed), np.concatenate(offsets), dict(stats)

  def _lap(self, stage: str, clock: float) -> float:
    now = time.perf_counter()
    self.stage_seconds[stage] += now - clock
    return now

  def _serialize_batch(
      self,
      instances: np.ndarray,
      ids: np.ndarray,
      starts: np.ndarray,
      seed_parts: Tuple[int, int],
      stats: collections.Counter,
      frame: bool,
  ) -> Tuple[bytes, np.ndarray]:
    from recurrent_bert.data import example_codec
    from recurrent_bert.data import masking

    options = self.options
    clock = time.perf_counter()
    rows = fill_instances(
        instances,
        ids,
        starts,
        options.max_seq_length,
        options.use_nsp,
        self.tokenizer.cls_id,
        self.tokenizer.sep_id,
    )
    n = len(instances)
    stats["instances"] += n
    stats["instance_tokens"] += int(rows["input_mask"].sum())
    stats["truncated_instances"] += int((instances[:, 5] > 0).sum())
    stats["truncated_tokens"] += int(instances[:, 5].sum())
    stats["random_next"] += int(instances[:, 4].sum())
    features = {
        k: rows[k] for k in ("input_ids", "input_mask", "segment_ids", "next_sentence_labels")
    }
    clock = self._lap("instance building", clock)
    floats = {}
    if not options.dynamic_masking:
      chunk_index, batch_index = seed_parts
      # Seeded by (seed, chunk, batch): independent of the number of workers.
      rng = np.random.default_rng([options.random_seed % 2**64, chunk_index, batch_index])
      masked = masking.mask_batch(
          rows["input_ids"],
          rows["input_mask"],
          rows["word_starts"],
          rng,
          options.masking,
          vocab_size=self.tokenizer.vocab_size,
          mask_id=self.tokenizer.mask_id,
          cls_id=self.tokenizer.cls_id,
          sep_id=self.tokenizer.sep_id,
      )
      real = masked["masked_lm_weights"] > 0
      new_ids = np.take_along_axis(masked["input_ids"], masked["masked_lm_positions"], axis=1)[real]
      old_ids = masked["masked_lm_ids"][real]
      mask_id = self.tokenizer.mask_id
      stats["masked_positions"] += int(real.sum())
      stats["masked_as_mask_token"] += int((new_ids == mask_id).sum())
      stats["masked_kept"] += int((new_ids == old_ids).sum())
      stats["masked_as_random_token"] += int(((new_ids != old_ids) & (new_ids != mask_id)).sum())
      features.update(
          input_ids=masked["input_ids"],
          masked_lm_positions=masked["masked_lm_positions"],
          masked_lm_ids=masked["masked_lm_ids"],
      )
      floats = {"masked_lm_weights": masked["masked_lm_weights"]}
      clock = self._lap("masking", clock)
    data, offsets = example_codec.serialize_examples(features, floats)
    clock = self._lap("serialisation", clock)
    if not frame:
      return data.tobytes(), offsets
    framed = example_codec.frame_records(data, offsets)
    self._lap("framing (CRC)", clock)
    return framed


_WORKER: Optional[ChunkProcessor] = None


def _process_age() -> float:
  """Seconds since this process started (its start-up, when called at the end of it)."""
  import psutil

  return max(0.0, time.time() - psutil.Process().create_time())


def _init_worker(options: GeneratorOptions) -> None:
  global _WORKER
  # One tokenizer thread per worker: the workers already use the cores.
  os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
  _WORKER = ChunkProcessor(options)
  _WORKER.stage_seconds["start-up (workers: imports, vocabulary)"] += _process_age()


def _process_in_worker(chunk_index: int, documents: List[List[str]]):
  result = _WORKER.process(chunk_index, documents)
  return result + (_drain_stage_seconds(_WORKER),)


def _drain_stage_seconds(processor: ChunkProcessor) -> Dict[str, float]:
  seconds = dict(processor.stage_seconds)
  processor.stage_seconds.clear()
  return seconds


# ---------------------------------------------------------------------------- the driver


def shard_table(names: Sequence[str], sizes: Sequence[int], instances: Optional[int]) -> List[Dict]:
  """stats.json's "shards": [{"file": name, "bytes": size, "records": n}] per shard.

  The readers check each shard's size against it before training (a cut shard reads
  as a shorter one). `instances` None: records per shard unknown (Beam's writer
  spreads them as it likes); otherwise instance k went to shard k mod n (`_generate`).
  """
  num_shards = len(names)
  table = []
  for i, (name, size) in enumerate(zip(names, sizes)):
    row = {"file": name, "bytes": int(size)}
    if instances is not None:
      row["records"] = instances // num_shards + (1 if i < instances % num_shards else 0)
    table.append(row)
  return table


def _file_size(path: str) -> int:
  if "://" in path:
    import tensorflow as tf

    return tf.io.gfile.stat(path).length
  return os.path.getsize(path)


def _summarize(
    counters: collections.Counter,
    options: GeneratorOptions,
    seconds: float,
    text_bytes: int,
    shards: Optional[List[Dict]] = None,
) -> Dict:
  def ratio(a, b):
    return (counters[a] / counters[b]) if counters[b] else 0.0

  instances = counters["instances"]
  stats = {
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
      # Per stage; worker stages are summed over the workers (they run in parallel).
      "stage_seconds": {
          k[len("seconds ") :]: round(v, 3)
          for k, v in sorted(counters.items())
          if k.startswith("seconds ")
      },
      "num_output_shards": len(options.output_files),
      "num_workers": options.num_workers,
      "dynamic_masking": options.dynamic_masking,
      "seconds": round(seconds, 3),
      "documents_per_second": counters["documents"] / seconds if seconds else 0.0,
      "instances_per_second": instances / seconds if seconds else 0.0,
      "text_megabytes_per_second": text_bytes / 1e6 / seconds if seconds else 0.0,
      "options": {
          "input_files": list(options.input_files),
          "vocab_file": options.vocab_file,
          "vocab_kind": vocab_kind(options.vocab_file),
          "do_lower_case": options.do_lower_case,
          "max_seq_length": options.max_seq_length,
          "max_predictions_per_seq": options.masking.max_predictions_per_seq,
          "masked_lm_prob": options.masking.masked_lm_prob,
          "mask_token_prob": options.masking.mask_token_prob,
          "random_token_prob": options.masking.random_token_prob,
          "do_whole_word_mask": options.masking.whole_word_mask,
          "dupe_factor": options.dupe_factor,
          "short_seq_prob": options.short_seq_prob,
          "random_seed": options.random_seed,
          "use_nsp": options.use_nsp,
      },
  }
  if shards is not None:
    stats["shards"] = shards
  return stats


def create_pretraining_data(options: GeneratorOptions) -> Dict:
  """Runs the whole generator: reads, builds, masks, writes shards and the stats JSON.

  Args:
    options: GeneratorOptions (input files already expanded, output shard paths).

  Returns:
    The stats dict (also written as JSON to options.stats_file when set).

  Raises:
    InputError: unreadable or non-UTF-8 input (file and line named), a vocabulary
      without the reserved tokens, or an input without any document.
  """
  from recurrent_bert.data.vocab import read_vocabulary

  options.validate()
  read_vocabulary(options.vocab_file)  # fail before any work on a bad vocabulary
  total_bytes = sum(os.path.getsize(p) for p in options.input_files)
  if options.output_dir:
    for cleaned in prepare_output_dir(options.output_dir):
      print(f"removed the leftover of a killed run: {cleaned}", file=sys.stderr)
    staging = io_utils.atomic_directory(options.output_dir)
  else:
    staging = contextlib.nullcontext(None)
  start = time.time()
  startup = _process_age()
  with staging as stage_dir:
    if stage_dir is None:  # explicit --output_files: each file is replaced atomically
      with contextlib.ExitStack() as stack:
        written = [stack.enter_context(io_utils.atomic_output(p)) for p in options.output_files]
        counters, text_bytes = _generate(options, written, total_bytes, start)
        sizes = [_file_size(p) for p in written]
    else:  # the whole folder is staged: nobody reads it before the swap
      written = [os.path.join(stage_dir, os.path.basename(p)) for p in options.output_files]
      counters, text_bytes = _generate(options, written, total_bytes, start)
      sizes = [_file_size(p) for p in written]
    shards = shard_table(
        [os.path.basename(p) for p in options.output_files], sizes, counters["instances"]
    )
    stats = _summarize(counters, options, time.time() - start, text_bytes, shards)
    stats["stage_seconds"]["start-up (main: imports, flags, checks)"] = round(startup, 3)
    if stage_dir is not None:
      io_utils.atomic_write_json(os.path.join(stage_dir, STATS_FILE), stats)
  if stage_dir is None and options.stats_file:
    io_utils.atomic_write_json(options.stats_file, stats)
  return stats


def _generate(
    options: GeneratorOptions, paths: Sequence[str], total_bytes: int, start: float
) -> Tuple[collections.Counter, int]:
  """Writes the shards to `paths`; returns (counters, text bytes read).

  Counters named "seconds STAGE" hold the per-stage profile (worker stages summed over
  workers: CPU-ish seconds, not wall).
  """
  num_shards = len(paths)
  counters: collections.Counter = collections.Counter()
  pool = None
  progress = None
  text_bytes = 0
  writers = []
  try:
    if options.num_workers > 1:
      # First, so the workers start up while this process reads the input.
      pool = _pool_context().Pool(
          options.num_workers, initializer=_init_worker, initargs=(options,)
      )
    writers = [io_utils.open_for_write(p) for p in paths]
    if options.show_progress:
      from tqdm import tqdm

      progress = tqdm(
          total=total_bytes,
          unit="B",
          unit_scale=True,
          smoothing=0.1,
          desc="create_pretraining_data",
          dynamic_ncols=True,
      )
    chunks = _timed(
        iter_chunks(iter_documents(options.input_files), options.chunk_bytes),
        counters,
        "seconds reading",
    )
    if pool is None:
      clock = time.perf_counter()
      processor = ChunkProcessor(options)
      processor.stage_seconds["start-up (workers: imports, vocabulary)"] += (
          time.perf_counter() - clock
      )
      results = (
          ((*processor.process(i, docs), _drain_stage_seconds(processor)), size)
          for i, (docs, size) in enumerate(chunks)
      )
    else:
      results = _bounded_imap(pool, chunks, 2 * options.num_workers)
    written = 0
    for (framed, offsets, chunk_stats, seconds), size in results:
      clock = time.perf_counter()
      counters.update(chunk_stats)
      counters.update({f"seconds {k}": v for k, v in seconds.items()})
      counters["chunks"] += 1
      records = len(offsets) - 1
      view = memoryview(framed)
      if num_shards == 1:
        writers[0].write(view)
      else:  # instance k of the run goes to shard k mod num_shards
        bounds = offsets.tolist()
        for k in range(min(num_shards, records)):
          first = (k - written) % num_shards
          writers[(written + first) % num_shards].write(
              b"".join(view[bounds[i] : bounds[i + 1]] for i in range(first, records, num_shards))
          )
      written += records
      text_bytes += size
      counters["seconds writing"] += time.perf_counter() - clock
      if progress is not None:
        progress.update(min(size, total_bytes - progress.n))
        elapsed = max(time.time() - start, 1e-9)
        progress.set_postfix(
            docs=counters["documents"],
            docs_per_s=f"{counters['documents'] / elapsed:.0f}",
            instances=written,
            refresh=False,
        )
    if counters["documents"] - counters["documents_without_tokens"] == 0:
      raise InputError(
          "the input has no document with any text: "
          + ", ".join(options.input_files)
          + " (expected one sentence per line, a blank line between documents)"
      )
  finally:
    for writer in writers:
      writer.close()
    if progress is not None:
      progress.close()
    if pool is not None:
      pool.terminate()
      pool.join()
  return counters, text_bytes


def _pool_context():
  """fork where safe: the workers start with this process's imports in milliseconds,
  where spawned ones took 1.5 s each on 2 busy cores (interpreter, imports). Not once
  TensorFlow is loaded (e.g. by a gs:// output, or a caller), which is not fork-safe."""
  import multiprocessing

  if sys.platform.startswith("linux") and "tensorflow" not in sys.modules:
    # What the workers use, imported once here, before the fork.
    import psutil  # noqa: F401
    import sentencepiece  # noqa: F401
    import tokenizers  # noqa: F401

    from recurrent_bert.data import example_codec  # noqa: F401
    from recurrent_bert.data import masking  # noqa: F401
    from recurrent_bert.data import native_tokenizer  # noqa: F401

    return multiprocessing.get_context("fork")
  return multiprocessing.get_context("spawn")


def _timed(iterator: Iterator, counters: collections.Counter, key: str) -> Iterator:
  """Yields from iterator, adding the time spent producing each item to counters[key]."""
  while True:
    clock = time.perf_counter()
    try:
      item = next(iterator)
    except StopIteration:
      return
    finally:
      counters[key] += time.perf_counter() - clock
    yield item


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
        f"{stats['masked_as_random_token']:.1%} random, {stats['masked_kept']:.1%} kept"
    )
  else:
    lines.append("masked           none (unmasked records for dynamic masking)")
  lines.append(
      f"throughput       {stats['documents_per_second']:.0f} documents/s, "
      f"{stats['instances_per_second']:.0f} instances/s, "
      f"{stats['text_megabytes_per_second']:.2f} MB/s in {stats['seconds']:.1f} s"
  )
  return "\n".join(lines)
