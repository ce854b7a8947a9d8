"""Pretraining under Keras' JAX backend, callable from Python; no TensorFlow needed.

`run_jax_pretraining(model_config, settings, data_config, ...)` is what
`KERAS_BACKEND=jax python -m recurrent_bert.pretrain` runs: the JAX twin of
`pretraining_runner.run_pretraining`, with the same `PretrainSettings`, the same
objective, optimizer, schedules and metric sums, and the same model_dir contract
(`recurrent_bert/model_dir.py`): model_config.json and the tokenizer files from the first
step, metrics.jsonl with the same rows, eval_results.json, events where TensorFlow is
installed, and the encoder/ export (its weights file; `export` and every command read it).
Its training checkpoints are ckpt-N.state/ folders (`saving.training_state`).

Devices: one (`devices=1`), or every local one (`devices=None`) through
`keras.distribution.DataParallel`: each micro-batch is split over them, the update is
the one-device update of the whole batch.

Flag-free: bad input raises `errors.InputError`, a NaN loss `driver.NonFiniteLossError`.
"""

from typing import Dict, Optional

from absl import logging
import jax
import jax.numpy as jnp
import keras
import numpy as np

from recurrent_bert import saving
from recurrent_bert.config import ModelConfig
from recurrent_bert.data import pretraining_records
from recurrent_bert.data import record_batches
from recurrent_bert.data.pretraining_records import PretrainingDataConfig
from recurrent_bert.errors import InputError
from recurrent_bert.models import Pretrainer
from recurrent_bert.models import build_encoder
from recurrent_bert.saving import training_state
from recurrent_bert.training import events
from recurrent_bert.training import jax_compilation
from recurrent_bert.training import metric_sums
from recurrent_bert.training import objectives
from recurrent_bert.training import optimizers
from recurrent_bert.training import pretraining_results
from recurrent_bert.training.jax_loop import JaxTrainingLoop
from recurrent_bert.training.settings import PretrainSettings


class JaxPretrainingEvaluator:
  """Held-out MLM (+ NSP) metrics of a `Pretrainer` under JAX: every record once, in file
  order, the last batch padded with rows of weight 0; the sums and formulas are
  `pretraining_eval.PretrainingEvaluator`'s (`pretraining_results.results_from_sums`).

  Args:
    model: the Pretrainer.
    data_config: the held-out records.
    batch_size: records per batch (a multiple of the devices under DataParallel).
    max_eval_steps: 0 reads every record; N > 0 stops after N batches.
    word_starts: per token id, whether it starts a word (adds mlm_loss_per_word).
    masker: masks unmasked records (--dynamic_masking), batch i with the seed (seed + 3,
      i): every evaluation scores the same masks.
  """

  def __init__(
      self,
      model,
      data_config: PretrainingDataConfig,
      batch_size: int,
      max_eval_steps: int = 0,
      word_starts=None,
      masker: Optional[record_batches.BatchMasker] = None,
  ):
    self.model = model
    self.masker = masker
    self.data_config = data_config
    self.batch_size = batch_size
    self.use_nsp = bool(getattr(model, "use_nsp", False))
    self._objective = objectives.PretrainingObjective(self.use_nsp)
    self._word_starts = None if word_starts is None else jnp.asarray(list(word_starts), bool)
    self.num_records = pretraining_records.count_records(data_config)
    if not self.num_records:
      raise InputError(f"the eval files hold no records: {list(data_config.input_files)}")
    self.num_steps = pretraining_records.eval_steps(self.num_records, batch_size, 1, max_eval_steps)
    self._forward_sums = jax.jit(self._sums)

  def _sums(self, trainable, non_trainable, batch):
    outputs, _ = self.model.stateless_call(
        trainable, non_trainable, self._objective.model_inputs(batch), training=False
    )
    sums = self._objective.sums(batch, outputs)
    if self._word_starts is not None:
      sums["mlm_words"] = metric_sums.masked_word_count(
          batch["masked_lm_ids"], batch["masked_lm_weights"], self._word_starts
      )
    return sums

  def evaluate(self) -> Dict[str, float]:
    trainable = [v.value for v in self.model.trainable_variables]
    non_trainable = [v.value for v in self.model.non_trainable_variables]
    totals: Dict[str, float] = {}
    batches = pretraining_records.batches(
        self.data_config, self.batch_size, pad_last=True, unmasked=self.masker is not None
    )
    for i, batch in zip(range(self.num_steps), batches):
      if self.masker is not None:
        batch = self.masker(batch, np.random.default_rng([self.data_config.seed + 3, i]))
      sums = jax.device_get(self._forward_sums(trainable, non_trainable, batch))
      for name, value in sums.items():
        totals[name] = totals.get(name, 0.0) + float(value)
    return pretraining_results.results_from_sums(totals, self.num_steps, self.use_nsp)


def set_up_devices(devices: Optional[int], micro_batch_size: int) -> int:
  """Uses one device, or every local one through Keras' DataParallel; returns the count.

  Raises:
    InputError: the micro-batch does not split evenly over the devices.
  """
  available = jax.devices()
  count = len(available) if devices is None else devices
  if count > len(available):
    raise InputError(f"{count} devices asked for, {len(available)} found: {available}")
  if count > 1:
    if micro_batch_size % count:
      raise InputError(
          f"--train_batch_size / --gradient_accumulation_steps = {micro_batch_size} "
          f"examples per micro-batch do not split over the {count} devices"
      )
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=available[:count]))
  logging.info("JAX: %d of %d %s device(s)", count, len(available), available[0].platform)
  return count


