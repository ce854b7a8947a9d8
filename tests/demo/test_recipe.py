"""The comparison's recipe rule (demo/recipe.py) on pilot tables worked by hand.

U = 6.6 and UNIGRAM_MARGIN = 0.1: a held-out loss below 6.5 is off the plateau. Each
recipe ran BERT-orig and BERT-rab with seeds 0 and 1 for 1,000 steps, evaluated at steps
250, 500, 750 and 1,000.
"""

import pytest

from recurrent_bert.demo import recipe as recipe_rule
from recurrent_bert.demo.recipe import PilotRun
from recurrent_bert.demo.recipe import Recipe

U = 6.6
FAST = Recipe(2e-3, 0.1)  # one seed stalls: fails rule 1
MIDDLE = Recipe(1e-3, 0.1)  # all escape, mean 4.300
SLOW = Recipe(5e-4, 0.25)  # all escape, mean 4.315: a tie with MIDDLE, smaller rate
LATE = Recipe(2.5e-4, 0.25)  # all escape, but only after half the run: fails rule 1


def _curve(*losses):
  return dict(zip((250, 500, 750, 1000), losses))


def _runs(recipe, curves):
  """curves: {(family, seed): [loss at 250, 500, 750, 1000]}."""
  return [
      PilotRun(recipe, family, seed, 1000, _curve(*losses))
      for (family, seed), losses in curves.items()
  ]


TABLE = (
    _runs(
        FAST,
        {
            ("bert", 0): [6.6, 5.0, 4.4, 4.1],
            ("bert", 1): [6.6, 6.61, 6.62, 6.62],  # stays on the plateau
            ("bert_rab", 0): [6.5, 4.9, 4.3, 4.0],
            ("bert_rab", 1): [6.4, 4.8, 4.3, 4.0],
        },
    )
    + _runs(
        MIDDLE,
        {
            ("bert", 0): [6.6, 5.2, 4.6, 4.3],
            ("bert", 1): [6.6, 5.3, 4.7, 4.4],
            ("bert_rab", 0): [6.6, 5.1, 4.5, 4.2],
            ("bert_rab", 1): [6.6, 5.2, 4.6, 4.3],
        },
    )
    + _runs(
        SLOW,
        {
            ("bert", 0): [6.6, 6.4, 4.9, 4.33],  # off at step 500: exactly half the run
            ("bert", 1): [6.6, 6.3, 4.8, 4.32],
            ("bert_rab", 0): [6.5, 6.0, 4.7, 4.31],
            ("bert_rab", 1): [6.6, 6.2, 4.6, 4.30],
        },
    )
    + _runs(
        LATE,
        {
            ("bert", 0): [6.6, 6.6, 5.0, 4.2],  # off only at step 750
            ("bert", 1): [6.6, 6.6, 5.1, 4.2],
            ("bert_rab", 0): [6.6, 6.6, 4.9, 4.1],
            ("bert_rab", 1): [6.6, 6.45, 5.0, 4.1],  # this one by half the run
        },
    )
)


def test_the_rule_picks_the_smaller_rate_of_two_tied_qualifying_recipes():
  choice = recipe_rule.choose(TABLE, U)
  assert choice.recipe == SLOW and choice.closest is None
  scores = {s.recipe: s for s in choice.scores}
  assert scores[MIDDLE].mean_loss == pytest.approx(4.3)
  assert scores[SLOW].mean_loss == pytest.approx(4.315)
  assert (scores[FAST].escaped, scores[LATE].escaped) == (3, 1)
  assert [s.recipe for s in choice.scores] == [MIDDLE, SLOW, LATE, FAST]  # qualifying first
  lines = recipe_rule.describe(choice)
  assert (
      "| peak 0.0005, warm-up 25%, β2 0.999, ε 1e-06, clip 1 | 4 of 4 | 4.315 | chosen |" in lines
  )


def test_beyond_the_tie_the_lower_mean_loss_wins():
  slower = Recipe(5e-4, 0.25, beta_2=0.98)
  worse = [
      PilotRun(slower, r.family, r.seed, r.steps, {k: v + 0.05 for k, v in r.eval_curve.items()})
      for r in TABLE
      if r.recipe == SLOW
  ]
  without_slow = [r for r in TABLE if r.recipe != SLOW] + worse
  assert recipe_rule.choose(without_slow, U).recipe == MIDDLE


def test_no_qualifying_recipe_chooses_none_and_names_the_closest():
  stalled = [r for r in TABLE if r.recipe in (FAST, LATE)]
  choice = recipe_rule.choose(stalled, U)
  assert choice.recipe is None and choice.closest == FAST  # 3 of 4 off, against 1 of 4
  assert recipe_rule.describe(choice)[-1].startswith("\nNo recipe qualified (U = 6.600)")


def test_the_pilot_trains_the_baselines_alone_with_one_design():
  candidate = PilotRun(MIDDLE, "swishrnn", 0, 1000, _curve(6.6, 5.0, 4.0, 3.9))
  with pytest.raises(ValueError, match="a pilot trains the baselines alone"):
    recipe_rule.choose(TABLE + [candidate], U)
  fewer_seeds = [r for r in TABLE if not (r.recipe == MIDDLE and r.seed == 1)]
  with pytest.raises(ValueError, match="different baselines or seeds"):
    recipe_rule.choose(fewer_seeds, U)


def test_a_recipe_gives_the_pretraining_flags():
  assert Recipe(1e-3, 0.25, beta_2=0.98, epsilon=1e-8, clip_norm=0).flags(1500) == [
      "--learning_rate=0.001",
      "--warmup_steps=375",
      "--adam_beta2=0.98",
      "--adam_epsilon=1e-08",
      "--clip_norm=0",
  ]
  with pytest.raises(ValueError, match="warmup_fraction"):
    Recipe(1e-3, 1.0)
