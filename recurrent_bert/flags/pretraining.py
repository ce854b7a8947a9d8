"""The flags of recurrent_bert.pretrain, and the checked model and data settings they give.

`define_flags()` defines pretraining's own flags (model, input records, output) and the
shared groups it uses: the records' layout and masking (flags/masking.py), the
vocabulary, optimisation and execution. `model_config()` and `data_config()` turn the
parsed flags into the ModelConfig and PretrainingDataConfig, refusing bad input with
one line (`cli.fail`) before any model is built.
"""

import os

from absl import flags

from recurrent_bert import cli
from recurrent_bert import model_dir as layout
from recurrent_bert.errors import InputError
from recurrent_bert.flags import execution
from recurrent_bert.flags import masking
from recurrent_bert.flags import optimization
from recurrent_bert.flags import vocabulary

FLAGS = flags.FLAGS

HELP_GROUPS = {
    "data": (
        "run_dir",
        "input_files",
        "vocab_file",
        "do_lower_case",
        "max_seq_length",
        "max_predictions_per_seq",
        "use_nsp",
        "dynamic_masking",
        "masked_lm_prob",
        "mask_token_prob",
        "random_token_prob",
        "do_whole_word_mask",
        "shuffle_buffer_size",
        "skip_bad_records",
    ),
    "model": ("model_config", "vocab_size", "init_checkpoint"),
    "optimisation": optimization.OPTIMIZATION_HELP + ("seed",),
    "execution": execution.EXECUTION_HELP + ("steps_per_loop",),
    "output": ("model_dir", "save_checkpoints_steps", "keep_checkpoint_max", "log_steps"),
    "evaluation": (
        "mode",
        "eval_input_files",
        "eval_batch_size",
        "eval_every_steps",
        "max_eval_steps",
    ),
}
# Taken relative to --run_dir.
PATH_FLAGS = ("vocab_file", "input_files", "model_dir", "init_checkpoint", "eval_input_files")
MODES = ("train", "eval", "train_and_eval")


def define_flags() -> None:
  """Every flag of recurrent_bert.pretrain, with its checks."""
  flags.DEFINE_string(
      "model_config",
      "bert_base",
      "Preset name (e.g. bert_base, swishrnn_tiny) or a ModelConfig JSON file.",
  )
  flags.DEFINE_integer(
      "vocab_size",
      None,
      "Overrides the config's vocab_size. Default: the size of --vocab_file "
      "when given, else the config's.",
  )
  vocabulary.define_flags(
      vocab_file_note="the data's, needed by --dynamic_masking, copied to the export",
      do_lower_case_note="recorded in the encoder export with --vocab_file so raw-text "
      "serving tokenizes as the data tool did",
  )
  flags.DEFINE_list("input_files", None, "TFRecord files or globs (comma-separated, gs:// ok).")
  masking.define_flags(reads_records=True)
  flags.DEFINE_integer("shuffle_buffer_size", 10000, "Examples in the shuffle buffer.")
  flags.DEFINE_bool(
      "skip_bad_records",
      False,
      "Skip damaged records (a failed checksum, a shard cut short) of --input_files and "
      "--eval_input_files, counting them in metrics.jsonl and at the end, instead of "
      "stopping; files are then read in Python. Records with wrong features or values "
      "still stop the run.",
  )
  flags.DEFINE_integer("train_batch_size", 256, "Global batch size (all replicas).")
  flags.DEFINE_integer("num_train_steps", 1000000, "Total training steps.")
  optimization.define_flags(learning_rate=1e-4, warmup_steps=10000)
  flags.DEFINE_integer("steps_per_loop", 100, "Steps per tf.function call (host round trip).")
  execution.define_flags()
  flags.DEFINE_integer("seed", 0, "Seeds the weights, the input order and dynamic masks.")
  flags.DEFINE_string("model_dir", None, "Checkpoints, summaries and the final export.")
  flags.DEFINE_string(
      "init_checkpoint",
      None,
      "Weights to start from (no optimizer/step): a phase 1 model_dir or "
      "checkpoint for phase 2, or an encoder export for a warm start.",
  )
  flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every this many steps.")
  flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept.")
  flags.DEFINE_integer("log_steps", 100, "Progress line and summaries every this many steps.")
  flags.DEFINE_enum(
      "mode",
      None,
      MODES,
      "train; eval (the latest checkpoint of --model_dir on "
      "--eval_input_files); train_and_eval. Default: train_and_eval with "
      "--eval_input_files, else train.",
  )
  flags.DEFINE_list(
      "eval_input_files",
      None,
      "Held-out TFRecord files or globs (records of other documents than "
      "--input_files'), each read once per evaluation.",
  )
  flags.DEFINE_integer(
      "eval_batch_size",
      None,
      "Global eval batch size. Default: --train_batch_size / --gradient_accumulation_steps.",
  )
  flags.DEFINE_integer(
      "eval_every_steps",
      0,
      "train_and_eval: evaluate after every this many steps (and after "
      "the last); 0 = after the last step only.",
  )
  flags.DEFINE_integer(
      "max_eval_steps", 0, "Stop each evaluation after this many batches; 0 = every record."
  )
  flags.mark_flag_as_required("model_dir")
  flags.register_multi_flags_validator(
      ["input_files", "mode"],
      lambda f: f["input_files"] or f["mode"] == "eval",
      "--input_files is required (unless --mode=eval)",
  )
  flags.register_multi_flags_validator(
      ["eval_input_files", "mode"],
      lambda f: f["eval_input_files"] or f["mode"] in (None, "train"),
      "--mode=eval and --mode=train_and_eval need --eval_input_files",
  )
  for name in ("eval_every_steps", "max_eval_steps"):
    flags.register_validator(name, lambda v: v is not None and v >= 0, f"--{name} must be >= 0")
  execution.register_size_validators(
      ("train_batch_size", "eval_batch_size"), optional_batches=("eval_batch_size",)
  )
  execution.register_range("vocab_size", 1, execution.INT32_MAX, optional=True)
  for name in (
      "num_train_steps",
      "steps_per_loop",
      "save_checkpoints_steps",
      "keep_checkpoint_max",
      "log_steps",
  ):
    flags.register_validator(name, lambda v: v is not None and v >= 1, f"--{name} must be >= 1")
  flags.register_multi_flags_validator(
      ["warmup_steps", "num_train_steps"],
      lambda f: f["warmup_steps"] < f["num_train_steps"],
      "--warmup_steps must be < --num_train_steps",
  )
  flags.register_multi_flags_validator(
      ["dynamic_masking", "vocab_file"],
      lambda f: not f["dynamic_masking"] or f["vocab_file"],
      "--dynamic_masking needs --vocab_file (for the [MASK]/[CLS]/[SEP] ids)",
  )


