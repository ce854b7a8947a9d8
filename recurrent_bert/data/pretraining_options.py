"""GeneratorOptions: the settings of one pretraining-data generator run, and their checks.

Its own module because every part of the generator reads it: the driver
(`pretraining_data`), the chunk workers (`pretraining_workers`), the stats
(`pretraining_stats`) and the Beam pipeline (`beam_pipeline`); here none of them has to
import another to name it.
"""

import dataclasses
import os
from typing import List, Optional

from recurrent_bert.data.mlm_masking import MaskingConfig
from recurrent_bert.data.pretraining_output import STATS_FILE
from recurrent_bert.data.pretraining_output import shard_names

DEFAULT_CHUNK_BYTES = 1 << 20


@dataclasses.dataclass
class GeneratorOptions:
  """Everything create_pretraining_data needs.

  See the flags of recurrent_bert/tools/create_pretraining_data.py.
  """

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
