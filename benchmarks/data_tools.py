r"""Throughput, memory and scaling of the pretraining-data generator, against Model Garden's.

Whole processes, start-up included, run side by side and round-robin (ours, then the Model
Garden tool, repeated), each row with the 1-minute load average at its start: on a shared
machine the ratio of neighbouring rows is the number to read. Settings are the issue's:
seq 128, 20 predictions, 15% masking, whole-word masking, lower-casing, dupe_factor 10;
ours with --num_workers=2. Peak memory is the summed RSS of the process and its children,
sampled every 50 ms, at two corpus sizes. Then the long-line check: one line of N words
against the same words as 20-word lines (time and instances).

The Model Garden tool (`official/nlp/data/create_pretraining_data.py`) runs when importable;
install it outside the project's environment:
  pip install --no-deps --target /tmp/mg tf-models-official==2.20.0 tf-keras==2.21.0 \
      sentencepiece six
  MODEL_GARDEN_PATH=/tmp/mg python benchmarks/data_tools.py --vocab_file=vocab.txt

  python benchmarks/data_tools.py --quick       # small corpus and lines, no repeats

Tokenizer throughput comes first: WordPiece, unigram and BPE vocabularies of the same size
learned from the same text (rbert-build-vocab), then that text tokenized in batches of
1024 lines by each in-graph tokenizer (a tf.function) and by the data tools' TF-free one
(Hugging Face `tokenizers` for WordPiece, the `sentencepiece` package otherwise; one
thread each), in MB of text per second, with the pieces per whitespace word:
  python benchmarks/data_tools.py --tokenizers_only [--tokenizer_text_bytes=2000000]
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from absl import app  # noqa: E402  (after sys.path: the repo's package wins)
from absl import flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_boolean("quick", False, "Small corpus and lines, one repeat.")
flags.DEFINE_string("work_dir", None, "Scratch directory (default: a temporary one).")
flags.DEFINE_string(
    "vocab_file", None, "vocab.txt; default: built from the built-in corpus (30522 tokens)."
)
flags.DEFINE_list(
    "corpus_bytes",
    ["3700000", "1850000"],
    "Corpus sizes (built-in corpus slices) for throughput and memory.",
)
flags.DEFINE_integer("repeats", 2, "Round-robin repeats per corpus size.")
flags.DEFINE_integer("dupe_factor", 10, "Passes over the input.")
flags.DEFINE_list(
    "long_line_words",
    ["100000", "200000", "400000", "800000"],
    "Words of the single long line of the scaling check.",
)
flags.DEFINE_boolean("tokenizers_only", False, "Only the tokenizer throughput table.")
flags.DEFINE_integer("tokenizer_text_bytes", 2_000_000, "Text for the tokenizer table.")
flags.DEFINE_integer("tokenizer_vocab_size", 8000, "Vocabulary size of the three tokenizers.")
flags.DEFINE_integer("tokenizer_repeats", 3, "Passes per tokenizer (the best is shown).")
flags.DEFINE_string(
    "model_garden_path",
    os.environ.get("MODEL_GARDEN_PATH", ""),
    "Where tf-models-official is installed (PYTHONPATH for it).",
)

SETTINGS = [
    "--max_seq_length=128",
    "--max_predictions_per_seq=20",
    "--masked_lm_prob=0.15",
    "--do_lower_case=true",
    "--do_whole_word_mask=true",
    "--random_seed=12345",
]


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


def run_measured(command, env):
  """Runs a command; returns (wall seconds, peak summed RSS MB of its tree, output)."""
  import psutil

  start = time.time()
  with tempfile.TemporaryFile("w+") as log:
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, text=True
    )
    peak = 0
    parent = psutil.Process(process.pid)
    while process.poll() is None:
      try:
        tree = [parent] + parent.children(recursive=True)
        peak = max(peak, sum(p.memory_info().rss for p in tree))
      except psutil.Error:
        pass
      time.sleep(0.05)
    seconds = time.time() - start
    log.seek(0)
    output = log.read()
  if process.returncode != 0:
    raise RuntimeError(f"{command[:4]} failed:\n{output[-3000:]}")
  return seconds, peak / 2**20, output


def ours(corpus, vocab, out_dir, workers, dupe, extra=()):
  env = dict(os.environ, PYTHONPATH=REPO)
  seconds, peak, _ = run_measured(
      [
          sys.executable,
          "-m",
          "recurrent_bert.tools.create_pretraining_data",
          f"--input_files={corpus}",
          f"--vocab_file={vocab}",
          f"--output_dir={out_dir}",
          f"--dupe_factor={dupe}",
          f"--num_workers={workers}",
          "--noprogress",
          *SETTINGS,
          *extra,
      ],
      env,
  )
  with open(os.path.join(out_dir, "stats.json"), encoding="utf-8") as f:
    stats = json.load(f)
  return seconds, peak, stats["instances"], stats


def model_garden(corpus, vocab, out_file, dupe):
  env = dict(os.environ, PYTHONPATH=FLAGS.model_garden_path)
  seconds, peak, output = run_measured(
      [
          sys.executable,
          "-m",
          "official.nlp.data.create_pretraining_data",
          f"--input_file={corpus}",
          f"--output_file={out_file}",
          f"--vocab_file={vocab}",
          f"--dupe_factor={dupe}",
          *SETTINGS,
      ],
      env,
  )
  found = re.findall(r"Wrote (\d+) total instances", output)
  return seconds, peak, int(found[-1]) if found else -1


def load():
  return f"{os.getloadavg()[0]:.1f}"


def build_tokenizer_files(work, corpus, vocab_size):
  """{kind: vocabulary file} of WordPiece, unigram and BPE learned from `corpus`."""
  files = {}
  for kind in ("wordpiece", "unigram", "bpe"):
    output = os.path.join(work, f"tok_{kind}_{vocab_size}")
    files[kind] = output + (".txt" if kind == "wordpiece" else ".model")
    if os.path.exists(files[kind]):
      continue
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "recurrent_bert.tools.build_vocab",
            f"--input_files={corpus}",
            f"--tokenizer={kind}",
            f"--vocab_size={vocab_size}",
            f"--output_file={files[kind]}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
      raise RuntimeError(f"build_vocab --tokenizer={kind} failed: {result.stderr[-2000:]}")
  return files


def best_seconds(run, repeats):
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    run()
    best = min(best, time.perf_counter() - start)
  return best


def tokenizer_throughput(work, full, text_bytes, vocab_size, repeats):
  """Prints MB/s of the in-graph and TF-free tokenizers of each kind on the same text."""
  os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread, as in the tool's workers
  import tensorflow as tf

  from recurrent_bert.data import native_tokenizer
  from recurrent_bert.data import tokenization

  corpus = slice_corpus(full, os.path.join(work, f"tokenizer_text{text_bytes}.txt"), text_bytes)
  with open(corpus, encoding="utf-8") as f:
    lines = [line for line in f.read().splitlines() if line.strip()]
  megabytes = sum(len(line.encode("utf-8")) for line in lines) / 1e6
  words = sum(len(line.split()) for line in lines)
  batches = [lines[i : i + 1024] for i in range(0, len(lines), 1024)]
  files = build_tokenizer_files(work, corpus, vocab_size)
  print(
      f"\ntokenizer throughput: {megabytes:.2f} MB of text ({len(lines):,} lines), vocabularies "
      f"of {vocab_size} learned from it, batches of 1024 lines, best of {repeats}, "
      f"one thread (load {load()})"
  )
  print(f"{'tokenizer':<10} | {'in-graph MB/s':>13} | {'TF-free MB/s':>12} | pieces/word")
  for kind, path in files.items():
    tokenizer = tokenization.make_tokenizer(path, do_lower_case=True)
    encode = tf.function(
        tokenizer.tokenize_flat, input_signature=[tf.TensorSpec([None], tf.string)]
    )
    tensors = [tf.constant(batch) for batch in batches]
    encode(tensors[0])  # trace
    pieces = sum(int(encode(t).flat_values.shape[0]) for t in tensors)
    in_graph = best_seconds(lambda f=encode, ts=tensors: [f(t) for t in ts], repeats)
    native = native_tokenizer.make_native_tokenizer(path, do_lower_case=True)
    tf_free = best_seconds(lambda n=native: [n.tokenize(batch) for batch in batches], repeats)
    print(
        f"{kind:<10} | {megabytes / in_graph:13.2f} | {megabytes / tf_free:12.2f} | "
        f"{pieces / words:.2f}",
        flush=True,
    )


def main(argv):
  del argv
  from recurrent_bert.data import builtin_corpus

  work = FLAGS.work_dir or tempfile.mkdtemp(prefix="data_tools_bench_")
  os.makedirs(work, exist_ok=True)
  full = builtin_corpus.ensure_builtin_corpus()
  sizes = [int(b) for b in FLAGS.corpus_bytes]
  repeats, dupe = FLAGS.repeats, FLAGS.dupe_factor
  long_words = [int(w) for w in FLAGS.long_line_words]
  if FLAGS.quick:
    sizes, repeats, long_words = [400_000, 200_000], 1, [20_000, 40_000]
  tokenizer_throughput(
      work,
      full,
      200_000 if FLAGS.quick else FLAGS.tokenizer_text_bytes,
      2000 if FLAGS.quick else FLAGS.tokenizer_vocab_size,
      1 if FLAGS.quick else FLAGS.tokenizer_repeats,
  )
  if FLAGS.tokenizers_only:
    print(f"\n(work dir: {work})")
    return
  vocab = FLAGS.vocab_file
  if not vocab:
    vocab = os.path.join(work, "vocab.txt")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "recurrent_bert.tools.build_vocab",
            "--input_files=builtin",
            f"--builtin_max_bytes={max(sizes)}",
            "--vocab_size=30522",
            f"--output_file={vocab}",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
  have_mg = (
      bool(FLAGS.model_garden_path)
      and subprocess.run(
          [sys.executable, "-c", "import official.nlp.data.create_pretraining_data"],
          env=dict(os.environ, PYTHONPATH=FLAGS.model_garden_path),
          capture_output=True,
      ).returncode
      == 0
  )

  print(
      f"\nthroughput, whole process, dupe_factor {dupe}, seq 128, whole-word masking "
      f"(cores: {os.cpu_count()})"
  )
  print(
      f"{'corpus':>8} | {'tool':<22} | {'load':>5} | {'seconds':>7} | {'instances':>9} | "
      f"{'inst/s':>7} | {'peak MB':>7} | ratio"
  )
  last_stats = None
  for size in sizes:
    corpus = slice_corpus(full, os.path.join(work, f"corpus{size}.txt"), size)
    for repeat in range(repeats):
      row_load = load()
      seconds, peak, instances, last_stats = ours(
          corpus, vocab, os.path.join(work, f"ours{size}"), 2, dupe
      )
      ours_rate = instances / seconds
      print(
          f"{size / 1e6:>6.2f}MB | {'ours, 2 workers':<22} | {row_load:>5} | {seconds:7.1f} | "
          f"{instances:9,} | {ours_rate:7.0f} | {peak:7.0f} |",
          flush=True,
      )
      if not have_mg:
        if repeat == 0 and size == sizes[0]:
          print("  (Model Garden tool not importable: set --model_garden_path)")
        continue
      row_load = load()
      seconds, peak, instances = model_garden(
          corpus, vocab, os.path.join(work, f"mg{size}.tfrecord"), dupe
      )
      rate = instances / seconds
      print(
          f"{size / 1e6:>6.2f}MB | {'Model Garden 2.20.0':<22} | {row_load:>5} | "
          f"{seconds:7.1f} | {instances:9,} | {rate:7.0f} | {peak:7.0f} | "
          f"{ours_rate / rate:.1f}x",
          flush=True,
      )
  if last_stats:
    print("\nour stages (last run; worker stages summed over both workers), seconds:")
    for stage, seconds in sorted(last_stats["stage_seconds"].items(), key=lambda kv: -kv[1]):
      print(f"  {stage:<42} {seconds:7.2f}")
    print(
        f"  masked {last_stats['masked_fraction']:.2%}: "
        f"{last_stats['masked_as_mask_token']:.1%} [MASK], "
        f"{last_stats['masked_as_random_token']:.1%} random, {last_stats['masked_kept']:.1%} kept"
    )

  print(
      "\nlong line: one line of N words vs the same words as 20-word lines "
      "(ours, 1 worker, dupe_factor 1)"
  )
  print(f"{'words':>8} | {'layout':<14} | {'load':>5} | {'seconds':>7} | {'instances':>9}")
  with open(full, encoding="utf-8") as f:
    words = f.read().split()
  for count in long_words:
    chosen = (words * (count // len(words) + 1))[:count]
    one = os.path.join(work, f"line{count}.txt")
    with open(one, "w", encoding="utf-8") as f:
      f.write(" ".join(chosen) + "\n")
    short = os.path.join(work, f"lines{count}.txt")
    with open(short, "w", encoding="utf-8") as f:
      f.write("\n".join(" ".join(chosen[i : i + 20]) for i in range(0, count, 20)) + "\n")
    for layout, path in (("one line", one), ("20-word lines", short)):
      row_load = load()
      seconds, _, instances, _ = ours(path, vocab, os.path.join(work, f"long{count}"), 1, 1)
      print(
          f"{count:>8,} | {layout:<14} | {row_load:>5} | {seconds:7.1f} | {instances:9,}",
          flush=True,
      )
  print(f"\n(work dir: {work}, vocab: {vocab})")


if __name__ == "__main__":
  app.run(main)
