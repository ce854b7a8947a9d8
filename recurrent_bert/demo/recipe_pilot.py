"""The recipe pilot: candidate pretraining recipes on the baselines, then the recipe rule.

  python -m recurrent_bert.demo.recipe_pilot --work_dir=DIR [--size=mini] [--steps=400] \
      [--seeds=0,1] [--recipes=2e-3:0.1,1e-3:0.1,5e-4:0.25] [--jobs=4]

DIR is a demo work dir whose data stages are finished (the demo's --data_only): the pilot
trains on its records with its vocabulary, sequence length and batch. Each recipe trains
each baseline (BERT-orig and BERT-rab at --size: the models the claims are judged against,
never the models the claims are about) with each of --seeds for --steps steps, evaluating
the held-out records 4 times, --jobs runs at a time (under JAX they share the work dir's
persistent compilation cache: a model compiles once). Then `recipe.choose` applies the
rule of demo/recipe.py and the pilot writes DIR/recipe_pilot/recipe.json (the chosen
recipe as the demo's flags, every recipe's score) and recipe.md, and prints the table and
the flags (with none chosen, the closest recipe's, marked as such). A finished run is not
run again, and keeps its held-out losses but not its weights (`prune`). Runs are kept under
DIR/recipe_pilot/<recipe and steps>/<preset>_seed<N>, so a later pilot with another list
of recipes reads back the runs of the recipes both lists name.

A recipe is LR:WARMUP[:BETA2[:EPSILON[:CLIP]]]: the peak learning rate, the warm-up as a
fraction of the steps, Adam's beta_2 and epsilon, global-norm clipping (defaults 0.999,
1e-6, 1).

Exit status: 0 with a recipe chosen, 1 when none qualified or a run failed, 2 for bad flags.
"""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Sequence, Tuple

from absl import flags

from recurrent_bert import cli
from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert.config import PRESETS
from recurrent_bert.demo import plateau
from recurrent_bert.demo import recipe as recipe_rule
from recurrent_bert.demo import run_results
from recurrent_bert.demo.model_stages import ModelStages
from recurrent_bert.demo.settings import SETTINGS_FILE
from recurrent_bert.demo.settings import Settings

FLAGS = flags.FLAGS
PILOT_DIR = "recipe_pilot"
DEFAULT_RECIPES = "2e-3:0.1,1e-3:0.1,1e-3:0.25,5e-4:0.25"


def define_flags() -> None:
  flags.DEFINE_string("work_dir", None, "A demo work dir whose data stages are finished.")
  flags.DEFINE_string("size", "mini", "The baselines' preset size.")
  flags.DEFINE_integer("steps", 400, "Training steps of each pilot run.")
  flags.DEFINE_list("seeds", ["0", "1"], "Seeds of each baseline under each recipe.")
  flags.DEFINE_list("recipes", DEFAULT_RECIPES.split(","), "LR:WARMUP[:BETA2[:EPSILON[:CLIP]]]")
  flags.DEFINE_integer("jobs", 4, "Pilot runs at a time.")
  flags.DEFINE_enum(
      "backend",
      None,
      ["tensorflow", "jax", "torch"],
      "The runs' Keras backend (default: the work dir's).",
  )


def parse_recipe(text: str, source: str = "--recipes") -> recipe_rule.Recipe:
  """A Recipe from LR:WARMUP[:BETA2[:EPSILON[:CLIP]]]; ValueError naming `source` (the flag
  or setting the text came from) and the text."""
  parts = text.strip().split(":")
  if not 2 <= len(parts) <= 5:
    raise ValueError(f"{source}: {text!r} is not LR:WARMUP[:BETA2[:EPSILON[:CLIP]]]")
  try:
    numbers = [float(p) for p in parts]
  except ValueError:
    raise ValueError(f"{source}: {text!r} has a part that is not a number") from None
  names = ("learning_rate", "warmup_fraction", "beta_2", "epsilon", "clip_norm")
  try:
    return recipe_rule.Recipe(**dict(zip(names, numbers)))
  except ValueError as e:
    raise ValueError(f"{source}: {text!r}: {e}") from None


