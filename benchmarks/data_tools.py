r"""Throughput and memory of the data tools on the built-in corpus.

Prints a table: tokenizer MB/s; generator instances/s and MB of text/s with 1 and 2
workers, and as a Beam pipeline on the DirectRunner with 2 worker processes (when the
`beam` extra is installed); peak RSS of the generator at two corpus sizes (it streams, so
it should be flat).

  python benchmarks/data_tools.py --quick       # < 2 minutes
  python benchmarks/data_tools.py               # full built-in corpus
"""

import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_boolean("quick", False, "Small corpus slices; finishes in under 2 minutes.")
flags.DEFINE_string("work_dir", None, "Scratch directory (default: a temporary one).")
flags.DEFINE_integer("max_seq_length", 128, "Generator sequence length.")

_RSS_CHILD = r"""
import os, resource, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from recurrent_bert.data import pretraining_data
from recurrent_bert.data.dynamic_masking import MaskingConfig
corpus, vocab, out, seq = sys.argv[1:5]
options = pretraining_data.GeneratorOptions(
    input_files=[corpus], output_files=[out], vocab_file=vocab, max_seq_length=int(seq),
    masking=MaskingConfig(max_predictions_per_seq=20), dupe_factor=1, show_progress=False)
stats = pretraining_data.create_pretraining_data(options)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, stats["instances"])
"""


def slice_corpus(source, target, num_bytes):
  """Whole documents of `source` up to num_bytes, repeated if the source is smaller."""
  with open(source, encoding="utf-8") as f:
    documents = [d for d in f.read().split("\n\n") if d.strip()]
  size = 0
  with open(target, "w", encoding="utf-8") as out:
    while size < num_bytes:
      for document in documents:
        text = document.strip("\n") + "\n\n"
        out.write(text)
        size += len(text.encode("utf-8"))
        if size >= num_bytes:
          break
  return target


def main(argv):
  del argv
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from recurrent_bert.data import builtin_corpus, pretraining_data, tokenization  # pylint: disable=g-import-not-at-top
  from recurrent_bert.data.dynamic_masking import MaskingConfig  # pylint: disable=g-import-not-at-top
  from tools import build_vocab  # pylint: disable=g-import-not-at-top

  work = FLAGS.work_dir or tempfile.mkdtemp(prefix="data_tools_bench_")
  os.makedirs(work, exist_ok=True)
  full = builtin_corpus.ensure_builtin_corpus()
  full_mb = os.path.getsize(full) / 1e6
  mb = 1_000_000
  gen_bytes = 2 * mb if FLAGS.quick else 8 * mb
  rss_sizes = (1 * mb, 4 * mb) if FLAGS.quick else (2 * mb, 16 * mb)
  corpus = slice_corpus(full, os.path.join(work, "gen.txt"), gen_bytes)

  vocab_file = os.path.join(work, "vocab.txt")
  start = time.time()
  counts = build_vocab.count_words([slice_corpus(full, os.path.join(work, "v.txt"), mb)], True)
  vocab = build_vocab.learn_vocab(counts, 8000)
  with open(vocab_file, "w", encoding="utf-8") as f:
    f.write("\n".join(vocab) + "\n")
  vocab_seconds = time.time() - start

  rows = [("built-in corpus (this environment)", f"{full_mb:.1f} MB")]
  rows.append(("build_vocab, 1 MB -> 8000 tokens", f"{vocab_seconds:.1f} s"))

  tokenizer = tokenization.BertWordpieceTokenizer(vocab_file, do_lower_case=True)
  tokenize = tf.function(tokenizer.tokenize_flat,
                         input_signature=[tf.TensorSpec([None], tf.string)])
  with open(corpus, encoding="utf-8") as f:
    lines = [line for line in f.read().splitlines() if line]
  text_mb = sum(len(line.encode("utf-8")) + 1 for line in lines) / 1e6
  tokenize(tf.constant(lines[:64]))  # trace
  start = time.time()
  num_pieces = 0
  for begin in range(0, len(lines), 2048):
    num_pieces += int(tokenize(tf.constant(lines[begin:begin + 2048])).flat_values.shape[0])
  seconds = time.time() - start
  rows.append(("tokenizer (in-graph, batches of 2048 lines)",
               f"{text_mb / seconds:.2f} MB/s, {num_pieces / seconds / 1e3:.0f}k pieces/s"))

  for workers in (1, 2):
    options = pretraining_data.GeneratorOptions(
        input_files=[corpus], vocab_file=vocab_file,
        output_files=[os.path.join(work, f"w{workers}-{i}.tfrecord") for i in range(2)],
        max_seq_length=FLAGS.max_seq_length, masking=MaskingConfig(max_predictions_per_seq=20),
        dupe_factor=1, num_workers=workers, show_progress=False)
    stats = pretraining_data.create_pretraining_data(options)
    rows.append((f"generator, {workers} worker(s), {gen_bytes / mb:.0f} MB, dupe 1",
                 f"{stats['instances_per_second']:.0f} instances/s, "
                 f"{stats['text_megabytes_per_second']:.2f} MB/s "
                 f"({stats['seconds']:.1f} s incl. start-up)"))

  try:
    from recurrent_bert.data import beam_pipeline  # pylint: disable=g-import-not-at-top
  except ImportError:
    rows.append(("Beam DirectRunner, 2 workers", "skipped: pip install '.[beam]'"))
  else:
    options = pretraining_data.GeneratorOptions(
        input_files=[corpus], vocab_file=vocab_file, output_files=[],
        max_seq_length=FLAGS.max_seq_length, masking=MaskingConfig(max_predictions_per_seq=20),
        dupe_factor=1, num_workers=2, show_progress=False)
    stats = beam_pipeline.create_pretraining_data_beam(
        options, os.path.join(work, "beam"), 2, "DirectRunner",
        ["--direct_running_mode=multi_processing"])
    rows.append((f"Beam DirectRunner, 2 worker processes, {gen_bytes / mb:.0f} MB, dupe 1",
                 f"{stats['instances_per_second']:.0f} instances/s, "
                 f"{stats['text_megabytes_per_second']:.2f} MB/s "
                 f"({stats['seconds']:.1f} s incl. start-up)"))

  for size in rss_sizes:
    sliced = slice_corpus(full, os.path.join(work, f"rss{size}.txt"), size)
    result = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, sliced, vocab_file,
         os.path.join(work, f"rss{size}.tfrecord"), str(FLAGS.max_seq_length)],
        capture_output=True, text=True, check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    peak_kb, instances = result.stdout.split()[-2:]
    rows.append((f"generator peak RSS, {size / mb:.0f} MB corpus",
                 f"{int(peak_kb) / 1024:.0f} MB ({int(instances):,} instances)"))

  width = max(len(name) for name, _ in rows)
  print(f"\n{'measurement'.ljust(width)} | result")
  print(f"{'-' * width}-|-{'-' * 50}")
  for name, value in rows:
    print(f"{name.ljust(width)} | {value}")
  print(f"\n(cores: {os.cpu_count()}, work dir: {work})")


if __name__ == "__main__":
  app.run(main)
