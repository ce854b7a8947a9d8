"""Fine-tuning driver shared by finetune_glue and finetune_squad: train, evaluate, predict.

A task adapter (a `TaskAdapter`; the concrete ones are in recurrent_bert/tasks/) supplies
the data as feature caches, the objective, and how predictions become metrics and files;
this module owns the model, the optimizer, the training loop, best-checkpoint keeping and
the files.

The fine-tuning `--model_dir` layout is in `recurrent_bert/model_dir.py` (the contract):
model_config.json, task_info.json, vocab.txt (or sentencepiece.model) and tokenizer.json
(what `saving.open_model` rebuilds it from), training checkpoints, best/ (the best checkpoint by
the task's main metric, with the same files and best_metrics.json), train/ and eval/
TensorBoard events, metrics.jsonl, eval_results.json ({"global_step", "checkpoint",
"main_metric", "main_metric_value" (of the first eval split), "eval_splits", "<split>":
{"<metric>": value}, after training also "seconds_per_train_step"}), predictions/ and
features/.

`recurrent_bert.export` accepts such a model_dir (best/ when present) and writes a
SavedModel with the task's signature (classify / regress / answer_question) and encode.
"""

import dataclasses
import math
import os
from typing import Dict, List, Optional, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert import saving
from recurrent_bert.config import ModelConfig
from recurrent_bert.data import feature_cache

# TaskInfo and the file names are also named through this module by its callers.
from recurrent_bert.model_dir import BEST_DIR
from recurrent_bert.model_dir import EVAL_RESULTS_FILE
from recurrent_bert.training import evaluation
from recurrent_bert.training import events
from recurrent_bert.training import loop as loop_lib
from recurrent_bert.training import optimizers
from recurrent_bert.training.settings import TrainingSettings

MODES = ("train", "eval", "predict", "train_and_eval")


@dataclasses.dataclass(kw_only=True)
class FinetuneSettings(TrainingSettings):
  """The settings of a fine-tuning run: the fine-tuning commands' flags of the same names
  (`TrainingSettings`' and these)."""

  model_dir: str
  learning_rate: float = 2e-5
  keep_checkpoint_max: int = 2
  train_batch_size: int = 32
  eval_batch_size: int = 32
  num_train_epochs: float = 3.0
  max_train_steps: Optional[int] = None
  warmup_steps: Optional[int] = None
  warmup_proportion: float = 0.1
  shuffle_buffer_size: int = 100000


