"""Pretraining under Keras' JAX and PyTorch backends, callable from Python; no TensorFlow.

`run_numpy_pretraining(model_config, settings, data_config, ...)` is what
`KERAS_BACKEND=jax python -m recurrent_bert.pretrain` (and `KERAS_BACKEND=torch`) runs:
the twin of `pretraining_runner.run_pretraining`, with the same `PretrainSettings`, the
same objective, optimizer, schedules and metric sums, and the same model_dir contract
(`recurrent_bert/model_dir.py`): model_config.json and the tokenizer files from the first
step, metrics.jsonl with the same rows, eval_results.json, events where TensorFlow is
installed, and the encoder/ export (its weights file; `export` and every command read it).
Records are read in numpy (`data/pretraining_records.py`, `data/record_batches.py`); its
training checkpoints are ckpt-N.state/ folders (`saving.training_state`).

What differs between the two backends is the loop (`jax_loop.JaxTrainingLoop`, jitted;
`torch_loop.TorchTrainingLoop`, autograd) and the devices: under JAX one (`devices=1`) or
every local one (`devices=None`) through `keras.distribution.DataParallel`, each
micro-batch split over them; under PyTorch one, the one Keras' PyTorch backend picks (a
CUDA GPU where there is one).

Flag-free: bad input raises `errors.InputError`, a NaN loss `driver.NonFiniteLossError`.
"""

from typing import Dict, Optional

from absl import logging
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
from recurrent_bert.training import backend_runs
from recurrent_bert.training import events
from recurrent_bert.training import metric_sums
from recurrent_bert.training import objectives
from recurrent_bert.training import optimizers
from recurrent_bert.training import pretraining_results
from recurrent_bert.training.settings import PretrainSettings


class NumpyPretrainingEvaluator:
  """Held-out MLM (+ NSP) metrics of a `Pretrainer` under JAX or PyTorch: every record once, in file
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
    self._word_starts = None
    if word_starts is not None:
      self._word_starts = keras.ops.convert_to_tensor(np.asarray(list(word_starts), bool))
    self.num_records = pretraining_records.count_records(data_config)
    if not self.num_records:
      raise InputError(f"the eval files hold no records: {list(data_config.input_files)}")
    self.num_steps = pretraining_records.eval_steps(self.num_records, batch_size, 1, max_eval_steps)
    self._forward_sums = backend_runs.inference_function(self._sums)

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
      sums = self._forward_sums(trainable, non_trainable, batch)
      for name, value in sums.items():
        totals[name] = totals.get(name, 0.0) + float(keras.ops.convert_to_numpy(value))
    return pretraining_results.results_from_sums(totals, self.num_steps, self.use_nsp)


_BACKEND_NAMES = {"jax": "JAX", "torch": "PyTorch"}


def _compilation_line():
  """Under JAX, starts counting XLA's programs and returns the function that gives the
  line the run logs at its end; None under PyTorch (its loop logs torch.compile's work)."""
  if keras.backend.backend() != "jax":
    return None
  from recurrent_bert.training import jax_compilation  # pylint: disable=g-import-not-at-top

  jax_compilation.count()  # from here on
  return jax_compilation.describe


def run_numpy_pretraining(
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
    devices: 1, or None for every local device (DataParallel, JAX only).

  Returns:
    Mode "eval": {"global_step", "eval"}; else the final training metrics.
  Raises:
    InputError: bad input, named.
    driver.NonFiniteLossError: the loss became NaN or infinite.
  """
  s = settings
  if (data_config is None and s.mode != "eval") or (eval_data_config is None and s.mode != "train"):
    raise InputError(f"mode={s.mode} needs {'held-out' if data_config else 'training'} records")
  backend = keras.backend.backend()
  if s.mixed_precision == "mixed_float16":
    raise InputError(
        "--mixed_precision=mixed_float16 is TensorFlow's (loss scaling); under "
        f"{_BACKEND_NAMES[backend]} use --mixed_precision=mixed_bfloat16"
    )
  micro_batch = s.train_batch_size // s.gradient_accumulation_steps
  compilation_line = _compilation_line()
  num_devices = backend_runs.set_up_devices(devices, micro_batch)
  process, processes = backend_runs.process_index_and_count()
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
    evaluate = _evaluator(
        model, model_config, s, eval_data_config, num_devices, masker, process == 0
    )
  if s.mode == "eval":
    step = training_state.restore_state(latest, model, optimizer)
    results = {"global_step": step, "eval": evaluate(step)}
    pretraining_results.report_skipped(eval_data_config.skipped)
    return results

  def batches_fn(skip_batches: int):
    return record_batches.training_batches(
        data_config, micro_batch // processes, masker, skip_batches, shard=(process, processes)
    )

  skipped = data_config.skipped
  trainer = backend_runs.loop_class()(
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
        info=dict(info, backend=backend),
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
  if compilation_line is not None:
    logging.info("%s", compilation_line())
  return results


def _evaluator(
    model,
    model_config,
    s: PretrainSettings,
    eval_data_config,
    num_devices: int,
    masker,
    is_chief: bool,
):
  """evaluate(step) -> results, recorded in eval_results.json, metrics.jsonl and events."""
  batch_size = s.resolved_eval_batch_size
  if batch_size % num_devices:
    raise InputError(f"--eval_batch_size={batch_size} does not split over {num_devices} devices")
  evaluator = NumpyPretrainingEvaluator(
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
    if is_chief:
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