def work_dir_settings(work_dir: str, size: str, seeds: List[int], backend) -> Settings:
  """The demo Settings recorded in `work_dir`, for the baselines at `size`."""
  path = os.path.join(work_dir, SETTINGS_FILE)
  if not os.path.isfile(path):
    raise ValueError(f"--work_dir: {work_dir} has no {SETTINGS_FILE}: make its data first")
  with open(path, encoding="utf-8") as f:
    recorded = json.load(f)
  names = {field.name for field in dataclasses.fields(Settings)}
  presets = [f"{family}_{size}" for family in recipe_rule.BASELINES]
  for preset in presets:
    if preset not in PRESETS:
      raise ValueError(f"--size: no preset {preset}")
  recorded = {k: v for k, v in recorded.items() if k in names}
  if backend:
    recorded["backend"] = backend
  return Settings(
      **recorded,
      work_dir=os.path.abspath(work_dir),
      presets=presets,
      size=size,
      pretrain_seeds=seeds,
      finetune_seeds=[],
      finetune_learning_rates=[],
      cache_dir=None,
  )


@dataclasses.dataclass
class PilotJob:
  recipe: recipe_rule.Recipe
  preset: str
  seed: int
  run_dir: str
  command: List[str]

  def eval_curve(self) -> Dict[int, float]:
    records = io_utils.read_metrics_log(self.run_dir)
    return {step: float(r["eval/mlm_loss"]) for step, r in records.items() if "eval/mlm_loss" in r}


