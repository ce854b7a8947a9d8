"""How long each stage of the demo should take: the cost model behind the ETA.

The estimates are seconds on 2 idle CPU cores; the stage engine (`stages.py`) calibrates
them as stages finish. `SIDE_BY_SIDE_GAIN` is what the plan (`pipeline.Demo`) divides the
pretraining estimates by when the runs go side by side.
"""

from typing import List, Tuple

from recurrent_bert.demo import run_results
from recurrent_bert.demo.work_paths import WorkPaths


class StageEstimates(WorkPaths):
  """Expected seconds of the stages of the settings."""

  # Seconds on 2 CPU cores, calibrated as stages finish. Per-step costs relative to
  # bert_mini at 64 tokens x 32 sequences; sizes and token counts scale them.
  STEP_COST = {
      "bert": 1.0,
      "bert_rab": 1.0,
      "swishrnn": 1.1,
      "trans_blstm_small_1": 1.6,
      "trans_blstm_small_2": 1.7,
      "trans_blstm_1": 2.6,
      "trans_blstm_2": 2.8,
      "blstm": 2.2,
  }
  # Tiny models are dominated by per-step overheads, hence more than their FLOPs say.
  SIZE_COST = {"tiny": 0.35, "mini": 1.0, "base": 12.0, "large": 40.0}
  BERT_MINI_STEP = 0.32  # seconds per step of 2048 tokens (32 x 64), 2 idle cores
  # Two 1-thread pretraining runs side by side on 2 cores do this many times the steps of
  # one 2-thread run (README, "Why these defaults").
  SIDE_BY_SIDE_GAIN = 1.35

  # -- cost model ------------------------------------------------------------------

  def step_cost(self, preset: str, tokens: int) -> float:
    """Expected seconds of one training step of `tokens` token positions, idle 2 cores."""
    family, size = run_results.family_of(preset), preset.rsplit("_", 1)[1]
    return (
        self.BERT_MINI_STEP
        * self.STEP_COST.get(family, 2.0)
        * self.SIZE_COST.get(size, 1.0)
        * tokens
        / 2048
    )

  @property
  def corpus_mb(self) -> float:
    """The corpus's expected size in MB (for the estimates)."""
    s = self.s
    return s.corpus_max_bytes / 1e6 if s.corpus_max_bytes else (14.0 if self.builtin else 10.0)

  def pretrain_estimate(self, preset: str) -> float:
    """Expected seconds of one pretraining run of `preset`, held-out evaluations included."""
    s = self.s
    tokens = s.batch_size * s.seq_length
    evaluations = self.evaluations
    eval_steps = evaluations * self._eval_batches() * 64 * s.seq_length / tokens / 3
    return self._startup(preset) + (s.pretrain_steps + eval_steps) * self.step_cost(preset, tokens)

  def finetune_estimate(self, grid: List[Tuple[str, float, int]]) -> float:
    """Expected seconds of a sweep of the fine-tuning runs of `grid`, --jobs at a time."""
    s = self.s
    tokens = s.finetune_batch_size * s.seq_length
    run_seconds = sum(
        self._startup(preset) + 10 + 0.9 * s.finetune_steps * self.step_cost(preset, tokens)
        for preset, _, _ in grid
    )
    return run_seconds / min(s.jobs, 2) ** 0.5

  def _startup(self, preset: str) -> float:
    # TensorFlow's import and the first trace; the BLSTM blocks trace longer.
    return 10.0 + (10.0 if "blstm" in preset else 0.0)
