"""Multiple-choice sets through tensorflow-datasets (HellaSwag)."""

from typing import Optional

from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import InputError
from recurrent_bert.errors import at
from recurrent_bert.tasks import tfds_source
from recurrent_bert.tasks.multiple_choice.swag import ChoiceExample
from recurrent_bert.tasks.text_rows import BadRows

# Multiple-choice sets in TFDS: our task name -> TFDS name. TFDS has no SWAG builder;
# HellaSwag (SWAG's successor: a context and four endings) has one.
CHOICE_TFDS_NAMES = {"hellaswag": "hellaswag"}


def load_tfds_choices(
    task: str,
    split: str,
    data_dir: Optional[str] = None,
    download: bool = False,
    skip_bad_rows: bool = False,
) -> SplitData:
  """Loads a multiple-choice split ("train", "dev", "test") from TFDS as `ChoiceExample`s.

  A record's `context` is the first segment and each of its `endings` a second one; the
  guid is the record's number in the split (HellaSwag has no unique id field), label -1
  (TFDS's unlabeled test examples) becomes None. Records are checked as the JSONL reader
  checks lines: the same number of endings C >= 2 in every record, a label in [0, C), no
  empty context or ending; a bad record is an `InputError` naming it ("tfds:hellaswag/
  validation: record 3: ...") or with `skip_bad_rows` is skipped and listed.
  """
  if task not in CHOICE_TFDS_NAMES:
    raise InputError(f"no TFDS source for {task!r}; TFDS has {', '.join(CHOICE_TFDS_NAMES)}")
  name = CHOICE_TFDS_NAMES[task]
  records, _ = tfds_source.load_numpy(name, split, data_dir, download)
  result = SplitData(examples=[], source=f"tfds:{name}/{tfds_source.TFDS_SPLITS[split]}")
  bad_rows = BadRows(result, skip_bad_rows)
  num_choices = None
  for n, record in enumerate(records):
    context = tfds_source.text(record["context"])
    endings = tuple(tfds_source.text(e) for e in record["endings"])
    label = int(record["label"])
    problem = None
    if len(endings) < 2 or len(endings) != (num_choices or len(endings)):
      problem = f"{len(endings)} endings; every record needs the same number >= 2"
      if num_choices:
        problem += f" ({num_choices}, as the first)"
    elif label != tfds_source.UNLABELED and not 0 <= label < len(endings):
      problem = f"label {label} is not one of 0..{len(endings) - 1}"
    elif not context.strip() or not all(e.strip() for e in endings):
      problem = "empty context or ending"
    if problem is not None:
      bad_rows.refuse(at(result.source, record=n + 1), problem)
      continue
    num_choices = len(endings)
    result.examples.append(
        ChoiceExample(str(n), context, endings, None if label == tfds_source.UNLABELED else label)
    )
  bad_rows.check_not_empty()
  return result
