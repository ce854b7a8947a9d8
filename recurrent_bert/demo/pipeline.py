"""The demo's plan: which stages run, in which order, for the settings (`Demo`).

`Demo` plans the stages for the settings (corpus, vocab, pretrain_data, eval_data, task,
one pretraining per model and pretraining seed, the fine-tuning sweep, export, query,
report) and runs them with the stage engine. `--data_only` plans the data stages alone
(`Stage.data`: those that read text or make records), and `--prepared_data` stops, in one
line, unless they are finished already: one machine can make the data and another train
on it. The in-process stages build the corpus splits
and the task (origin_task); the others are the package's own commands, run as
subprocesses (`python -m`, so an installed package serves as well as a checkout):
rbert-build-vocab, rbert-create-pretraining-data (train
documents, then the held-out dev documents), recurrent_bert.pretrain,
rbert-sweep (recurrent_bert.finetune_glue per model x learning rate x seed),
recurrent_bert.export, the query program (query_saved_model.py, by its path) and the
report (recurrent_bert.demo.report).

`Demo` combines what each stage needs: its paths and the runs the settings ask for
(`work_paths`), its time estimate (`stage_estimates`), its command line and how its
results are read back (`data_stages`: corpus, vocabulary, records, task; `model_stages`:
pretraining, fine-tuning, export, query, report). Here are only the plan and its driver.
"""

from typing import List

from recurrent_bert.demo import run_results
from recurrent_bert.demo.data_stages import ECHO_DATA
from recurrent_bert.demo.data_stages import ECHO_VOCAB
from recurrent_bert.demo.data_stages import DataStages
from recurrent_bert.demo.model_stages import ECHO_EXPORT
from recurrent_bert.demo.model_stages import ECHO_PRETRAIN
from recurrent_bert.demo.model_stages import ECHO_QUERY
from recurrent_bert.demo.model_stages import ECHO_REPORT
from recurrent_bert.demo.model_stages import ECHO_SWEEP
from recurrent_bert.demo.model_stages import ModelStages
from recurrent_bert.demo.stage_estimates import StageEstimates
from recurrent_bert.demo.stages import Stage
from recurrent_bert.demo.stages import say
from recurrent_bert.demo.work_paths import WORDPIECE
from recurrent_bert.errors import InputError


