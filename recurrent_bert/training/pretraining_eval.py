"""Held-out pretraining evaluation: masked-LM and NSP loss and accuracy over whole eval sets.

What google-research/bert's `run_pretraining.py --do_eval` reports, computed so that the
numbers do not depend on the strategy or the batch size: every replica returns *sums*
(`metric_sums.pretraining_sums`: Σ w·CE, Σ w, Σ w·correct over masked positions; NSP sums
over real examples), the sums are added across replicas and steps, and only then divided:

  mlm_loss       = Σ w·CE / Σ w            (masked positions of weight 1 only)
  mlm_accuracy   = Σ w·[argmax = id] / Σ w
  mlm_perplexity = exp(mlm_loss)
  nsp_loss       = Σ_real CE / #real examples,   nsp_accuracy likewise
  loss           = mlm_loss + nsp_loss

Given the vocabulary's word starts, it also reports mlm_words (masked positions whose
original token starts a word) and mlm_loss_per_word = Σ w·CE / mlm_words: the loss of a
masked word, comparable across vocabularies (WordPiece, unigram, BPE) that cut the same
words into different numbers of pieces. It means that only for records made with
whole-word masking (every piece of a masked word masked).

The eval records are read once each, unshuffled, and padded to full static batches with
rows of weight 0 (`pretraining_dataset.make_eval_dataset`), so every replica runs the
same number of steps on the same shapes (XLA and TPUs need both).
"""

import os
from typing import Dict, Optional, Sequence

import tensorflow as tf

from recurrent_bert import model_dir as layout
from recurrent_bert import saving
from recurrent_bert.data import pretraining_dataset
from recurrent_bert.data import record_errors
from recurrent_bert.data.pretraining_dataset import PretrainingDataConfig
from recurrent_bert.errors import InputError
from recurrent_bert.training import loop
from recurrent_bert.training import metric_sums
from recurrent_bert.training import objectives
from recurrent_bert.training import pretraining_results
from recurrent_bert.training.pretraining_results import EVAL_SPLIT  # noqa: F401


