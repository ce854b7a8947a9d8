r"""Raw text -> masked-LM (+ NSP) pretraining TFRecords in google-research/bert's schema.

Input: one sentence per line, a blank line between documents. `--input_files=builtin` uses
the built-in corpus (docstrings of the installed Python, see recurrent_bert/data/
builtin_corpus.py). Output: --num_output_shards TFRecord files plus `stats.json`.

Examples:
  # BERT: MLM + NSP, 80/10/10.
  rbert-create-pretraining-data --input_files=builtin --vocab_file=vocab.txt \
      --output_dir=/tmp/pretrain_data --max_seq_length=128 --max_predictions_per_seq=20
  # TRANS-BLSTM: whole-word masking.          ... --do_whole_word_mask --max_seq_length=256
  # SwishRNN: MLM only, 100% [MASK].          ... --nouse_nsp --mask_token_prob=1.0 \
                                                  --random_token_prob=0.0 --max_seq_length=512
  # Unmasked records for read-time masking:   ... --dynamic_masking --dupe_factor=1
  # A SentencePiece model (rbert-build-vocab --tokenizer=unigram|bpe): --vocab_file=spm.model
  #   (whole-word masking groups pieces by the "▁" word-start marker; --do_lower_case is
  #   the model's own, fixed when it was built)
  # Apache Beam (pip install '.[beam]'), options for Beam after `--`:
  rbert-create-pretraining-data --runner=beam --input_files='corpus/*.txt' \
      --vocab_file=vocab.txt --output_dir=/tmp/pretrain_data --num_workers=2
  rbert-create-pretraining-data --runner=beam --beam_runner=DataflowRunner \
      --input_files='gs://b/corpus/*.txt' --vocab_file=gs://b/vocab.txt \
      --output_dir=gs://b/bert128 --num_output_shards=256 -- --project=p --region=r \
      --temp_location=gs://b/tmp
"""

import os
import sys

from absl import flags

from recurrent_bert import cli
from recurrent_bert.flags import corpus
from recurrent_bert.flags import execution
from recurrent_bert.flags import masking
from recurrent_bert.flags import vocabulary

FLAGS = flags.FLAGS
corpus.define_flags()
vocabulary.define_flags()
masking.define_flags(reads_records=False)
flags.DEFINE_string(
    "output_dir",
    None,
    "Directory for the shards (pretraining-SSSSS-of-NNNNN.tfrecord) and "
    "stats.json, replaced as a unit: built beside it, swapped in at the end; "
    "a folder holding other files is refused. Exclusive with --output_files.",
)
flags.DEFINE_list(
    "output_files",
    None,
    "Explicit shard paths (one shard each); stats.json goes next to the first.",
)
flags.DEFINE_integer("dupe_factor", 10, "Passes over the input, each with fresh masks.")
flags.DEFINE_float("short_seq_prob", 0.1, "Probability of a shorter target length.")
flags.DEFINE_integer("random_seed", 12345, "Seed; output is a function of it and the shards.")
flags.DEFINE_enum(
    "runner",
    "local",
    ["local", "beam"],
    "local: this process and --num_workers worker processes; beam: an Apache "
    "Beam pipeline (recurrent_bert/data/beam_pipeline.py), same records, on "
    "--beam_runner; Beam pipeline options go after `--`. Needs --output_dir.",
)
flags.DEFINE_string(
    "beam_runner",
    "DirectRunner",
    "With --runner=beam: DirectRunner (this machine, --num_workers "
    "processes), DataflowRunner, FlinkRunner, SparkRunner, PortableRunner.",
)
flags.DEFINE_integer("num_workers", 1, "Worker processes (e.g. the number of cores).")
flags.DEFINE_integer("num_output_shards", 1, "Number of TFRecord shards (with --output_dir).")
flags.DEFINE_integer(
    "chunk_bytes",
    1 << 20,
    "Text per unit of work; the random-next pool is one chunk. Part of "
    "the determinism key, like the seed.",
)
flags.DEFINE_boolean("progress", True, "Show a progress bar.")
flags.mark_flag_as_required("vocab_file")

