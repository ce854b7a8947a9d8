"""Tasks through tensorflow-datasets: what every kind's TFDS reader shares.

Data must already be prepared in a TFDS data dir (`tfds build glue/mrpc --data_dir=...`
on a machine with network access, then copy the directory). Loading uses download=False
unless asked otherwise: offline, a download attempt spends minutes in network retries
before failing. A missing dataset raises an `InputError` that says how to prepare it.

Each kind's reader (classification/, span/, tagging/, multiple_choice/ `tfds_reader.py`)
makes the same examples as its file readers, with the same label names, so features,
metrics and prediction writers do not care where the data came from, and checks records
as the file readers check rows: a bad record is an `InputError` naming it
("tfds:glue/stsb/train: record 12: ..."), or with `skip_bad_rows` is skipped and listed in
`SplitData.skipped`.
"""

from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

from recurrent_bert.errors import InputError

# TFDS's label of an unlabeled (test) example.
UNLABELED = -1

# Our split names → TFDS's.
TFDS_SPLITS = {
    "train": "train",
    "dev": "validation",
    "test": "test",
    "dev_matched": "validation_matched",
    "dev_mismatched": "validation_mismatched",
    "test_matched": "test_matched",
    "test_mismatched": "test_mismatched",
}


def text(value: Any) -> str:
  """A TFDS string feature (bytes) as text."""
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def load_numpy(
    name: str,
    split: str,
    data_dir: Optional[str],
    download: bool,
    splits: Mapping[str, str] = TFDS_SPLITS,
) -> Tuple[Iterator[Dict[str, Any]], Any]:
  """tfds.load as numpy dicts, with an actionable error when the data is not prepared.

  `splits` maps our split names to the dataset's.
  """
  import tensorflow_datasets as tfds

  if split not in splits:
    raise InputError(f"unknown split {split!r}; use one of {', '.join(splits)}")
  tfds_split = splits[split]
  try:
    dataset, info = tfds.load(
        name, split=tfds_split, data_dir=data_dir, download=download, with_info=True
    )
  except AssertionError as e:  # what TFDS raises for "no prepared data" (4.9)
    where = data_dir or "the default TFDS data dir (~/tensorflow_datasets or $TFDS_DATA_DIR)"
    raise InputError(
        f"TFDS dataset {name} (split {tfds_split}) is not prepared in {where}. Prepare it "
        f"on a machine with network access: `tfds build {name} "
        f"--data_dir={data_dir or '~/tensorflow_datasets'}` (some GLUE/SuperGLUE/SQuAD "
        f"sources need manual steps, see the TFDS catalog page of {name}), then copy the "
        f"directory here; or let TFDS download it (--tfds_download). TFDS said: {e}"
    ) from None
  return tfds.as_numpy(dataset), info
