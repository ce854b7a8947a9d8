"""The comparison's pretraining recipe, chosen from a pilot by a rule fixed beforehand.

A recipe is the optimisation a pretraining run gets: peak learning rate, warm-up (a
fraction of the run), Adam's β2 and ε, global-norm clipping. The papers' comparison needs
one recipe for every model, chosen so that it cannot favour a side: a pilot trains each
candidate recipe on **the baselines alone** (BERT-orig and BERT-rab, the models each claim
is judged against: TRANS-BLSTM against BERT-orig, SwishRNN-BERT against BERT-rab), a few
seeds each, and `choose` reads their held-out MLM losses. The models the claims are about
never enter; the chosen recipe then trains all of them.

The rule, in order (`choose`):
  1. A recipe qualifies when every one of its pilot runs, every baseline and every seed,
     left the unigram plateau in the first half of the run and stayed off it: its first
     held-out evaluation below U - UNIGRAM_MARGIN (`plateau.py`) is at or before half the
     run's steps, and so is its last evaluation. A recipe under which some seed stalls
     would make the comparison a lottery of which seeds escape.
  2. Of the qualifying recipes, the lowest mean held-out MLM loss at the last evaluation,
     over all its pilot runs, wins.
  3. Means within TIE_NATS of that lowest are ties: of them, the lowest peak learning rate
     wins (the comparison runs longer than the pilot, where a smaller step is the safer),
     then the longest warm-up.
  4. When no recipe qualifies, none is chosen: the choice names the recipe with the most
     runs off the plateau (ties: the lowest mean loss) as the closest, for the report to
     say so; a comparison under it measures how fast models leave the plateau.
"""

import dataclasses
import math
import statistics
from typing import Dict, List, Mapping, Optional, Sequence

from recurrent_bert.demo import plateau

# The models a pilot may train: each claim's baseline (demo/claims.py's paper_baseline).
BASELINES = ("bert", "bert_rab")
# Nats: mean held-out losses this close to the best are a tie (about the spread of the
# demo's tiny models' final held-out loss between seeds, docs/demo.md).
TIE_NATS = 0.02


@dataclasses.dataclass(frozen=True)
class Recipe:
  """One pretraining optimisation setting.

  Attributes:
    learning_rate: the peak learning rate (linear warm-up, then linear decay to 0).
    warmup_fraction: the warm-up's share of the run's steps, in [0, 1).
    beta_2: Adam's second-moment decay.
    epsilon: Adam's ε.
    clip_norm: global-norm clipping of the batch gradient (0: none).
  """

  learning_rate: float
  warmup_fraction: float = 0.1
  beta_2: float = 0.999
  epsilon: float = 1e-6
  clip_norm: float = 1.0

  def __post_init__(self):
    if not 0 < self.learning_rate < 1:
      raise ValueError(f"learning_rate must be in (0, 1), got {self.learning_rate}")
    if not 0 <= self.warmup_fraction < 1:
      raise ValueError(f"warmup_fraction must be in [0, 1), got {self.warmup_fraction}")
    if not 0 < self.beta_2 < 1 or self.epsilon <= 0 or self.clip_norm < 0:
      raise ValueError(f"beta_2 in (0, 1), epsilon > 0, clip_norm >= 0: got {self}")

  def flags(self, steps: int) -> List[str]:
    """The pretraining command's flags for a run of `steps` steps."""
    return [
        f"--learning_rate={self.learning_rate:g}",
        f"--warmup_steps={int(self.warmup_fraction * steps)}",
        f"--adam_beta2={self.beta_2:g}",
        f"--adam_epsilon={self.epsilon:g}",
        f"--clip_norm={self.clip_norm:g}",
    ]

  def key(self, steps: int) -> str:
    """A folder name that only this recipe over `steps` steps has: the pilot keys its runs
    by it, so a run is reused only by the same recipe and steps, whatever the list."""
    return (
        f"lr{self.learning_rate:g}_warmup{self.warmup_fraction:g}_beta2{self.beta_2:g}"
        f"_eps{self.epsilon:g}_clip{self.clip_norm:g}_{steps}steps"
    )

  def label(self) -> str:
    return (
        f"peak {self.learning_rate:g}, warm-up {self.warmup_fraction:.0%}, "
        f"β2 {self.beta_2:g}, ε {self.epsilon:g}, clip {self.clip_norm:g}"
    )


@dataclasses.dataclass(frozen=True)
class PilotRun:
  """One pilot run: a baseline trained under a recipe with one seed.

  Attributes:
    recipe: the recipe it trained under.
    family: "bert" or "bert_rab" (the preset without its size).
    seed: its seed.
    steps: its training steps.
    eval_curve: held-out MLM loss by evaluated step (at least one evaluation).
  """

  recipe: Recipe
  family: str
  seed: int
  steps: int
  eval_curve: Mapping[int, float]


