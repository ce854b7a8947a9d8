r"""Writes the per-token vectors of chosen encoder blocks for a file of texts.

  python -m recurrent_bert.extract_features --input_file=texts.txt \
      --init_checkpoint=models/bert_base --output_file=features.jsonl \
      [--layers=-1,-2,-3,-4] [--output_format=jsonl|npz|tfrecord] [--max_seq_length=128]

The features of BERT's feature-based approach (§5.3): a fixed encoder's block outputs,
for a model of your own to read. --input_file is UTF-8, one input per line; a line
"text ||| text_b" is a sentence pair ([CLS] text [SEP] text_b [SEP]). --layers are block
indices, -1 the last (as in google-research/bert's extract_features.py). --init_checkpoint
is any model dir the package writes (pretraining, fine-tuning or converted model dir, an
encoder/ export, a checkpoint prefix); its vocabulary and casing come with it.

Output schemas (jsonl: the word pieces and their rounded vectors per line; npz and
tfrecord: arrays [N, T, layers, H] with the ids and masks): see
recurrent_bert/tasks/feature_extraction.py. The output is written to a temp file and
renamed when complete. Runs on any --distribution_strategy; rows stay in input order.
An empty or non-UTF-8 input file, or a block index the model does not have, stops the
command with one line naming it (exit status 2).
"""

from absl import flags
from absl import logging

from recurrent_bert import cli
from recurrent_bert.flags import execution as run_flags
from recurrent_bert.flags import vocabulary

FLAGS = flags.FLAGS
OUTPUT_FORMATS = ("jsonl", "npz", "tfrecord")  # tasks/feature_extraction.py's
PATH_FLAGS = ("input_file", "init_checkpoint", "output_file", "vocab_file")

flags.DEFINE_string(
    "input_file", None, "UTF-8 text, one input per line; 'text ||| text_b' for a pair."
)
flags.DEFINE_string(
    "init_checkpoint",
    None,
    "The encoder: a pretraining, fine-tuning or converted model dir, an encoder/ export, "
    "or a checkpoint prefix.",
)
flags.DEFINE_string("output_file", None, "Where the features go (replaced atomically).")
flags.DEFINE_enum(
    "output_format",
    "jsonl",
    list(OUTPUT_FORMATS),
    "jsonl: pieces and rounded vectors per line; npz / tfrecord: float32 arrays (schemas: "
    "recurrent_bert/tasks/feature_extraction.py).",
)
flags.DEFINE_list(
    "layers",
    ["-1", "-2", "-3", "-4"],
    "Encoder blocks to output, in this order: -1 = the last, 0 = the first.",
)
flags.DEFINE_integer("max_seq_length", 128, "Tokens per packed input; longer text is cut.")
flags.DEFINE_integer("batch_size", 32, "Inputs per step over all replicas.")
flags.DEFINE_integer("num_shards", 1, "tfrecord: files the output is split into.")
flags.DEFINE_integer("log_steps", 100, "Progress line every N batches.")
vocabulary.define_flags(
    vocab_file_note="default: the one recorded with --init_checkpoint",
    do_lower_case=None,
    do_lower_case_note="default: as recorded with --init_checkpoint, else true",
)
run_flags.define_flags()
flags.mark_flags_as_required(["input_file", "init_checkpoint", "output_file"])
for _name in ("input_file", "init_checkpoint"):  # --output_file: check_output_path
  flags.register_validator(
      _name, lambda v: v is None or bool(v.strip()), f"--{_name} is empty; give a path"
  )
run_flags.register_range("batch_size", 1, run_flags.INT32_MAX)
run_flags.register_range("max_seq_length", 3, run_flags.INT32_MAX, why=" ([CLS] text [SEP])")
run_flags.register_range("num_shards", 1, 100000)
run_flags.register_range("log_steps", 1, run_flags.INT32_MAX)


def _layers_ok(values) -> bool:
  try:
    layers = [int(v) for v in values]
  except ValueError:
    return False
  return bool(layers) and len(set(layers)) == len(layers)


flags.register_validator(
    "layers",
    _layers_ok,
    "--layers must be distinct integers (block indices, -1 = the last), e.g. -1,-2,-3,-4",
)
flags.register_multi_flags_validator(
    ["num_shards", "output_format"],
    lambda f: f["num_shards"] == 1 or f["output_format"] == "tfrecord",
    "--num_shards is for --output_format=tfrecord",
)


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  strategy, is_chief, _ = run_flags.make_strategy()
  run_flags.apply_run_dir(PATH_FLAGS)
  run_flags.check_output_path("output_file", folder=False)
  # TensorFlow and Keras load here, after the flags are checked.
  import keras

  from recurrent_bert import saving
  from recurrent_bert.data import tokenization
  from recurrent_bert.data import vocab as vocab_lib
  from recurrent_bert.tasks import feature_extraction

  keras.config.set_dtype_policy(FLAGS.mixed_precision)
  try:
    examples = feature_extraction.read_inputs(FLAGS.input_file)  # bad input fails first
    source = saving.open_model(FLAGS.init_checkpoint)
    vocab_file = FLAGS.vocab_file or source.vocab_file
    if vocab_file is None:
      cli.fail(
          f"--init_checkpoint={FLAGS.init_checkpoint} records no vocabulary; pass --vocab_file"
      )
    do_lower_case = vocabulary.resolve_casing(
        vocab_lib.read_vocabulary(vocab_file), vocab_file, FLAGS.do_lower_case, source.do_lower_case
    )
    tokenizer = tokenization.make_tokenizer(vocab_file, do_lower_case=do_lower_case)
    with strategy.scope():
      encoder = source.load_encoder()
    if tokenizer.vocab_size > encoder.config.vocab_size:
      cli.fail(
          f"vocab file {vocab_file} has {tokenizer.vocab_size} tokens, the model only "
          f"{encoder.config.vocab_size} embeddings"
      )
    rows, files = feature_extraction.extract_features(
        strategy,
        encoder,
        tokenizer,
        examples,
        FLAGS.output_file,
        FLAGS.output_format,
        [int(v) for v in FLAGS.layers],
        FLAGS.max_seq_length,
        FLAGS.batch_size,
        num_shards=FLAGS.num_shards,
        jit_compile=FLAGS.jit_compile,
        log_steps=FLAGS.log_steps,
        is_chief=is_chief,
    )
  except ValueError as e:
    logging.debug("bad input", exc_info=True)
    cli.fail(str(e).replace("\n", " "))
  if files:
    print(
        f"features of layers {','.join(FLAGS.layers)} for {rows} inputs written to "
        + ", ".join(files)
    )


if __name__ == "__main__":
  cli.run(
      main,
      {
          "input and output": (
              "run_dir",
              "input_file",
              "output_file",
              "output_format",
              "num_shards",
          ),
          "model": (
              "init_checkpoint",
              "vocab_file",
              "do_lower_case",
              "layers",
              "max_seq_length",
          ),
          "execution": run_flags.EXECUTION_HELP + ("batch_size", "log_steps"),
      },
  )
