"""Where the demo's stages write under the work dir, and which runs the settings ask for.

`WorkPaths` is the base of the demo's stages (`pipeline.Demo`): every stage's outputs
have their path here (the pretraining and fine-tuning dirs, the vocabulary, the records,
the tokenizer comparison's own tree under <work_dir>/tokenizers/), as do the runs that
decide those paths: the fine-tuning grid, the comparison's model and learning rate, and
how often pretraining evaluates the held-out records.
"""

import os
from typing import List, Optional, Tuple

from recurrent_bert import model_dir as layout
from recurrent_bert.data import builtin_corpus
from recurrent_bert.demo.settings import Settings

# The tokenizer comparison (--tokenizers): its stages' outputs go to <work_dir>/tokenizers/.
TOKENIZERS_DIR = "tokenizers"
WORDPIECE = "wordpiece"
TOKENIZERS = (WORDPIECE, "unigram", "bpe")


class WorkPaths:
  """The paths and runs of the settings.

  Attributes:
    s: the settings.
  """

  def __init__(self, settings: Settings):
    self.s = settings

  # -- paths -----------------------------------------------------------------------

  @property
  def compilation_cache(self) -> str:
    """JAX's persistent compilation cache, shared by the demo's JAX runs."""
    return self.s.path("jax_compilation_cache")

  def pretrain_dir(self, preset: str, seed: int, tokenizer: Optional[str] = None) -> str:
    """The pretraining model dir of a preset and pretraining seed (of the main runs, or of
    the tokenizer comparison's run with `tokenizer`)."""
    if tokenizer:
      return self.tokenizer_path(tokenizer, "pretrain", preset, f"seed{seed}")
    return self.s.path("pretrain", preset, f"seed{seed}")

  def encoder_dir(self, preset: str, tokenizer: Optional[str] = None) -> str:
    """The encoder every fine-tuning run of a preset starts from: its first pretraining
    seed's."""
    return os.path.join(
        self.pretrain_dir(preset, self.s.pretrain_seeds[0], tokenizer), layout.EXPORT_DIR
    )

  def tokenizer_path(self, tokenizer: str, *parts: str) -> str:
    """A path of the tokenizer comparison: <work_dir>/tokenizers/<tokenizer>/..."""
    return self.s.path(TOKENIZERS_DIR, tokenizer, *parts)

  def vocab_file(self, tokenizer: Optional[str] = None) -> str:
    """The main vocabulary, or a compared tokenizer's (WordPiece's is the main one: the
    same command would learn it again)."""
    if tokenizer is None and self.s.vocabulary != WORDPIECE:
      return self.s.path("vocab", "spm.model")  # --vocabulary: a SentencePiece model
    if tokenizer in (None, WORDPIECE):
      return self.s.path("vocab", "vocab.txt")
    return self.tokenizer_path(tokenizer, "vocab", "spm.model")

  def data_dir(self, split: str, tokenizer: Optional[str] = None) -> str:
    """The pretraining records of the train documents (split "train") or the held-out
    ones (any other split), of the main runs or of a compared tokenizer."""
    name = "pretrain_data" if split == "train" else "eval_data"
    return self.tokenizer_path(tokenizer, name) if tokenizer else self.s.path(name)

  def finetune_dir(self, tokenizer: Optional[str] = None) -> str:
    """The output dir of the main fine-tuning sweep, or of a compared tokenizer's."""
    return self.tokenizer_path(tokenizer, "finetune") if tokenizer else self.s.path("finetune")

  # -- the runs the settings ask for -----------------------------------------------

  @property
  def tokenizer_preset(self) -> str:
    """The model the tokenizer comparison pretrains: the first of --models."""
    return self.s.presets[0]

  @property
  def tokenizer_learning_rate(self) -> float:
    """The comparison's fine-tuning learning rate: the middle one of the main runs'."""
    rates = self.s.finetune_learning_rates
    return rates[len(rates) // 2]

  def finetune_grid(self, tokenizer: Optional[str] = None) -> List[Tuple[str, float, int]]:
    """(preset, learning rate, seed) of every fine-tuning run, in the sweep's order (of the
    main sweep, or of a compared tokenizer's)."""
    s = self.s
    if tokenizer:
      return [
          (self.tokenizer_preset, self.tokenizer_learning_rate, seed) for seed in s.finetune_seeds
      ]
    return [
        (preset, lr, seed)
        for preset in s.presets
        for lr in s.finetune_learning_rates
        for seed in s.finetune_seeds
    ]

  @property
  def evaluations(self) -> int:
    """Held-out evaluations per pretraining run: every eval_every_steps, and after the
    last step when that is not one of them."""
    every = self.eval_every_steps
    return self.s.pretrain_steps // every + (1 if self.s.pretrain_steps % every else 0)

  @property
  def eval_every_steps(self) -> int:
    """Pretraining evaluates the held-out records 4 times, the last after the last step
    (each evaluation costs about as much as 25 training steps of a tiny model)."""
    return max(1, self.s.pretrain_steps // 4)

  def _eval_batches(self) -> int:
    """Batches of 64 held-out sequences per evaluation."""
    return max(1, -(-self.s.eval_sequences // 64))

  @property
  def builtin(self) -> bool:
    """Whether the corpus is (or includes) the built-in one."""
    return any(builtin_corpus.is_builtin(f) for f in self.s.input_files)
