"""CoNLL-2003 through tensorflow-datasets (`conll2003`).

Sentences come as `conll.TaggedSentence`s with TFDS's IOB2 tag names. TFDS drops the
-DOCSTART- lines and stores sentences in its own order, so document boundaries are lost:
each sentence is its own document (document = record number), which gives document-level
features no wrong neighbours.
"""

from typing import Optional, Sequence

from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import at
from recurrent_bert.tasks import tfds_source
from recurrent_bert.tasks.tagging import conll
from recurrent_bert.tasks.text_rows import BadRows

CONLL2003_TFDS_NAME = "conll2003"
# conll2003 names its dev split "dev", not "validation".
_CONLL2003_SPLITS = {"train": "train", "dev": "dev", "test": "test"}


def load_tfds_conll2003(
    split: str,
    data_dir: Optional[str] = None,
    download: bool = False,
    label_list: Optional[Sequence[str]] = None,
    skip_bad_rows: bool = False,
) -> SplitData:
  """Loads CoNLL-2003 ("train", "dev" or "test") from TFDS as `conll.TaggedSentence`s.

  Args:
    split: "train", "dev" or "test".
    data_dir: TFDS data dir; None = TFDS's default.
    download: let TFDS download and prepare missing data (needs network).
    label_list: the allowed tags (None: any well-formed tag); TFDS's are
      `conll.CONLL2003_TAGS` (IOB2).
    skip_bad_rows: skip bad records (listed in `SplitData.skipped`) instead of refusing them.

  Returns:
    SplitData of TaggedSentences; guid "tfds:conll2003/<split>:<record number>", document
    the record number (module docstring). Empty records (TFDS writes one after a file's
    final blank line) are passed over.

  Raises:
    InputError: unknown split, data not prepared (with how to prepare it), a record with a
      tag not in `label_list` or an empty word unless skipped, or no sentence.
  """
  labels = None if label_list is None else conll.check_label_list(label_list)
  records, info = tfds_source.load_numpy(
      CONLL2003_TFDS_NAME, split, data_dir, download, _CONLL2003_SPLITS
  )
  tag_names = list(info.features["ner"].feature.names)
  result = SplitData(examples=[], source=f"tfds:{CONLL2003_TFDS_NAME}/{_CONLL2003_SPLITS[split]}")
  bad_rows = BadRows(result, skip_bad_rows)
  for n, record in enumerate(records):
    words = tuple(tfds_source.text(word) for word in record["tokens"])
    tags = tuple(tag_names[int(tag_id)] for tag_id in record["ner"])
    if not words:
      continue
    problems = ["empty word" for word in words if not word]
    problems += [conll.tag_problem(tag, labels) for tag in tags]
    if len(tags) != len(words):
      problems.append(f"{len(words)} tokens but {len(tags)} ner tags")
    problem = next((p for p in problems if p is not None), None)
    if problem is not None:
      bad_rows.refuse(at(result.source, record=n + 1), problem)
      continue
    result.examples.append(
        conll.TaggedSentence(words, tags, document=n, guid=f"{result.source}:{n + 1}")
    )
  bad_rows.check_not_empty()
  return result
