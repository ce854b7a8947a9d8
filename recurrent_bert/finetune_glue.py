r"""Fine-tunes and evaluates a classifier/regressor: GLUE, SuperGLUE BoolQ/MultiRC, or yours.

  python -m recurrent_bert.finetune_glue --flagfile=configs/finetune/glue_bert.flags \
      --task=mrpc --data_dir=glue_data/MRPC --init_checkpoint=/ckpt/bert_base \
      --model_dir=/ckpt/bert_base_mrpc

Data: the official task folder (--data_dir: GLUE TSVs, SuperGLUE JSONL), TFDS
(--tfds; prepared data only unless --tfds_download), or --task=custom with TSV files of
your own (recurrent_bert/data/custom_task.py). Modes, outputs and the model_dir layout:
recurrent_bert/training/finetuning.py. Metrics carry the official names (SPEC §9) in
eval_results.json; test-split predictions are written as leaderboard submission files.
Re-running the same command resumes training from the latest checkpoint.
"""

import dataclasses
import os
from typing import Dict, List

from absl import flags

import numpy as np

from recurrent_bert import cli
from recurrent_bert.tasks import metrics
from recurrent_bert import model_dir as layout
from recurrent_bert.tasks import custom_task
from recurrent_bert.tasks import glue
from recurrent_bert.tasks import predictions
from recurrent_bert.tasks import superglue
from recurrent_bert.tasks import task_features
from recurrent_bert.tasks import tfds_tasks
from recurrent_bert.io_utils import InputError
from recurrent_bert.data.tokenization import BertWordpieceTokenizer
from recurrent_bert.flags import finetuning as finetune_flags
from recurrent_bert.training import finetuning
from recurrent_bert.training import objectives
from recurrent_bert.flags import execution as run_flags

FLAGS = flags.FLAGS
finetune_flags.define_flags(learning_rate=2e-5, train_batch_size=32, max_seq_length=128,
                            num_train_epochs=3.0)
flags.DEFINE_string("task", None, "GLUE task (cola, sst2, mrpc, stsb, qqp, mnli, qnli, "
                    "rte, wnli), boolq, multirc, or custom.")
flags.DEFINE_string("data_dir", None, "The task's folder (e.g. glue_data/MRPC, "
                    "superglue/BoolQ, or a custom task's TSV folder).")
flags.DEFINE_boolean("tfds", False, "Read the task from tensorflow-datasets instead.")
flags.DEFINE_string("tfds_data_dir", None, "TFDS data dir (default: TFDS's).")
flags.DEFINE_boolean("tfds_download", False, "Let TFDS download missing data (network).")
flags.DEFINE_list("label_list", None, "custom task: label names (default: sorted train "
                  "labels).")
flags.DEFINE_list("predict_splits", None, "Splits written as prediction files (default: "
                  "the task's test splits that exist).")
flags.mark_flags_as_required(["task"])
flags.register_multi_flags_validator(
    ["tfds", "data_dir"], lambda f: f["tfds"] or f["data_dir"],
    "give --data_dir (the task folder) or --tfds")


class PairTask(finetuning.FinetuneTask):
  """A sentence(-pair) classification or regression task."""

  def __init__(self, spec, read_split, tokenizer, max_seq_length: int, cache_dir: str,
               vocab_fingerprint: str, do_lower_case: bool, predict_splits: List[str]):
    super().__init__(cache_dir, [vocab_fingerprint, do_lower_case, max_seq_length,
                                 spec.label_list])
    self.spec = spec
    self._read_split = read_split
    self._tokenizer = tokenizer
    self._max_seq_length = max_seq_length
    kind = "regressor" if spec.is_regression else "classifier"
    self.info = finetuning.TaskInfo(task=spec.name, kind=kind,
                                    label_names=tuple(spec.label_list or ()),
                                    do_lower_case=do_lower_case,
                                    max_seq_length=max_seq_length,
                                    main_metric=spec.main_metric)
    self.objective = (objectives.RegressionObjective() if spec.is_regression
                      else objectives.ClassificationObjective())
    self.output_keys = ("logits",)
    self.eval_splits = tuple(spec.eval_splits)
    self.predict_splits = tuple(predict_splits)

  def read_split(self, split: str):
    return self._read_split(split)

  def convert(self, examples):
    return task_features.convert_pair_examples(examples, self._tokenizer,
                                               self._max_seq_length, self.spec.label_list)

  def _predictions(self, logits):
    return logits[:, 0] if self.spec.is_regression else logits.argmax(axis=-1)

  def evaluate(self, split: str, outputs) -> Dict[str, float]:
    examples = self.examples(split)
    labels = task_features.label_ids(examples, self.spec.label_list)
    groups = [e.group for e in examples] if "exact_match" in self.spec.metric_names else None
    results = metrics.task_metrics(self.spec.metric_names,
                                   self._predictions(outputs["logits"]), labels, groups)
    results["num_examples"] = len(examples)
    return results

  def write_predictions(self, split: str, outputs, output_dir: str) -> List[str]:
    examples = self.examples(split)
    predicted = self._predictions(outputs["logits"])
    if self.spec.benchmark == custom_task.TASK_NAME:
      logits = outputs["logits"]
      probabilities = np.exp(logits - logits.max(-1, keepdims=True))
      probabilities /= probabilities.sum(-1, keepdims=True)
      return [custom_task.write_predictions(output_dir, split, examples,
                                            self.spec.label_list, predicted, probabilities)]
    if self.spec.benchmark == "superglue":
      return [predictions.write_superglue_submission(output_dir, self.spec.name, examples,
                                                     predicted)]
    return [predictions.write_glue_submission(output_dir, self.spec.name, split, examples,
                                              predicted)]