def run_jax_pretraining(
    model_config: ModelConfig,
    settings: PretrainSettings,
    data_config: Optional[PretrainingDataConfig],
    eval_data_config: Optional[PretrainingDataConfig] = None,
    masker: Optional[record_batches.BatchMasker] = None,
    devices: Optional[int] = 1,
) -> dict:
  """Builds the Pretrainer and trains and/or evaluates it as `settings.mode` says.

  Args:
    model_config: the encoder's config.
    settings: the run's settings (`PretrainSettings`, as on TensorFlow).
    data_config: the training records (None for mode "eval").
    eval_data_config: the held-out records ("eval" and "train_and_eval").
    masker: masks unmasked records while reading (--dynamic_masking).
    devices: 1, or None for every local device (DataParallel).

  Returns:
    Mode "eval": {"global_step", "eval"}; else the final training metrics.
  Raises:
    InputError: bad input, named.
    driver.NonFiniteLossError: the loss became NaN or infinite.
  """
  s = settings
  if (data_config is None and s.mode != "eval") or (eval_data_config is None and s.mode != "train"):
    raise InputError(f"mode={s.mode} needs {'held-out' if data_config else 'training'} records")
  if s.mixed_precision == "mixed_float16":
    raise InputError(
        "--mixed_precision=mixed_float16 is TensorFlow's (loss scaling); under JAX use "
        "--mixed_precision=mixed_bfloat16"
    )
  micro_batch = s.train_batch_size // s.gradient_accumulation_steps
  jax_compilation.count()  # from here on
  num_devices = set_up_devices(devices, micro_batch)
  keras.utils.set_random_seed(s.seed)
  keras.config.set_dtype_policy(s.mixed_precision)
  latest = saving.latest_state(s.model_dir)
  if s.mode == "eval" and latest is None:
    raise InputError(f"--mode=eval: no checkpoint in --model_dir={s.model_dir}")
  if s.mode != "eval":
    # What fine-tuning and export read from this dir, there from the first step on.
    saving.write_model_config(s.model_dir, model_config)
    saving.write_tokenizer_files(s.model_dir, s.vocab_file, s.do_lower_case)

  model = Pretrainer(build_encoder(model_config), use_nsp=s.use_nsp)
  optimizer = optimizers.optimizer_from_settings(
      model.trainable_variables, s, s.num_train_steps, s.warmup_steps
  )
  evaluate = None
  if eval_data_config is not None:
    evaluate = _evaluator(model, model_config, s, eval_data_config, num_devices, masker)
  if s.mode == "eval":
    step = training_state.restore_state(latest, model, optimizer)
    results = {"global_step": step, "eval": evaluate(step)}
    pretraining_results.report_skipped(eval_data_config.skipped)
    return results

  process, processes = jax.process_index(), jax.process_count()

  def batches_fn(skip_batches: int):
    return record_batches.training_batches(
        data_config, micro_batch // processes, masker, skip_batches, shard=(process, processes)
    )

  skipped = data_config.skipped
  trainer = JaxTrainingLoop(
      model,
      optimizer,
      batches_fn,
      objectives.PretrainingObjective(s.use_nsp),
      model_dir=s.model_dir,
      global_batch_size=s.train_batch_size,
      num_train_steps=s.num_train_steps,
      is_chief=process == 0,
      row_extras=(lambda: {"skipped_records": skipped.count()}) if skipped is not None else None,
      **s.loop_arguments(),
  )

  def export(info):
    return saving.export_encoder(
        model.encoder,
        s.model_dir,
        vocab_file=s.vocab_file,
        do_lower_case=s.do_lower_case,
        info=dict(info, backend="jax"),
    )

  results = pretraining_results.train_and_export(
      trainer,
      s,
      evaluate,
      skipped,
      latest is None,
      lambda path: saving.open_model(path).restore_pretrainer(model),
      export if process == 0 else None,
  )
  logging.info("%s", jax_compilation.describe())
  return results


def _evaluator(
    model, model_config, s: PretrainSettings, eval_data_config, num_devices: int, masker
):
  """evaluate(step) -> results, recorded in eval_results.json, metrics.jsonl and events."""
  batch_size = s.resolved_eval_batch_size
  if batch_size % num_devices:
    raise InputError(f"--eval_batch_size={batch_size} does not split over {num_devices} devices")
  evaluator = JaxPretrainingEvaluator(
      model,
      eval_data_config,
      batch_size,
      max_eval_steps=s.max_eval_steps,
      word_starts=pretraining_results.eval_word_starts(s, model_config.vocab_size),
      masker=masker,
  )
  logging.info(
      "evaluation: %d held-out records in %d steps of %d",
      evaluator.num_records,
      evaluator.num_steps,
      batch_size,
  )

  def evaluate(step):
    results = evaluator.evaluate()
    logging.info("eval step %d: %s", step, " ".join(f"{k}={v:.4f}" for k, v in results.items()))
    if jax.process_index() == 0:
      pretraining_results.record_eval_results(
          s.model_dir,
          step,
          saving.latest_state(s.model_dir) or "",
          results,
          lambda scalars: events.write_scalars(
              s.model_dir, scalars, step, events_dir=pretraining_results.EVAL_SPLIT
          ),
      )
    return results

  return evaluate