class PretrainingEvaluator:
  """Evaluates a `Pretrainer` on held-out records under a strategy.

  Args:
    strategy: the strategy the model was built under.
    model: a `Pretrainer` (outputs `mlm_logits` [B, P, V] and, with NSP, `nsp_logits`
      [B, 2]).
    data_config: the eval records and their schema (`input_files`, `max_seq_length`,
      `max_predictions_per_seq`, `masker` for unmasked records).
    global_batch_size: examples per step over all replicas; a multiple of the replica
      count.
    max_eval_steps: 0 reads every record; N > 0 stops after N steps (N x batch records).
    jit_compile: compile the per-replica step with XLA.
    word_starts: per token id, whether it starts a word (`data.vocab.Vocabulary
      .word_starts`, at least as long as the model's vocabulary); adds mlm_words and
      mlm_loss_per_word to the results. None: per-piece metrics only.
  """

  def __init__(
      self,
      strategy: tf.distribute.Strategy,
      model,
      data_config: PretrainingDataConfig,
      global_batch_size: int,
      max_eval_steps: int = 0,
      jit_compile: bool = False,
      word_starts: Optional[Sequence[bool]] = None,
  ):
    replicas = strategy.num_replicas_in_sync
    if global_batch_size % replicas:
      raise InputError(
          f"eval batch size {global_batch_size} is not a multiple of the {replicas} replicas"
      )
    self.strategy = strategy
    self.model = model
    self.data_config = data_config
    self.global_batch_size = global_batch_size
    self.use_nsp = bool(getattr(model, "use_nsp", False))
    self._objective = objectives.PretrainingObjective(self.use_nsp)
    self._word_starts = None if word_starts is None else tf.constant(list(word_starts), tf.bool)
    self._stat_names = metric_sums.STAT_NAMES + (() if word_starts is None else ("mlm_words",))
    self.num_records = pretraining_dataset.count_records(data_config)
    if not self.num_records:
      raise InputError(f"the eval files hold no records: {list(data_config.input_files)}")
    # Input pipelines (one per worker or host) never outnumber the replicas.
    self.num_steps = pretraining_dataset.eval_steps(
        self.num_records, global_batch_size, replicas, max_eval_steps
    )
    self._replica_step = tf.function(self._forward_sums, jit_compile=jit_compile)
    self._eval_fn = tf.function(self._eval_loop)

  def _forward_sums(self, batch):
    outputs = self.model(self._objective.model_inputs(batch), training=False)
    sums = self._objective.sums(batch, outputs)
    if self._word_starts is not None:
      sums["mlm_words"] = metric_sums.masked_word_count(
          batch["masked_lm_ids"], batch["masked_lm_weights"], self._word_starts
      )
    return sums

  def _eval_loop(self, iterator):
    totals = {name: tf.constant(0.0) for name in self._stat_names}
    for _ in tf.range(self.num_steps):
      per_replica = self.strategy.run(self._replica_step, args=(next(iterator),))
      totals = {
          name: totals[name]
          + self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica[name], axis=None)
          for name in totals
      }
    return totals

  def _dataset_fn(self, input_context: tf.distribute.InputContext) -> tf.data.Dataset:
    batch = input_context.get_per_replica_batch_size(self.global_batch_size)
    replicas_per_pipeline = max(
        1, self.strategy.num_replicas_in_sync // input_context.num_input_pipelines
    )
    return pretraining_dataset.make_eval_dataset(
        self.data_config,
        batch,
        self.num_steps * replicas_per_pipeline,
        input_context.input_pipeline_id,
        input_context.num_input_pipelines,
    )

  def evaluate_sums(self) -> Dict[str, float]:
    """The STAT_NAMES sums (and mlm_words) over the eval set (every worker must call it)."""
    dataset = self.strategy.distribute_datasets_from_function(self._dataset_fn)
    with record_errors.reading_records():
      sums = self._eval_fn(iter(dataset))
    return {name: float(value) for name, value in sums.items()}

  def evaluate(self) -> Dict[str, float]:
    """mlm_loss, mlm_accuracy, mlm_perplexity, (nsp_loss, nsp_accuracy,) loss, and the
    num_examples / num_predictions they are over; with word starts, mlm_loss_per_word and
    mlm_words."""
    return pretraining_results.results_from_sums(self.evaluate_sums(), self.num_steps, self.use_nsp)


def restore_for_eval(model, checkpoint: str) -> int:
  """Loads a training checkpoint's model weights (not the optimizer); returns its step."""
  stored = saving.open_model(checkpoint)
  stored.restore(model)
  return stored.step()


def open_eval_writer(model_dir: str) -> tf.summary.SummaryWriter:
  """The TensorBoard writer of model_dir/eval/, to reuse for every evaluation of a run."""
  return tf.summary.create_file_writer(os.path.join(model_dir, layout.EVAL_EVENTS_DIR))


def record_eval_results(
    model_dir: str,
    step: int,
    checkpoint: str,
    results: Dict[str, float],
    writer: Optional[tf.summary.SummaryWriter] = None,
) -> Dict:
  """`pretraining_results.record_eval_results` with TensorBoard scalars `eval/<metric>`
  in model_dir/eval/ through `writer` (`open_eval_writer(model_dir)`, kept across a
  run's evaluations: one events file, not one per evaluation; None opens one for this
  call). Call on the chief only.

  Returns:
    The eval_results.json content.
  """
  own_writer = writer is None
  writer = open_eval_writer(model_dir) if own_writer else writer

  def write_events(scalars: Dict[str, float]) -> None:
    with writer.as_default():
      for name, value in scalars.items():
        loop.write_scalar(name, value, step)
    writer.flush()

  summary = pretraining_results.record_eval_results(
      model_dir, step, checkpoint, results, write_events
  )
  if own_writer:
    writer.close()
  return summary