def pilot_jobs(
    settings: Settings, recipes: Sequence[recipe_rule.Recipe], steps: int
) -> List[PilotJob]:
  """One pretraining command per recipe x baseline x seed: the demo's, with the pilot's
  model dir, steps and the recipe's flags appended (the last value of a flag wins)."""
  stages = ModelStages(settings)
  every = max(1, steps // 4)
  jobs = []
  for recipe in recipes:
    for preset in settings.presets:
      for seed in settings.pretrain_seeds:
        run_dir = settings.path(PILOT_DIR, recipe.key(steps), f"{preset}_seed{seed}")
        command = stages.pretrain_command(preset, seed) + [
            f"--model_dir={run_dir}",
            f"--num_train_steps={steps}",
            *recipe.flags(steps),
            f"--log_steps={every}",
            f"--steps_per_loop={every}",
            f"--save_checkpoints_steps={steps}",
            f"--eval_every_steps={every}",
        ]
        jobs.append(PilotJob(recipe, preset, seed, run_dir, command))
  return jobs


def prune(run_dir: str) -> None:
  """Removes a finished pilot run's checkpoints and exported encoder (some 80 MB at mini
  size): the rule reads its held-out losses alone (metrics.jsonl), and a work dir carried
  to another machine stays small."""
  for name in os.listdir(run_dir):
    # ckpt-N.* (TensorFlow) and ckpt-N.state/ (JAX), model_dir.py's layout.
    if name.startswith("ckpt-") or name in (layout.CHECKPOINT_STATE_FILE, layout.EXPORT_DIR):
      path = os.path.join(run_dir, name)
      if os.path.isdir(path):
        shutil.rmtree(path)
      else:
        os.remove(path)


def run_jobs(jobs: Sequence[PilotJob], steps: int, parallel: int, log_dir: str) -> List[PilotJob]:
  """Runs the unfinished jobs, `parallel` at a time, and prunes the finished ones; returns
  those that failed."""
  os.makedirs(log_dir, exist_ok=True)
  pending = [job for job in jobs if steps not in job.eval_curve()]
  for job in jobs:
    if job not in pending:
      prune(job.run_dir)
  if len(pending) < len(jobs):
    print(f"{len(jobs) - len(pending)} of {len(jobs)} pilot runs finished earlier: read back")
  running: List[Tuple[PilotJob, subprocess.Popen]] = []
  failed = []
  total, started = len(pending), time.time()
  while pending or running:
    while pending and len(running) < parallel:
      job = pending.pop(0)
      name = os.path.relpath(job.run_dir, os.path.dirname(log_dir)).replace(os.sep, "_")
      log = open(os.path.join(log_dir, name + ".log"), "w", encoding="utf-8")  # pylint: disable=consider-using-with
      running.append((job, subprocess.Popen(job.command, stdout=log, stderr=subprocess.STDOUT)))
      log.close()
    time.sleep(0.5)
    for entry in list(running):
      job, process = entry
      if process.poll() is None:
        continue
      running.remove(entry)
      if process.returncode != 0 or steps not in job.eval_curve():
        failed.append(job)
      else:
        prune(job.run_dir)
      done = total - len(pending) - len(running)
      elapsed = time.time() - started
      eta = elapsed / done * (total - done) if done else float("nan")
      print(
          f"[{done}/{total}] {job.preset} seed {job.seed} under {job.recipe.label()}: "
          f"{'failed' if job in failed else 'done'} ({elapsed:.0f} s, ETA {eta:.0f} s)",
          flush=True,
      )
  return failed


def main(argv) -> int:
  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  if not FLAGS.work_dir:
    cli.fail("--work_dir is required")
  try:
    recipes = [parse_recipe(text) for text in FLAGS.recipes if text.strip()]
    seeds = sorted({int(s) for s in FLAGS.seeds})
    if not recipes or not seeds or FLAGS.steps < 4 or FLAGS.jobs < 1:
      raise ValueError("--recipes and --seeds need one each, --steps >= 4, --jobs >= 1")
    settings = work_dir_settings(FLAGS.work_dir, FLAGS.size, seeds, FLAGS.backend)
  except ValueError as e:
    cli.fail(str(e))
  stages = ModelStages(settings)
  # The records' stages must have finished; the held-out one says how many records an
  # evaluation reads (the unigram plateau is counted over those).
  finished = {}
  for name in ("pretrain_data", "eval_data"):
    marker = stages.engine.marker(name)
    if not os.path.isfile(marker):
      cli.fail(
          f"--work_dir: its stage {name} has not finished: run the demo with --data_only there"
      )
    with open(marker, encoding="utf-8") as f:
      finished[name] = json.load(f)["result"]
  jobs = pilot_jobs(settings, recipes, FLAGS.steps)
  failed = run_jobs(jobs, FLAGS.steps, FLAGS.jobs, settings.path(PILOT_DIR, "logs"))
  if failed:
    for job in failed:
      print(
          f"error: {job.preset} seed {job.seed} under {job.recipe.label()} failed: see "
          f"{settings.path(PILOT_DIR, 'logs')}",
          file=sys.stderr,
      )
    return 1
  unigram, _ = plateau.unigram_plateau(
      os.path.join(stages.data_dir("train"), "*.tfrecord"),
      os.path.join(stages.data_dir("dev"), "*.tfrecord"),
      finished["eval_data"]["read_per_evaluation"],
  )
  runs = [
      recipe_rule.PilotRun(
          job.recipe, run_results.family_of(job.preset), job.seed, FLAGS.steps, job.eval_curve()
      )
      for job in jobs
  ]
  choice = recipe_rule.choose(runs, unigram)
  lines = recipe_rule.describe(choice)
  chosen = choice.recipe
  # The demo's recipe flags are the pretraining command's, for the comparison's steps:
  # the chosen recipe's, or with none chosen the closest one's (the report says so).
  demo_flags = (chosen or choice.closest).flags(settings.pretrain_steps)
  io_utils.atomic_write_json(
      settings.path(PILOT_DIR, "recipe.json"),
      {
          "unigram": unigram,
          "steps": FLAGS.steps,
          "seeds": seeds,
          "chosen": dataclasses.asdict(chosen) if chosen else None,
          "closest": dataclasses.asdict(choice.closest) if choice.closest else None,
          "qualified": chosen is not None,
          "demo_flags": demo_flags,
          "scores": [dict(dataclasses.asdict(s), recipe=s.recipe.label()) for s in choice.scores],
      },
  )
  io_utils.atomic_write_text(settings.path(PILOT_DIR, "recipe.md"), "\n".join(lines) + "\n")
  print("\n".join(lines))
  which = "the chosen recipe" if chosen else "the closest recipe (none qualified)"
  print(f"demo flags of {which}: {' '.join(demo_flags)}")
  return 0 if chosen else 1


if __name__ == "__main__":
  define_flags()
  cli.run(lambda argv: sys.exit(main(argv)))
