"""SQuAD v1.1 and v2.0 through tensorflow-datasets (`squad/v1.1`, `squad/v2.0`)."""

from typing import Optional

from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import InputError
from recurrent_bert.tasks import tfds_source
from recurrent_bert.tasks.span import squad
from recurrent_bert.tasks.span.squad import SquadAnswer
from recurrent_bert.tasks.span.squad import SquadExample

SQUAD_TFDS_NAMES = {"1.1": "squad/v1.1", "2.0": "squad/v2.0"}


def load_tfds_squad(
    version: str, split: str, data_dir: Optional[str] = None, download: bool = False
) -> SplitData:
  """Loads SQuAD v1.1 or v2.0 ("train" or "dev") from TFDS as `SquadExample`s.

  Answers whose text is blank (no word for the tokenizer) or not at their answer_start in
  the context cannot be used for training targets; they are dropped and reported in
  `SplitData.skipped` (the official data has none; TFDS's mock data is random).
  """
  if version not in SQUAD_TFDS_NAMES:
    raise InputError(f"SQuAD version must be one of {', '.join(SQUAD_TFDS_NAMES)}, got {version!r}")
  name = SQUAD_TFDS_NAMES[version]
  records, _ = tfds_source.load_numpy(name, split, data_dir, download)
  result = SplitData(examples=[], source=f"tfds:{name}/{tfds_source.TFDS_SPLITS.get(split, split)}")
  blank = squad.blank_texts_of([tfds_source.text(t) for r in records for t in r["answers"]["text"]])
  for record in records:
    qas_id, context = tfds_source.text(record["id"]), tfds_source.text(record["context"])
    answers = []
    for text, start in zip(record["answers"]["text"], record["answers"]["answer_start"]):
      text, start = tfds_source.text(text), int(start)
      if text in blank:
        result.skipped.append(f"{result.source} question {qas_id}: answer {text!r} is blank")
        continue
      if start < 0 or context[start : start + len(text)] != text:
        result.skipped.append(
            f"{result.source} question {qas_id}: answer {text!r} is not at answer_start {start}"
        )
        continue
      answers.append(SquadAnswer(text, start))
    is_impossible = bool(record.get("is_impossible", False))
    result.examples.append(
        SquadExample(
            qas_id=qas_id,
            question=tfds_source.text(record["question"]),
            context=context,
            answers=() if is_impossible else tuple(answers),
            is_impossible=is_impossible,
            title=tfds_source.text(record.get("title", b"")),
        )
    )
  return result  # the caller reports `skipped` (TaskAdapter.examples), once