# Upper bounds: far past any real run, short of a job that never ends.
execution.register_range("dupe_factor", 1, 10_000)
execution.register_range("num_workers", 1, 1024)
execution.register_range("num_output_shards", 1, 1_000_000)
execution.register_range("chunk_bytes", 1, execution.INT32_MAX)
execution.register_range("random_seed", 0, 2**32 - 1)
flags.register_validator(
    "beam_runner", lambda v: bool(v and v.strip()), "--beam_runner: give a Beam runner name"
)
flags.register_validator(
    "short_seq_prob", lambda v: 0.0 <= v <= 1.0, "--short_seq_prob must be in [0, 1]"
)
flags.register_multi_flags_validator(
    ["output_dir", "output_files"],
    lambda f: bool(f["output_dir"]) != bool(f["output_files"]),
    "give exactly one of --output_dir and --output_files",
)
flags.register_multi_flags_validator(
    ["runner", "output_dir"],
    lambda f: f["runner"] == "local" or bool(f["output_dir"]),
    "--runner=beam writes --output_dir (shards named by Beam), not --output_files",
)


def shard_paths(output_dir: str, num_shards: int):
  """The shard files of --output_dir, as the generator names them.

  Args:
    output_dir: the output folder.
    num_shards: how many shards.

  Returns:
    Their paths.
  """
  from recurrent_bert.data import pretraining_output

  return [os.path.join(output_dir, n) for n in pretraining_output.shard_names(num_shards)]


def options_from_flags():
  """The generator's options from the flags, checking the files before any work.

  Returns:
    A `data.pretraining_options.GeneratorOptions`.

  Raises:
    ValueError: bad input (InputError: a file), named.
  """
  from recurrent_bert.data import vocab
  from recurrent_bert.data.pretraining_options import GeneratorOptions

  beam = FLAGS.runner == "beam"
  if not beam:  # the Beam pipeline checks the vocabulary itself, gs:// paths included
    vocab.read_vocabulary(FLAGS.vocab_file)
  execution.check_output_path("output_dir")
  execution.check_output_path("output_files", folder=False)
  if FLAGS.output_dir:  # built beside it and swapped in at the end, by both runners
    outputs = shard_paths(FLAGS.output_dir, FLAGS.num_output_shards)
  else:
    outputs = list(FLAGS.output_files)
    for path in outputs:
      os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  stats_file = os.path.join(os.path.dirname(os.path.abspath(outputs[0])), "stats.json")
  options = GeneratorOptions(
      input_files=corpus.input_files(),
      output_files=outputs,
      vocab_file=FLAGS.vocab_file,
      do_lower_case=FLAGS.do_lower_case,
      max_seq_length=FLAGS.max_seq_length,
      masking=masking.masking_config(),
      dupe_factor=FLAGS.dupe_factor,
      short_seq_prob=FLAGS.short_seq_prob,
      random_seed=FLAGS.random_seed,
      use_nsp=FLAGS.use_nsp,
      dynamic_masking=FLAGS.dynamic_masking,
      num_workers=FLAGS.num_workers,
      chunk_bytes=FLAGS.chunk_bytes,
      stats_file=stats_file,
      show_progress=FLAGS.progress,
      output_dir=FLAGS.output_dir or None,
  )
  options.validate()
  return options


def main(argv):
  pipeline_args = argv[1:]  # after `--`: Beam pipeline options
  from recurrent_bert.data import pretraining_data
  from recurrent_bert.data import pretraining_stats

  if FLAGS.runner == "beam":
    run_beam(pipeline_args)
    return
  if pipeline_args:
    cli.fail(
        f"unexpected arguments {' '.join(pipeline_args)}: only --runner=beam "
        "takes extra arguments (Beam pipeline options, after `--`)"
    )
  options = cli.run_checked(options_from_flags)
  stats = cli.run_checked(pretraining_data.create_pretraining_data, options)
  print(pretraining_stats.format_stats(stats), file=sys.stderr)
  print(f"wrote {len(options.output_files)} shard(s) and {options.stats_file}", file=sys.stderr)


def run_beam(pipeline_args):
  """--runner=beam: the same generator as a Beam pipeline on --beam_runner."""
  from recurrent_bert.data import pretraining_stats

  try:  # Beam is an extra: say how to get it before any work
    from recurrent_bert.data import beam_pipeline
  except ImportError as e:
    cli.fail(str(e))

  options = cli.run_checked(options_from_flags)
  stats = cli.run_checked(
      beam_pipeline.create_pretraining_data_beam,
      options,
      FLAGS.output_dir,
      FLAGS.num_output_shards,
      FLAGS.beam_runner,
      pipeline_args,
  )
  print(pretraining_stats.format_stats(stats), file=sys.stderr)
  print(
      f"wrote {FLAGS.num_output_shards} shard(s) and stats.json to {FLAGS.output_dir} "
      f"({stats['runner']})",
      file=sys.stderr,
  )


if __name__ == "__main__":
  cli.run(main)