def model_config():
  """The ModelConfig of --model_config, sized by --vocab_size or --vocab_file, checked.

  Returns:
    A `config.ModelConfig`.
  """
  from recurrent_bert.config import ConfigError
  from recurrent_bert.config import resolve_config
  from recurrent_bert.data import vocab as vocab_lib

  recorded = os.path.join(FLAGS.model_dir, layout.MODEL_CONFIG_FILE)
  if mode() == "eval" and layout.exists(recorded):
    # The model the checkpoints hold, whatever --model_config says.
    try:
      return resolve_config(recorded)
    except ConfigError as e:
      cli.fail(str(e))  # a ConfigError names the file already
  try:
    config = resolve_config(FLAGS.model_config)
  except ConfigError as e:
    cli.fail(f"--model_config: {e}")
  vocab_size = FLAGS.vocab_size
  if FLAGS.vocab_file:
    if not layout.exists(FLAGS.vocab_file):
      cli.fail(
          f"--vocab_file: {FLAGS.vocab_file!r} does not exist; make it with: python -m "
          f"recurrent_bert.tools.build_vocab --input_files=<your text or builtin> --output_file="
          f"{FLAGS.vocab_file} (or see the data commands in the flagfile's header)"
      )
    # Read (and checked: reserved tokens, UTF-8, duplicates) before TensorFlow loads; a
    # malformed vocabulary is an InputError naming it, one line through cli.run.
    vocab_file_size = vocab_lib.read_vocabulary(FLAGS.vocab_file).vocab_size
    if vocab_size is None:
      vocab_size = vocab_file_size
    elif vocab_size < vocab_file_size:
      cli.fail(
          f"--vocab_size={vocab_size} is smaller than the {vocab_file_size} tokens of "
          f"--vocab_file={FLAGS.vocab_file}: their ids would be out of the embedding's "
          "range; leave --vocab_size unset to take the vocabulary's size"
      )
  if vocab_size is not None and vocab_size != config.vocab_size:
    config = config.replace(vocab_size=vocab_size)
  config.check_sequence_length(FLAGS.max_seq_length, "--max_seq_length")
  _check_resumed_config(config, recorded)
  return config


