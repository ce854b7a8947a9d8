"""Reading the pretraining corpus: lines -> documents -> chunks of whole documents.

Input: one sentence per line, a blank line between documents (the end of a file also ends
a document). The main process of the local tool reads the input once, line by line, and
cuts it into *chunks* of whole documents (about `chunk_bytes` of text each), the unit of
work of its workers (`pretraining_data`, `pretraining_workers`).

The "random next" document: BERT draws it from the whole corpus, which needs the corpus in
memory. Here it is drawn uniformly from the *other* documents of the same chunk (hundreds
to thousands of documents at the default 1 MiB chunk), a bounded pool that keeps memory
flat; a trailing chunk smaller than half the chunk size is merged into the one before, so
every chunk has other documents unless the whole corpus has a single document (then, as in
BERT, the segment comes from the same document and the stats report it).
"""

import dataclasses
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

from recurrent_bert import io_utils


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