@dataclasses.dataclass(frozen=True)
class RecipeScore:
  """What the rule reads of one recipe's pilot runs.

  Attributes:
    recipe: the recipe.
    runs: its pilot runs.
    escaped: runs that left the plateau by half the run and ended off it (rule 1).
    mean_loss: the mean held-out MLM loss at the runs' last evaluations (rule 2).
  """

  recipe: Recipe
  runs: int
  escaped: int
  mean_loss: float

  @property
  def qualifies(self) -> bool:
    return self.escaped == self.runs


@dataclasses.dataclass(frozen=True)
class Choice:
  """The rule's outcome.

  Attributes:
    recipe: the chosen recipe, or None when none qualified (rule 4).
    closest: with none chosen, the recipe with the most runs off the plateau.
    scores: every recipe's score, best first (qualifying ones first, then by mean loss).
    unigram: U, the plateau the runs were held against.
  """

  recipe: Optional[Recipe]
  closest: Optional[Recipe]
  scores: List[RecipeScore]
  unigram: float


def escaped_early(run: PilotRun, unigram: float) -> bool:
  """Rule 1 for one run: below U - margin by half its steps, and at its end."""
  steps = sorted(run.eval_curve)
  if not steps:
    raise ValueError(f"{run.family} seed {run.seed} under {run.recipe.label()}: no evaluation")
  off = lambda step: run.eval_curve[step] < unigram - plateau.UNIGRAM_MARGIN
  first_off = next((step for step in steps if off(step)), None)
  return first_off is not None and first_off <= run.steps / 2 and off(steps[-1])


def score(recipe: Recipe, runs: Sequence[PilotRun], unigram: float) -> RecipeScore:
  """Rules 1 and 2's numbers for one recipe's runs."""
  finals = [run.eval_curve[max(run.eval_curve)] for run in runs]
  return RecipeScore(
      recipe=recipe,
      runs=len(runs),
      escaped=sum(escaped_early(run, unigram) for run in runs),
      mean_loss=statistics.fmean(finals),
  )


def choose(runs: Sequence[PilotRun], unigram: float) -> Choice:
  """The recipe the module docstring's rule picks from the pilot's `runs`.

  Args:
    runs: every pilot run; each recipe must have run every baseline with the same seeds.
    unigram: U of the held-out records (plateau.held_out_unigram), nats.
  Raises:
    ValueError: a run of a model that is not a baseline, or recipes that did not all run
      the same baselines and seeds (the rule compares like with like).
  """
  if not runs:
    raise ValueError("the pilot has no runs")
  by_recipe: Dict[Recipe, List[PilotRun]] = {}
  for run in runs:
    if run.family not in BASELINES:
      raise ValueError(
          f"pilot run of {run.family!r}: a pilot trains the baselines alone "
          f"({', '.join(BASELINES)}), so that the recipe cannot favour a side"
      )
    by_recipe.setdefault(run.recipe, []).append(run)
  designs = {r: sorted((run.family, run.seed) for run in rs) for r, rs in by_recipe.items()}
  if len({tuple(d) for d in designs.values()}) != 1:
    raise ValueError(f"the recipes ran different baselines or seeds: {designs}")
  scores = [score(recipe, recipe_runs, unigram) for recipe, recipe_runs in by_recipe.items()]
  scores.sort(key=lambda s: (not s.qualifies, s.mean_loss))
  qualified = [s for s in scores if s.qualifies]
  if not qualified:
    closest = min(scores, key=lambda s: (-s.escaped, s.mean_loss))
    return Choice(recipe=None, closest=closest.recipe, scores=scores, unigram=unigram)
  best = qualified[0].mean_loss
  tied = [s for s in qualified if s.mean_loss <= best + TIE_NATS]
  winner = min(tied, key=lambda s: (s.recipe.learning_rate, -s.recipe.warmup_fraction))
  return Choice(recipe=winner.recipe, closest=None, scores=scores, unigram=unigram)


def describe(choice: Choice) -> List[str]:
  """Markdown lines: the rule's table (one row a recipe) and its outcome."""
  lines = [
      "| recipe | runs off the plateau by half the run | mean held-out MLM loss | |",
      "|---|---|---|---|",
  ]
  for s in choice.scores:
    mark = (
        "chosen" if s.recipe == choice.recipe else ("closest" if s.recipe == choice.closest else "")
    )
    loss = "-" if math.isnan(s.mean_loss) else f"{s.mean_loss:.3f}"
    lines.append(f"| {s.recipe.label()} | {s.escaped} of {s.runs} | {loss} | {mark} |")
  if choice.recipe is None:
    lines.append(
        f"\nNo recipe qualified (U = {choice.unigram:.3f}): under each, some baseline run "
        "stayed on the unigram plateau past half the run or ended on it."
    )
  return lines