def _check_resumed_config(config, recorded: str) -> None:
  """A run resuming in --model_dir must build the model its checkpoints hold: one line
  naming the first field that differs, before model_config.json is rewritten."""
  from recurrent_bert.config import ConfigError
  from recurrent_bert.config import resolve_config

  has_checkpoint = layout.exists(os.path.join(FLAGS.model_dir, layout.CHECKPOINT_STATE_FILE)) or (
      layout.isdir(FLAGS.model_dir)
      and any(
          layout.PORTABLE_CHECKPOINT_NAME.match(name.rstrip("/"))
          for name in layout.listdir(FLAGS.model_dir)
      )
  )
  if not has_checkpoint or not layout.exists(recorded):
    return
  try:
    previous = resolve_config(recorded)
  except ConfigError as e:
    cli.fail(str(e))
  theirs, ours = previous.to_dict(), config.to_dict()
  changed = [k for k in ours if theirs.get(k) != ours[k]]
  if changed:
    k = changed[0]
    cli.fail(
        f"--model_dir={FLAGS.model_dir} holds checkpoints of another model ({recorded}: "
        f"{k}={theirs.get(k)!r}, the flags give {k}={ours[k]!r}); resume with the same "
        "--model_config and --vocab_file, or give a new --model_dir"
    )


def mode() -> str:
  """--mode, or its default: train_and_eval with --eval_input_files, else train."""
  if FLAGS.mode:
    return FLAGS.mode
  return "train_and_eval" if FLAGS.eval_input_files else "train"


def settings_from_flags():
  """The flags as `training.pretraining_runner.PretrainSettings` (same names; --mode's
  default resolved)."""
  import dataclasses

  from recurrent_bert.training.settings import PretrainSettings

  names = [f.name for f in dataclasses.fields(PretrainSettings) if f.name != "mode"]
  return PretrainSettings(mode=mode(), **{name: FLAGS[name].value for name in names})


def data_config(model_config, backend: str = "tensorflow"):
  """The input pipeline's settings, checked against the first record and the files.

  Args:
    model_config: the model's `ModelConfig`: record ids must fit its vocab_size and
      type_vocab_size.
    backend: Keras' backend. TensorFlow's pipeline masks in-graph (the config's
      `DynamicMasker`); under JAX the records are read and masked in numpy, and the
      `record_batches.BatchMasker` is returned beside the configs.

  Everything that can fail on the user's input fails here, before any model is built.

  Returns:
    (training, evaluation) `data.pretraining_records.PretrainingDataConfig`s: the first is
    None with --mode=eval, the second None with --mode=train; under JAX a third item, the
    BatchMasker (None without --dynamic_masking).
  """
  from recurrent_bert import io_utils
  from recurrent_bert.data import pretraining_records
  from recurrent_bert.data import tfrecord_frames
  from recurrent_bert.data import vocab as vocab_lib

  # One count for the training and held-out files: the run reports one number.
  skipped = tfrecord_frames.SkippedRecords() if FLAGS.skip_bad_records else None
  on_tensorflow = backend == "tensorflow"
  masker = None
  if FLAGS.dynamic_masking:
    vocabulary = vocab_lib.read_vocabulary(FLAGS.vocab_file)
    if on_tensorflow:
      from recurrent_bert.data import dynamic_masking

      masker = dynamic_masking.DynamicMasker(masking.masking_config(), vocabulary)
    else:
      from recurrent_bert.data import record_batches

      masker = record_batches.BatchMasker.from_vocabulary(masking.masking_config(), vocabulary)

  def build(flag_name="input_files"):
    try:
      files = io_utils.expand_input_patterns(FLAGS[flag_name].value, flag_name)
    except InputError as e:
      data_dir = os.path.dirname(FLAGS[flag_name].value[0]) or "."
      raise InputError(
          f"{e}; make the records with: python -m recurrent_bert.tools.create_pretraining_data "
          f"--input_files=<your text or builtin> --vocab_file=<vocab.txt> "
          f"--output_dir={data_dir} --max_seq_length={FLAGS.max_seq_length} (or see the "
          "data commands in the flagfile's header)"
      ) from None
    config = pretraining_records.PretrainingDataConfig(
        input_files=files,
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        seed=FLAGS.seed,
        shuffle_buffer_size=FLAGS.shuffle_buffer_size,
        masker=masker if on_tensorflow else None,
        vocab_size=model_config.vocab_size,
        type_vocab_size=model_config.type_vocab_size,
        skipped=skipped,
    )
    pretraining_records.check_record_layout(files[0], config, dynamic_masking=FLAGS.dynamic_masking)
    if FLAGS.vocab_file:
      pretraining_records.check_vocabulary(files, FLAGS.vocab_file)
    if flag_name == "input_files" and FLAGS.init_checkpoint:
      _check_init_checkpoint()
    return config

  train_config = cli.run_checked(build) if mode() != "eval" else None
  eval_config = cli.run_checked(lambda: build("eval_input_files")) if mode() != "train" else None
  if on_tensorflow:
    return train_config, eval_config
  return train_config, eval_config, masker


def _check_init_checkpoint() -> None:
  """--init_checkpoint names a model (InputError naming it if not); every backend opens
  every model dir."""
  from recurrent_bert import saving

  try:
    saving.open_model(FLAGS.init_checkpoint)
  except InputError as e:
    raise InputError(f"--init_checkpoint: {e}") from None