class Demo(ModelStages, DataStages, StageEstimates):
  """Plans the stages for the settings and runs them, reusing the finished ones.

  Attributes:
    s: the settings.
    engine: the stage engine (markers, results, timings).
  """

  # -- the plan --------------------------------------------------------------------

  def plan(self) -> List[Stage]:
    """Every stage of the settings, in order, with its estimate in seconds; with
    --data_only, the data stages alone."""
    stages = self._every_stage()
    return [st for st in stages if st.data] if self.s.data_only else stages

  def _every_stage(self) -> List[Stage]:
    s = self.s
    corpus_mb = self.corpus_mb
    stages = [
        Stage(
            "corpus",
            "corpus: read, split documents train/dev/test",
            5 + 2 * corpus_mb,
            run=self.stage_corpus,
            data=True,
        ),
        Stage(
            "vocab",
            f"vocabulary: {s.vocabulary}, {s.vocab_size} tokens (rbert-build-vocab)",
            15 + 6e-4 * (s.vocab_max_lines or 15000 * corpus_mb),
            command=self.vocab_command,
            echo=ECHO_VOCAB,
            after=self.vocab_result,
            data=True,
        ),
        Stage(
            "pretrain_data",
            f"pretraining data: MLM + NSP TFRecords, {s.seq_length} "
            "tokens (rbert-create-pretraining-data)",
            10 + 2 * corpus_mb * s.dupe_factor,
            command=self.data_command,
            echo=ECHO_DATA,
            after=self.data_result,
            data=True,
        ),
        Stage(
            "eval_data",
            "held-out pretraining data: the same records of the dev documents",
            5 + 2 * corpus_mb * s.eval_documents_fraction,
            command=self.eval_data_command,
            echo=ECHO_DATA,
            after=self.eval_data_result,
            data=True,
        ),
    ]
    if not s.pretraining_only:  # the fine-tuning task's passages
      stages.append(
          Stage(
              "task",
              "fine-tuning task: which source is a passage from?",
              2,
              run=self.stage_task,
              data=True,
          )
      )
    evaluations = self.evaluations
    side_by_side = s.parallel_pretraining and s.jobs > 1
    side_by_side_gain = self.SIDE_BY_SIDE_GAIN if side_by_side else 1.0
    # Seed by seed: runs side by side are of different models, and under JAX a model's
    # later seeds read its programs from the compilation cache its first seed filled.
    for seed in s.pretrain_seeds:
      for preset in s.presets:
        stages.append(
            Stage(
                f"pretrain:{preset}:seed{seed}",
                f"pretrain {run_results.display_name(preset)} ({preset}), seed {seed}: "
                f"{s.pretrain_steps} steps x {s.batch_size} x {s.seq_length} tokens, "
                f"{evaluations} held-out evaluations",
                self.pretrain_estimate(preset) / side_by_side_gain,
                command=lambda p=preset, r=seed: self.pretrain_command(p, r),
                echo=ECHO_PRETRAIN,
                after=lambda p=preset, r=seed: self.pretrain_result(p, r),
                output_dir=self.pretrain_dir(preset, seed),
                parallel_group="pretraining runs" if side_by_side else None,
            )
        )
    if s.pretraining_only:
      return stages + [
          Stage(
              "report",
              "report: report/claims.md, the papers' MLM claims, and mlm_loss.png",
              10,
              key={"pretrain_seeds": s.pretrain_seeds, "pretraining_only": True},
              run=self.stage_pretraining_report,
          )
      ]
    grid = self.finetune_grid()
    stages += [
        Stage(
            "finetune",
            f"fine-tune: {len(s.presets)} models x {len(s.finetune_learning_rates)} learning "
            f"rates x {len(s.finetune_seeds)} seeds = {len(grid)} runs of "
            f"{s.finetune_steps} steps, {s.jobs} at a time (rbert-sweep)",
            self.finetune_estimate(grid),
            key={"grid": grid},
            command=self.sweep_command,
            echo=ECHO_SWEEP,
            after=self.sweep_result,
            output_dir=s.path("finetune"),
        ),
        Stage(
            "export",
            "export the best fine-tuned model (recurrent_bert.export)",
            30,
            key={"grid": grid},
            command=self.export_command,
            echo=ECHO_EXPORT,
            after=self.export_result,
        ),
        Stage(
            "query",
            "query the SavedModel with raw text (TF + tf-text only)",
            15,
            key={"grid": grid, "queries": s.queries},
            command=self.query_command,
            echo=ECHO_QUERY,
            after=self.query_result,
        ),
        Stage(
            "report",
            "report: report.md, the papers' claims, mlm_loss.png, stability.png, tensorboard/",
            15,
            key={
                "grid": grid,
                "pretrain_seeds": s.pretrain_seeds,
                "queries": s.queries,
                **({"tokenizers": s.tokenizers} if s.tokenizers else {}),
            },
            command=self.report_command,
            echo=ECHO_REPORT,
            after=self.report_result,
        ),
    ]
    # The tokenizer comparison, before the report that covers it.
    stages[-1:-1] = [st for t in s.tokenizers for st in self.tokenizer_stages(t)]
    return stages

  def tokenizer_stages(self, tokenizer: str) -> List[Stage]:
    """The comparison's stages of one tokenizer: its vocabulary (but WordPiece's, the main
    one), whole-word-masked records of the train and dev documents, one pretraining of
    the comparison's model, fine-tuning at one learning rate x --finetune_seeds."""
    s = self.s
    corpus_mb = self.corpus_mb
    preset, seed = self.tokenizer_preset, s.pretrain_seeds[0]
    stages = []
    if tokenizer != WORDPIECE:
      stages.append(
          Stage(
              f"tokenizer_vocab:{tokenizer}",
              f"tokenizers: {tokenizer} SentencePiece model, {s.vocab_size} pieces "
              "(rbert-build-vocab)",
              10 + 2e-4 * (s.vocab_max_lines or 15000 * corpus_mb),
              command=lambda: self.vocab_command(tokenizer),
              echo=ECHO_VOCAB,
              data=True,
          )
      )
    grid = self.finetune_grid(tokenizer)
    stages += [
        Stage(
            f"tokenizer_data:{tokenizer}",
            f"tokenizers: {tokenizer} whole-word-masked pretraining data of the train documents",
            10 + 2 * corpus_mb * s.dupe_factor,
            command=lambda: self.data_command("train", tokenizer),
            echo=ECHO_DATA,
            after=lambda: self.data_result(tokenizer),
            data=True,
        ),
        Stage(
            f"tokenizer_eval_data:{tokenizer}",
            f"tokenizers: {tokenizer} whole-word-masked held-out data of the dev documents",
            5 + 2 * corpus_mb * s.eval_documents_fraction,
            command=lambda: self.data_command("dev", tokenizer),
            echo=ECHO_DATA,
            after=lambda: self.eval_data_result(tokenizer),
            data=True,
        ),
        Stage(
            f"tokenizer_pretrain:{tokenizer}",
            f"tokenizers: pretrain {run_results.display_name(preset)} ({preset}) with {tokenizer}, "
            f"seed {seed}: {s.pretrain_steps} steps x {s.batch_size} x {s.seq_length} tokens",
            self.pretrain_estimate(preset),
            key={"preset": preset, "seed": seed},
            command=lambda: self.pretrain_command(preset, seed, tokenizer),
            echo=ECHO_PRETRAIN,
            after=lambda: self.pretrain_result(preset, seed, tokenizer),
            output_dir=self.pretrain_dir(preset, seed, tokenizer),
        ),
        Stage(
            f"tokenizer_finetune:{tokenizer}",
            f"tokenizers: fine-tune the {tokenizer} model at learning rate "
            f"{self.tokenizer_learning_rate:g} x {len(s.finetune_seeds)} seeds (rbert-sweep)",
            self.finetune_estimate(grid),
            key={"grid": grid},
            command=lambda: self.sweep_command(tokenizer),
            echo=ECHO_SWEEP,
            after=lambda: self.sweep_result(tokenizer),
        ),
    ]
    return stages

  # -- the driver ------------------------------------------------------------------

  def run(self) -> None:
    """Runs every stage not finished yet (after --redo dropped the ones it names).

    Raises:
      StageError: a stage failed, or --redo names no stage.
    """
    stages = self.plan()
    if self.s.prepared_data:  # before --redo deletes anything
      self.check_prepared(stages)
    self.engine.forget(self.s.redo, stages)
    say(
        f"recurrent_bert demo: {len(stages)} stages in {self.s.work_dir} "
        f"(models: {', '.join(self.s.presets)}; pretraining seeds: "
        f"{', '.join(map(str, self.s.pretrain_seeds))}"
        + (
            ""
            if self.s.pretraining_only
            else f"; fine-tuning seeds: {', '.join(map(str, self.s.finetune_seeds))}"
        )
        + ")"
    )
    self.engine.run(stages)

  def check_prepared(self, stages: List[Stage]) -> None:
    """--prepared_data: every data stage is finished here (and not named by --redo), so
    this run only trains.

    Raises:
      InputError: one line naming the first data stage that would run, and how to
        prepare it.
    """
    for stage in stages:
      if stage.data and (stage.name in self.s.redo or self.engine.reusable(stage) is None):
        raise InputError(
            f"--prepared_data: the {stage.name} stage is not finished in {self.s.work_dir}: "
            "prepare the data first (the same command with --data_only in place of "
            "--prepared_data, on any machine) and bring the work dir along"
        )

  def print_summary(self) -> None:
    """The stage timings, then where the outputs are (after a finished run)."""
    self.engine.print_timings()
    outputs = self.results.get("report", {})
    if outputs:
      if outputs.get("table"):
        say("\n" + outputs["table"])
      answers = self.results.get("query", {}).get("answers", [])
      for a in answers:
        say(
            f"query: {a['text'][:100]!r}\n"
            f"  -> {a['label']} (p={a['probability']:.2f})"
            + (f", truth: {a['truth']}" if a.get("truth") else "")
        )
      if self.s.pretraining_only:
        say(f"\nclaims:       {outputs['claims_md']}")
        say(f"loss curves:  {outputs['mlm_loss_png']}")
        return
      say(f"\nreport:       {outputs['report_md']}")
      say(f"loss curves:  {outputs['mlm_loss_png']}")
      say(f"stability:    {outputs['stability_png']}")
      say(
          f"TensorBoard:  {outputs['tensorboard_dir']}  (tensorboard --logdir "
          f"{outputs['tensorboard_dir']})"
      )
      say(f"SavedModel:   {self.results.get('export', {}).get('export_dir')}")
