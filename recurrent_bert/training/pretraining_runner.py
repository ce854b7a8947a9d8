"""Pretraining callable from Python: MLM (+ NSP) on a model_dir, under any strategy.

`run_pretraining(strategy, model_config, settings, data_config, ...)` is what
`python -m recurrent_bert.pretrain` runs once its flags are turned into a
`PretrainSettings` (`flags.pretraining.settings_from_flags`); it is the pretraining
twin of `training.finetuning_runner.Finetuner`. It writes the model_dir contract of
`recurrent_bert/model_dir.py`: model_config.json and the tokenizer files from the first
step, training checkpoints (a rerun resumes from the latest), metrics.jsonl, TensorBoard
events, held-out evaluation (`mode="train_and_eval"` / "eval") and the encoder/ export.

Flag-free: bad input raises `errors.InputError`, a NaN loss `loop.NonFiniteLossError`
(the command turns them into exit statuses 2 and 1).
"""

from typing import Optional

from absl import logging
import keras
import tensorflow as tf

from recurrent_bert import saving
from recurrent_bert.config import ModelConfig
from recurrent_bert.data import pretraining_dataset
from recurrent_bert.data.pretraining_records import PretrainingDataConfig
from recurrent_bert.errors import InputError
from recurrent_bert.models import Pretrainer
from recurrent_bert.models import build_encoder
from recurrent_bert.training import loop
from recurrent_bert.training import optimizers
from recurrent_bert.training import pretraining_eval
from recurrent_bert.training import pretraining_results
from recurrent_bert.training.pretraining_results import eval_word_starts
from recurrent_bert.training.pretraining_results import report_skipped
from recurrent_bert.training.settings import MODES  # noqa: F401  (re-exported)
from recurrent_bert.training.settings import PretrainSettings


def run_pretraining(
    strategy,
    model_config: ModelConfig,
    settings: PretrainSettings,
    data_config: Optional[PretrainingDataConfig],
    eval_data_config: Optional[PretrainingDataConfig] = None,
    is_chief: bool = True,
    worker_id: int = 0,
) -> dict:
  """Builds the Pretrainer and trains and/or evaluates it as `settings.mode` says.

  Args:
    strategy: a tf.distribute strategy (`training.distribution`).
    model_config: the encoder's config.
    settings: the run's settings.
    data_config: the training records (None for mode "eval").
    eval_data_config: the held-out records (needed by "eval" and "train_and_eval").
    is_chief: the worker that writes files.
    worker_id: this worker's index (progress lines name it).

  Returns:
    Mode "eval": {"global_step", "eval": the held-out metrics}; else the final training
    metrics.
  Raises:
    InputError: bad input, named (a mode without the records it reads, no checkpoint to
      evaluate, a damaged record).
    loop.NonFiniteLossError: the loss became NaN or infinite (nothing after the last good
      checkpoint is kept).
  """
  s = settings
  if (data_config is None and s.mode != "eval") or (eval_data_config is None and s.mode != "train"):
    raise InputError(f"mode={s.mode} needs {'held-out' if data_config else 'training'} records")
  keras.utils.set_random_seed(s.seed)
  keras.config.set_dtype_policy(s.mixed_precision)
  latest = saving.latest_checkpoint(s.model_dir)
  if s.mode == "eval" and latest is None:
    raise InputError(f"--mode=eval: no checkpoint in --model_dir={s.model_dir}")
  tf.io.gfile.makedirs(s.model_dir)
  if is_chief and s.mode != "eval":
    # What fine-tuning and export read from this dir, there from the first step on.
    saving.write_model_config(s.model_dir, model_config)
    saving.write_tokenizer_files(s.model_dir, s.vocab_file, s.do_lower_case)

  with strategy.scope():
    encoder = build_encoder(model_config)
    model = Pretrainer(encoder, use_nsp=s.use_nsp)
  evaluate = None
  if eval_data_config is not None:
    evaluate = _evaluator(strategy, model, model_config, s, eval_data_config, is_chief)
  if s.mode == "eval":
    step = pretraining_eval.restore_for_eval(model, latest)
    results = {"global_step": step, "eval": evaluate(step)}
    report_skipped(eval_data_config.skipped)
    return results

  with strategy.scope():
    optimizer = optimizers.optimizer_from_settings(
        model.trainable_variables, s, s.num_train_steps, s.warmup_steps
    )
  # The dataset yields micro-batches: N of them per replica make one update.
  num_replicas = strategy.num_replicas_in_sync
  per_replica_batch = s.train_batch_size // (num_replicas * s.gradient_accumulation_steps)

  def dataset_fn(input_context, skip_batches):
    return pretraining_dataset.make_pretraining_dataset(
        data_config,
        per_replica_batch,
        input_context.input_pipeline_id,
        input_context.num_input_pipelines,
        skip_batches=skip_batches,
    )

  skipped = (data_config or eval_data_config).skipped
  trainer = loop.PretrainingLoop(
      strategy,
      model,
      optimizer,
      dataset_fn,
      model_dir=s.model_dir,
      global_batch_size=s.train_batch_size,
      num_train_steps=s.num_train_steps,
      is_chief=is_chief,
      worker_id=worker_id,
      row_extras=(lambda: {"skipped_records": skipped.count()}) if skipped is not None else None,
      checkpoint_iterator=skipped is None,
      **s.loop_arguments(),
  )

  def export(info):
    return saving.export_encoder(
        encoder,
        s.model_dir,
        vocab_file=s.vocab_file,
        do_lower_case=s.do_lower_case,
        info=info,
        with_tf_checkpoint=True,
    )

  return pretraining_results.train_and_export(
      trainer,
      s,
      evaluate,
      skipped,
      latest is None,
      lambda path: saving.open_model(path).restore_pretrainer(model),
      export if is_chief else None,
  )


def _evaluator(strategy, model, model_config, s: PretrainSettings, eval_data_config, is_chief):
  """evaluate(step) -> results: the held-out MLM (+ NSP) metrics, recorded by the chief
  in eval_results.json, metrics.jsonl and eval/ events."""
  evaluator = pretraining_eval.PretrainingEvaluator(
      strategy,
      model,
      eval_data_config,
      s.resolved_eval_batch_size,
      max_eval_steps=s.max_eval_steps,
      jit_compile=s.jit_compile,
      word_starts=eval_word_starts(s, model_config.vocab_size),
  )
  logging.info(
      "evaluation: %d held-out records in %d steps of %d",
      evaluator.num_records,
      evaluator.num_steps,
      evaluator.global_batch_size,
  )
  writer = pretraining_eval.open_eval_writer(s.model_dir) if is_chief else None

  def evaluate(step):
    results = evaluator.evaluate()
    logging.info("eval step %d: %s", step, " ".join(f"{k}={v:.4f}" for k, v in results.items()))
    if is_chief:
      pretraining_eval.record_eval_results(
          s.model_dir, step, saving.latest_checkpoint(s.model_dir) or "", results, writer
      )
    return results

  return evaluate