class Finetuner:
  """Builds the task model under `strategy` and runs a mode (see MODES).

  Args:
    strategy: from training/distribution.py.
    adapter: the TaskAdapter.
    settings: FinetuneSettings.
    model_config: the encoder's ModelConfig.
    init_checkpoint: encoder weights for a fresh run (export, pretraining model_dir,
      checkpoint prefix or a converted model dir); None = random initialisation.
    vocab_file: copied into model_dir (and best/) so the run can be exported.
    is_chief: the worker that writes files.
  """

  def __init__(
      self,
      strategy,
      adapter,
      settings: FinetuneSettings,
      model_config: ModelConfig,
      init_checkpoint: Optional[str],
      vocab_file: Optional[str],
      is_chief: bool = True,
      worker_id: int = 0,
  ):
    import keras

    from recurrent_bert.models import build_encoder
    from recurrent_bert.models.task_kinds import build_task_model

    self.strategy = strategy
    self.adapter = adapter
    self.settings = settings
    self.model_config = model_config
    self.init_checkpoint = init_checkpoint
    self.vocab_file = vocab_file
    self.is_chief = is_chief
    self.worker_id = worker_id
    self.model_dir = settings.model_dir
    keras.utils.set_random_seed(settings.seed)
    keras.config.set_dtype_policy(settings.mixed_precision)
    # Under KERAS_BACKEND=jax or torch the commands hand a `numpy_finetuning.Devices`
    # instead of a tf.distribute strategy: the modes are the same, the steps and
    # checkpoints the backend's loop's.
    self.on_tensorflow = keras.backend.backend() == "tensorflow"
    with strategy.scope():
      self.model = build_task_model(build_encoder(model_config), adapter.info)
    if not self.on_tensorflow:
      from recurrent_bert.training.numpy_finetuning import NumpyPredictor

      self.predictor = NumpyPredictor(
          self.model, adapter.objective.model_inputs, adapter.output_keys
      )
    else:
      self.predictor = evaluation.Predictor(
          strategy, self.model, adapter.objective.model_inputs, adapter.output_keys
      )

  # -- files ---------------------------------------------------------------------

  def _write_model_files(self, directory: str) -> None:
    saving.write_model_config(directory, self.model_config)
    io_utils.atomic_write_text(
        os.path.join(directory, layout.TASK_INFO_FILE), self.adapter.info.to_json()
    )
    saving.write_tokenizer_files(directory, self.vocab_file, self.adapter.info.do_lower_case)

  def _best_value(self) -> float:
    best = layout.read_best_metrics(self.model_dir)
    return -math.inf if best is None else float(best["main_metric_value"])

  # -- evaluation ----------------------------------------------------------------

  def predict_split(self, split: str) -> Dict[str, np.ndarray]:
    batch = self.settings.eval_batch_size
    replicas = self.strategy.num_replicas_in_sync
    batch = max(replicas, batch - batch % replicas)
    return self.predictor(self.adapter.feature_cache(split), batch)

  def evaluate(self, step: int, checkpoint: str = "", extra: Optional[Dict] = None) -> Dict:
    """Metrics of every eval split; logged, written to TensorBoard and eval_results.json.

    `extra` (e.g. training time per step) is recorded beside them.
    """
    results = {
        "task": self.adapter.info.task,
        "global_step": step,
        "checkpoint": checkpoint,
        "main_metric": self.adapter.info.main_metric,
        "eval_splits": list(self.adapter.eval_splits),
        **(extra or {}),
    }
    for split in self.adapter.eval_splits:
      metrics = self.adapter.evaluate(split, self.predict_split(split))
      results[split] = metrics
      logging.info(
          "eval %s step %d: %s", split, step, " ".join(f"{k}={v:.4f}" for k, v in metrics.items())
      )
      events.write_scalars(
          self.model_dir,
          {f"{split}/{name}": value for name, value in metrics.items()},
          step,
          self.is_chief,
          layout.EVAL_EVENTS_DIR,
      )
    if self.adapter.eval_splits:
      results["main_metric_value"] = results[self.adapter.eval_splits[0]][
          self.adapter.info.main_metric
      ]
    if self.is_chief:
      io_utils.atomic_write_json(os.path.join(self.model_dir, EVAL_RESULTS_FILE), results)
    return results

  def write_predictions(self) -> List[str]:
    paths = []
    output_dir = os.path.join(self.model_dir, layout.PREDICTIONS_DIR)
    for split in self.adapter.predict_splits:
      outputs = self.predict_split(split)
      if self.is_chief:
        paths += self.adapter.write_predictions(split, outputs, output_dir)
    for path in paths:
      logging.info("wrote %s", path)
    return paths

  # -- modes ---------------------------------------------------------------------

  def num_train_steps(self) -> int:
    s = self.settings
    if s.max_train_steps:
      return s.max_train_steps
    examples = self.adapter.num_examples("train")
    return max(1, math.ceil(s.num_train_epochs * examples / s.train_batch_size))

  def _train_dataset_fn(self, input_context, skip_batches):
    s = self.settings
    # Micro-batches: gradient_accumulation_steps of them per replica make one update.
    per_replica = input_context.get_per_replica_batch_size(
        s.train_batch_size // s.gradient_accumulation_steps
    )
    rows = feature_cache.load_feature_dataset(self.adapter.feature_cache("train"))
    rows = rows.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    rows = rows.shuffle(
        s.shuffle_buffer_size,
        seed=s.seed + input_context.input_pipeline_id,
        reshuffle_each_iteration=True,
    ).repeat()
    rows = rows.batch(per_replica, drop_remainder=True)
    return rows.skip(skip_batches).prefetch(tf.data.AUTOTUNE)

  def _trainer(self, optimizer, num_steps: int):
    """The backend's training loop over the train split's features."""
    s = self.settings
    if self.on_tensorflow:
      return loop_lib.TrainingLoop(
          self.strategy,
          self.model,
          optimizer,
          self._train_dataset_fn,
          self.adapter.objective,
          model_dir=self.model_dir,
          global_batch_size=s.train_batch_size,
          num_train_steps=num_steps,
          is_chief=self.is_chief,
          worker_id=self.worker_id,
          **s.loop_arguments(),
      )
    from recurrent_bert.training import backend_runs
    from recurrent_bert.training import numpy_finetuning

    features = self.adapter.features("train")
    micro_batch = s.train_batch_size // s.gradient_accumulation_steps
    return backend_runs.loop_class()(
        self.model,
        optimizer,
        lambda skip: numpy_finetuning.row_batches(features, micro_batch, s.seed, skip),
        self.adapter.objective,
        model_dir=self.model_dir,
        global_batch_size=s.train_batch_size,
        num_train_steps=num_steps,
        is_chief=self.is_chief,
        **s.loop_arguments(),
    )

  def train(self, evaluate_during_training: bool) -> Dict:
    """Trains (resuming from model_dir), keeping the best checkpoint when evaluating.

    Returns:
      The final evaluation results of the best checkpoint ({} without evaluation).
    """
    s = self.settings
    split = s.gradient_accumulation_steps * self.strategy.num_replicas_in_sync
    if s.train_batch_size % split:
      raise ValueError(
          f"--train_batch_size={s.train_batch_size} must divide by "
          f"--gradient_accumulation_steps x replicas = {split}"
      )
    num_steps = self.num_train_steps()
    warmup = s.warmup_steps if s.warmup_steps is not None else int(s.warmup_proportion * num_steps)
    if warmup >= num_steps:
      # Flagfiles carry the paper's warmup; a short run (--max_train_steps) keeps its shape.
      logging.warning(
          "warmup of %d steps is not below the run's %d training steps: warming up for %d",
          warmup,
          num_steps,
          num_steps - 1,
      )
      warmup = num_steps - 1
    logging.info(
        "%s: %d training examples, %d steps of %d, warmup %d",
        self.adapter.info.task,
        self.adapter.num_examples("train"),
        num_steps,
        s.train_batch_size,
        warmup,
    )
    with self.strategy.scope():
      optimizer = optimizers.optimizer_from_settings(
          self.model.trainable_variables, s, num_steps, warmup
      )
    trainer = self._trainer(optimizer, num_steps)
    if self.is_chief:
      self._write_model_files(self.model_dir)
    if self.init_checkpoint and trainer.latest_checkpoint() is None:
      source = saving.open_model(self.init_checkpoint).restore_encoder(self.model.encoder)
      logging.info("encoder initialised from %s", source)
    best_dir = os.path.join(self.model_dir, BEST_DIR)
    # A save is collective, so every worker saves the best weights: the chief to best/,
    # the others to a scratch copy that they restore at the end themselves. Reading the
    # chief's best/ instead would race with its writes of the same step.
    own_best_dir = (
        best_dir
        if self.is_chief
        else os.path.join(self.model_dir, layout.SCRATCH_DIR, f"best_{self.worker_id}")
    )
    if not self.is_chief:
      io_utils.remove_tree(own_best_dir)  # left by a killed run
    # Under JAX and PyTorch best/ is its weights file alone (written below), read back
    # by path.
    best_manager = None
    if self.on_tensorflow:
      best_manager = tf.train.CheckpointManager(
          saving.tf_checkpoint(self.model),
          own_best_dir,
          max_to_keep=1,
      )

    # Every worker must make the same keep-or-not decision, so the best value lives in
    # memory, read once from the chief's file before training.
    best = {
        "value": self._best_value(),
        "step": None,
        "saved": tf.io.gfile.exists(os.path.join(best_dir, layout.BEST_METRICS_FILE)),
    }

    def evaluate_and_keep_best(step: int) -> None:
      results = self.evaluate(step, trainer.latest_checkpoint() or "")
      value = results["main_metric_value"]
      if value > best["value"] or not best["saved"]:  # the first one even if NaN
        best.update(value=value, saved=True, step=step)
        if best_manager is not None:
          best_manager.save(checkpoint_number=step)
        if not self.is_chief:
          return
        self._write_model_files(best_dir)
        # The same weights for Keras on JAX and PyTorch (no TensorFlow needed to read).
        saving.write_model_weights(self.model, best_dir)
        io_utils.atomic_write_json(
            os.path.join(best_dir, layout.BEST_METRICS_FILE),
            {"main_metric_value": value, **results},
        )
        logging.info("new best %s=%.4f at step %d", self.adapter.info.main_metric, value, step)

    can_evaluate = evaluate_during_training and bool(self.adapter.eval_splits)
    trainer.run(
        evaluate=evaluate_and_keep_best if can_evaluate else None,
        eval_every_steps=s.eval_every_steps,
    )
    timing = {
        "seconds_per_train_step": loop_lib.seconds_per_step(trainer.step_timings),
        "num_train_steps": num_steps,
    }
    logging.info("training: %.4f s/step", timing["seconds_per_train_step"])
    if not can_evaluate:
      return {}
    # The reported result is the best checkpoint's, evaluated again from its files.
    if best["step"] is not None:  # found by this run, in this worker's own copy
      prefix = saving.open_model(own_best_dir).restore(self.model)
      best_step = best["step"]
    else:  # kept from an earlier run: the chief's files are complete
      prefix = saving.open_model(best_dir).restore(self.model)
      best_step = layout.read_best_metrics(self.model_dir)["global_step"]
    results = self.evaluate(best_step, prefix, extra=timing)
    if not self.is_chief:
      io_utils.remove_tree(own_best_dir)
    return results

  def restore_for_inference(self, checkpoint: Optional[str]) -> Tuple[str, int]:
    """Weights for eval/predict: --checkpoint, else model_dir's best/, else its latest.

    Returns:
      (the file read, its training step: 0 when nothing records it).
    """
    stored = saving.open_model(checkpoint or self.model_dir)
    prefix = stored.restore(self.model)
    logging.info("restored %s", prefix)
    return prefix, stored.step() or 0

  def run(self, mode: str, checkpoint: Optional[str] = None) -> Dict:
    """Runs `mode`; returns the evaluation results ({} for train / predict)."""
    if mode not in MODES:
      raise ValueError(f"--mode={mode!r}: choose one of {MODES}")
    results: Dict = {}
    if mode in ("train", "train_and_eval"):
      results = self.train(evaluate_during_training=mode == "train_and_eval")
      if mode == "train_and_eval":
        self.write_predictions()
      return results
    prefix, step = self.restore_for_inference(checkpoint)
    if mode == "eval":
      return self.evaluate(step, prefix)
    self.write_predictions()
    return results
