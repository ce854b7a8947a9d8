"""SQuAD v1.1 / v2.0 span extraction for the fine-tuning loop.

`squad_reader` reads the JSON files or TFDS; `SpanExtractionAdapter` cuts each example into
windows over its context (one feature row per window, squad_windows.py), trains the span head on
the start and end positions, maps the span logits back to answer texts, scores them with
the official definitions (exact_match and f1 in percent; v2.0 adds HasAns_/NoAns_ and the
best no-answer threshold) and writes predictions.json, nbest_predictions.json and, for
v2.0, null_odds.json.
"""

import dataclasses
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from absl import logging
import numpy as np

from recurrent_bert.data import feature_cache
from recurrent_bert.data import tokenization
from recurrent_bert.data.feature_cache import Features
from recurrent_bert.data.feature_cache import SplitData
from recurrent_bert.errors import InputError
from recurrent_bert.model_dir import TaskInfo
from recurrent_bert.tasks import metrics
from recurrent_bert.tasks.span import squad
from recurrent_bert.tasks.span import squad_postprocessing
from recurrent_bert.tasks.span import squad_windows
from recurrent_bert.tasks.span import tfds_reader
from recurrent_bert.tasks.span.squad import SquadExample
from recurrent_bert.tasks.span.squad_postprocessing import SquadPredictions
from recurrent_bert.training import objectives
from recurrent_bert.training.task_adapter import TaskAdapter

# The labeled split a SQuAD run scores and predicts (the predict file: dev-v1.1.json).
DEV_SPLIT = "dev"


@dataclasses.dataclass(frozen=True)
class SpanSettings:
  """How examples become windows, and span logits become answers.

  Attributes:
    max_seq_length: T, pieces per window row.
    doc_stride: pieces between the starts of consecutive windows.
    max_query_length: question pieces kept.
    max_answer_length: longest predicted answer, in pieces.
    n_best_size: candidates per window and n-best entries.
    null_score_diff_threshold: v2.0: predict no answer when null score − best span
      score exceeds this.
  """

  max_seq_length: int
  doc_stride: int
  max_query_length: int
  max_answer_length: int
  n_best_size: int
  null_score_diff_threshold: float


def squad_reader(
    version: str,
    files: Mapping[str, str],
    *,
    use_tfds: bool = False,
    tfds_data_dir: Optional[str] = None,
    tfds_download: bool = False,
    skip_bad_rows: bool = False,
) -> Callable[[str], SplitData]:
  """split ("train" or "dev") -> `SplitData` of `SquadExample`s, from files or TFDS.

  The train file must be labeled; the dev file may have no answers at all (predictions
  only). `squad.read_squad` states the rules a file must follow.

  Args:
    version: "1.1" or "2.0".
    files: split -> SQuAD JSON file (unused with use_tfds).
    use_tfds: read squad/v1.1 or squad/v2.0 from tensorflow-datasets.
    tfds_data_dir: TFDS data dir; None = TFDS's default.
    tfds_download: let TFDS download missing data.
    skip_bad_rows: skip (and count) the questions that break a rule instead of raising.

  Returns:
    The reader; it raises InputError for a split without a file.
  """

  def read_split(split: str) -> SplitData:
    if use_tfds:
      return tfds_reader.load_tfds_squad(version, split, tfds_data_dir, tfds_download)
    if split not in files:
      raise InputError(f"SQuAD: no {split} file given")
    return squad.read_squad(
        files[split],
        version,
        require_answers=split == "train",
        skip_bad_rows=skip_bad_rows,
    )

  return read_split


class SpanExtractionAdapter(TaskAdapter):
  """SQuAD, for the `Finetuner`: windows as feature rows, answers mapped back to text.

  The model's outputs are "start_logits" and "end_logits", float [N, T] over the N window
  rows of a split.

  Args:
    read_split: split -> `SplitData` of `SquadExample`s (e.g. `squad_reader`).
    tokenizer: a `BertWordpieceTokenizer`; its vocabulary file and casing key the caches.
    cache_dir: where the feature caches go.
    settings: the window and answer settings.
    version_2: SQuAD v2.0: unanswerable questions, null odds and their metrics.
    use_blstm_decoder: TRANS-BLSTM's BLSTM decoder in the span head.
    predict_splits: () or ("dev",), the split scored and written as predictions.
  """

  def __init__(
      self,
      read_split: Callable[[str], SplitData],
      tokenizer,
      cache_dir: str,
      settings: SpanSettings,
      *,
      version_2: bool,
      use_blstm_decoder: bool = False,
      predict_splits: Sequence[str] = (DEV_SPLIT,),
  ):
    super().__init__(
        cache_dir,
        [
            feature_cache.file_fingerprint(tokenizer.vocab_file),
            tokenizer.do_lower_case,
            settings.max_seq_length,
            settings.doc_stride,
            settings.max_query_length,
            tokenization.WORD_BOUNDARY_RULES,  # where answers' character spans fall
        ],
    )
    self._read_split = read_split
    self._tokenizer = tokenizer
    self.settings = settings
    self.version_2 = version_2
    self.info = TaskInfo(
        task="squad_v2" if version_2 else "squad",
        kind="span",
        use_blstm_decoder=use_blstm_decoder,
        do_lower_case=tokenizer.do_lower_case,
        max_seq_length=settings.max_seq_length,
        main_metric="f1",
        max_query_length=settings.max_query_length,
        max_answer_length=settings.max_answer_length,
        doc_stride=settings.doc_stride,
    )
    self.objective = objectives.SpanObjective()
    self.output_keys = ("start_logits", "end_logits")
    self.predict_splits = tuple(predict_splits)
    self.eval_splits = self.predict_splits  # emptied by `prepare` when unlabeled

  def read_split(self, split: str) -> SplitData:
    return self._read_split(split)

  def prepare(self, splits: Sequence[str]) -> None:
    """Converts `splits`; a dev split without answers is predicted, not scored."""
    if (
        DEV_SPLIT in splits
        and self.eval_splits
        and not any(e.answers or e.is_impossible for e in self.examples(DEV_SPLIT))
    ):
      logging.info("the predict file has no answers: writing predictions only")
      self.eval_splits = ()
    super().prepare(splits)

  def convert(self, examples: Sequence[SquadExample]) -> Features:
    s = self.settings
    return squad_windows.squad_features(
        examples, self._tokenizer, s.max_seq_length, s.doc_stride, s.max_query_length
    )

  def _postprocess(self, split: str, outputs: Dict[str, np.ndarray]) -> SquadPredictions:
    s = self.settings
    return squad_postprocessing.postprocess_squad(
        self.examples(split),
        self.features(split),
        outputs["start_logits"],
        outputs["end_logits"],
        s.n_best_size,
        s.max_answer_length,
        self.version_2,
        s.null_score_diff_threshold,
    )

  def evaluate(self, split: str, outputs: Dict[str, np.ndarray]) -> Dict[str, float]:
    result = self._postprocess(split, outputs)
    gold = metrics.squad_gold_answers(self.examples(split))
    if self.version_2:
      return metrics.squad_v2_scores(gold, result.predictions, result.null_odds)
    return metrics.squad_v1_scores(gold, result.predictions)

  def write_predictions(
      self, split: str, outputs: Dict[str, np.ndarray], output_dir: str
  ) -> List[str]:
    paths = squad_postprocessing.write_squad_predictions(
        output_dir, self._postprocess(split, outputs), self.version_2
    )
    return list(paths.values())