def _task_and_reader(parts):
  """(TaskSpec, split -> SplitData, default predict splits) from the flags."""
  if glue.canonical_task_name(FLAGS.task) == custom_task.TASK_NAME:
    if FLAGS.tfds:
      cli.fail("--task=custom reads --data_dir, not --tfds")
    labels = FLAGS.label_list
    if layout.is_finetuning_dir(FLAGS.model_dir):
      recorded = list(layout.TaskInfo.read(FLAGS.model_dir).label_names)
      if labels and labels != recorded:
        cli.fail(f"--label_list={','.join(labels)} differs from the labels "
                 f"{','.join(recorded)} the model in --model_dir was trained with")
      labels = recorded
    spec = custom_task.task_spec(labels or custom_task.infer_label_list(FLAGS.data_dir))
    test_exists = layout.exists(os.path.join(FLAGS.data_dir, "test.tsv"))
    return (spec, lambda split: custom_task.read_custom(FLAGS.data_dir, split,
                                                        spec.label_list),
            ["test"] if test_exists else [])
  spec = glue.get_task(FLAGS.task)
  if FLAGS.tfds:
    def read(split):
      return tfds_tasks.load_tfds_task(spec.name, split, FLAGS.tfds_data_dir,
                                       FLAGS.tfds_download)
    return spec, read, list(spec.leaderboard_files)
  if spec.benchmark == "superglue":
    def read(split):
      return superglue.read_superglue(FLAGS.data_dir, spec.name, split)
  else:
    def read(split):
      return glue.read_glue(FLAGS.data_dir, spec.name, split)
  present = [s for s in spec.leaderboard_files
             if layout.exists(os.path.join(FLAGS.data_dir, spec.files[s]))]
  return spec, read, present


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  strategy, is_chief, worker_id = run_flags.make_strategy()
  parts = finetune_flags.resolve_run(worker_id, path_flags=("data_dir", "tfds_data_dir"))
  try:
    spec, read_split, default_predict = _task_and_reader(parts)
    tokenizer = BertWordpieceTokenizer(parts.vocab_file, do_lower_case=parts.do_lower_case)
    task = PairTask(spec, read_split, tokenizer, FLAGS.max_seq_length, parts.cache_dir,
                    task_features.file_fingerprint(parts.vocab_file), parts.do_lower_case,
                    FLAGS.predict_splits if FLAGS.predict_splits is not None
                    else default_predict)
    # Read and convert every split the mode needs before the model is built, so bad
    # data fails first.
    needed = {"train": ["train", *task.eval_splits], "eval": list(task.eval_splits),
              "predict": list(task.predict_splits),
              "train_and_eval": ["train", *task.eval_splits, *task.predict_splits]}
    for split in needed[FLAGS.mode]:
      task.feature_cache(split)
    task.info = dataclasses.replace(task.info, text_pair=any(
        e.text_b is not None for split in needed[FLAGS.mode] for e in task.examples(split)))
  except (InputError, ValueError) as e:
    cli.fail(str(e))
  results = finetune_flags.run_task(strategy, task, parts, is_chief, worker_id)
  if results:
    print(f"eval results ({FLAGS.model_dir}/{finetuning.EVAL_RESULTS_FILE}):")
    for split in task.eval_splits:
      print(f"  {split}: " + ", ".join(f"{k}={v:.4f}" for k, v in results[split].items()))


if __name__ == "__main__":
  cli.run(main, finetune_flags.help_groups(("task", "data_dir", "label_list", "predict_splits", "tfds", "tfds_data_dir", "tfds_download")))
