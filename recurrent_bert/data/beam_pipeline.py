"""The pretraining-data generator as an Apache Beam pipeline (scale-out data preparation).

Same input, output and instances as `pretraining_data.create_pretraining_data` — it calls
the same code (`iter_documents`, `ChunkProcessor`: tokenizer, `InstanceBuilder`, masking,
`example_codec`) — but the work is spread by a Beam runner: the DirectRunner
on this machine, or Dataflow, Flink or Spark. Stages and the elements between them:

  input file paths                      str
  ─ read (per file) ─▶                   (pool, (digest, sentences))   pool = digest mod P
  ─ GroupByKey ─▶                        (pool, [(digest, sentences), ...])
  ─ build + mask (ChunkProcessor) ─▶     serialized tf.train.Example (SPEC §8)   ─▶ shards
                                   └─▶   counters dict per pool ─ sum ─▶ counters.json

Pools replace the local tool's chunks. NSP draws its "random next" segment from another
document of the same chunk; a chunk there is a run of consecutive documents, which needs
one reader of the whole input. Here a document goes to pool `hash(seed, text) mod P`, with
P = input bytes / chunk_bytes, so pools are shuffled samples of the corpus of the local
chunk's size, formed by a GroupByKey, with no global corpus held anywhere.

Determinism: a pool's documents are sorted by digest and it is seeded by (seed, pool index)
exactly as a local chunk is by (seed, chunk index), so the *set* of records is a function
of the input, the seed and chunk_bytes, not of the runner or its worker count. Which shard a
record lands in and the order within a shard are not: `WriteToTFRecord` deals records to
shards round-robin from a random start. Training shuffles across shards anyway.

Output: `pretraining-SSSSS-of-NNNNN.tfrecord` shards and `stats.json` (the local tool's
report, from counters summed in the pipeline). As with the local tool, --output_dir is
replaced as a unit (`pretraining_output.prepare_output_dir`, `io_utils.atomic_directory`):
the pipeline writes a temp dir beside it, swapped in after success; a folder holding files
the tool did not make is refused, and temp dirs of killed runs are removed on the next
start. Object stores (gs://) cannot rename directories: there the finished files are moved
in one by one after all are written (a reader can see a partial folder during the move).

Needs the `beam` extra: pip install -c constraints.txt -e '.[beam]'.
"""

import collections
import dataclasses
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

try:
  import apache_beam as beam
  from apache_beam.io.filesystem import CompressionTypes
  from apache_beam.io.filesystems import FileSystems
  from apache_beam.options.pipeline_options import PipelineOptions
except ImportError as e:  # the base install stays lean: Beam is an extra
  raise ImportError(
      f"the Beam runner needs Apache Beam ({e}): pip install -c constraints.txt -e '.[beam]'"
  ) from e

from recurrent_bert import io_utils
from recurrent_bert.data import pretraining_corpus
from recurrent_bert.data import pretraining_output
from recurrent_bert.data import pretraining_stats
from recurrent_bert.data import pretraining_workers
from recurrent_bert.data.pretraining_options import GeneratorOptions
from recurrent_bert.errors import InputError

SHARD_PREFIX = "pretraining"
SHARD_TEMPLATE = "-SSSSS-of-NNNNN"  # WriteToTFRecord's: pretraining_output.shard_names()
SHARD_SUFFIX = ".tfrecord"
_COUNTERS = "counters"  # the summed counters, read back by the driver, then deleted
_DIRECT_RUNNERS = ("direct", "directrunner")


def _is_remote(path: str) -> bool:
  return "://" in path


shard_names = pretraining_output.shard_names


# ------------------------------------------------------------------------------ stages


def read_lines(path: str) -> Iterator[Tuple[int, str]]:
  """(line number, line) of a local file or one on a Beam file system (gs://, hdfs://)."""
  if not _is_remote(path):
    yield from io_utils.read_lines_checked(path)  # the local tool's messages
    return
  with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
    # The same line ends (\n, \r\n, lone \r) and UTF-8 messages as the local tool's.
    yield from io_utils.decoded_lines(io_utils.split_universal_lines(f), path)


def document_digest(sentences: Sequence[str], seed: int) -> bytes:
  # Content, not file position: the same pools whatever the file names or their order.
  # hashlib, not hash(): Python salts str hashes per process.
  text = "\n".join([str(seed)] + list(sentences)).encode("utf-8")
  return hashlib.blake2b(text, digest_size=16).digest()


def keyed_documents(
    path: str, seed: int, num_pools: int
) -> Iterator[Tuple[int, Tuple[bytes, List[str]]]]:
  """Reads one file into (pool, (digest, sentences)) elements."""
  for document in pretraining_corpus.iter_documents([path], read_lines):
    digest = document_digest(document.sentences, seed)
    yield int.from_bytes(digest[:8], "big") % num_pools, (digest, document.sentences)


def _local_copy(path: str) -> str:
  """A local file with the content of `path` (remote vocabularies are staged on workers)."""
  if not _is_remote(path):
    return path
  fd, local = tempfile.mkstemp(suffix="-" + os.path.basename(path))
  with (
      os.fdopen(fd, "wb") as out,
      FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f,
  ):
    out.write(f.read())
  return local


class BuildPoolDoFn(beam.DoFn):
  """(pool, documents) -> serialized examples; counters go to the "stats" output."""

  def __init__(self, options: GeneratorOptions):
    self._options = options
    self._processor = None
    self._documents = beam.metrics.Metrics.counter("pretraining_data", "documents")
    self._instances = beam.metrics.Metrics.counter("pretraining_data", "instances")

  def setup(self):
    # One tokenizer and traced masking function per worker, as in the local tool.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    options = dataclasses.replace(self._options, vocab_file=_local_copy(self._options.vocab_file))
    self._processor = pretraining_workers.ChunkProcessor(options)

  def process(self, keyed_pool):
    pool_index, documents = keyed_pool
    # A GroupByKey's order is the runner's: sort so the pool (and its seed) fully decide.
    documents = [sentences for _, sentences in sorted(documents, key=lambda d: d[0])]
    data, offsets, stats = self._processor.process(pool_index, documents, frame=False)
    self._processor.stage_seconds.clear()  # the local tool's profile; Beam has its own
    stats = {k: v for k, v in stats.items() if not k.startswith("seconds ")}
    stats = dict(
        stats, chunks=1, text_bytes=sum(map(pretraining_corpus.document_text_size, documents))
    )
    self._documents.inc(stats["documents"])
    self._instances.inc(len(offsets) - 1)
    view = memoryview(data)
    bounds = offsets.tolist()
    for begin, end in zip(bounds[:-1], bounds[1:]):
      yield bytes(view[begin:end])
    yield beam.pvalue.TaggedOutput("stats", stats)


def sum_counters(counters) -> Dict[str, int]:
  total = collections.Counter()
  for c in counters:
    total.update(c)
  return dict(total)


def build_pipeline(
    pipeline: "beam.Pipeline", options: GeneratorOptions, output_dir: str, num_pools: int
) -> None:
  """Adds the stages (module docstring) to `pipeline`, writing into `output_dir`."""
  num_shards = len(options.output_files)
  outputs = (
      pipeline
      | "InputFiles" >> beam.Create(list(options.input_files))
      # Breaks fusion with Create, so files are read on many workers, not one.
      | "SpreadFiles" >> beam.Reshuffle()
      | "ReadDocuments" >> beam.FlatMap(keyed_documents, options.random_seed, num_pools)
      | "GroupIntoPools" >> beam.GroupByKey()
      | "BuildAndMask" >> beam.ParDo(BuildPoolDoFn(options)).with_outputs("stats", main="records")
  )
  _ = outputs.records | "WriteShards" >> beam.io.WriteToTFRecord(
      os.path.join(output_dir, SHARD_PREFIX),
      file_name_suffix=SHARD_SUFFIX,
      num_shards=num_shards,
      shard_name_template=SHARD_TEMPLATE,
  )
  _ = (
      outputs.stats
      | "SumCounters" >> beam.CombineGlobally(sum_counters)
      | "ToJson" >> beam.Map(json.dumps, sort_keys=True)
      | "WriteCounters"
      >> beam.io.WriteToText(
          os.path.join(output_dir, _COUNTERS),
          file_name_suffix=".json",
          shard_name_template="",
          num_shards=1,
      )
  )


# ----------------------------------------------------------------------------- driver


def _input_size(input_files: Sequence[str]) -> int:
  total = 0
  for path in input_files:
    found = FileSystems.match([path])[0].metadata_list
    if not found:
      raise InputError(f"input file {path!r} does not exist")
    total += sum(m.size_in_bytes for m in found)
  return total


def pipeline_options(
    beam_runner: str, pipeline_args: Sequence[str], num_workers: int
) -> Tuple[PipelineOptions, object]:
  """Beam options from pass-through args, and the runner (name or instance).

  "DirectRunner" here is Beam's FnApiRunner, the batch engine behind the Python
  DirectRunner: Beam 2.77's DirectRunner first tries Prism, a Go binary it downloads
  from GitHub, which ignores direct_num_workers (the Python work runs in the launching
  process). Unless the args say otherwise it runs
  `num_workers` worker processes (multi_processing: TensorFlow and the instance builder
  need real processes, not threads under the GIL).
  """
  args = list(pipeline_args)
  if beam_runner.lower() not in _DIRECT_RUNNERS:
    return PipelineOptions(args, runner=beam_runner), beam_runner
  from apache_beam.portability.api import beam_provision_api_pb2
  from apache_beam.runners.portability import portable_runner
  from apache_beam.runners.portability.fn_api_runner import fn_runner

  given = " ".join(args)
  if "--direct_num_workers" not in given:
    args.append(f"--direct_num_workers={num_workers}")
  if "--direct_running_mode" not in given:
    args.append("--direct_running_mode=" + ("multi_processing" if num_workers > 1 else "in_memory"))
  if "--default_sdk_harness_log_level" not in given:
    args.append("--default_sdk_harness_log_level=WARNING")  # workers log each bundle at INFO
  options = PipelineOptions(args)
  # As Beam's SwitchingDirectRunner builds it: workers see the pipeline options.
  encoded = portable_runner.JobServiceHandle.encode_pipeline_options(options.get_all_options())
  runner = fn_runner.FnApiRunner(
      provision_info=fn_runner.ExtendedProvisionInfo(
          beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
      )
  )
  return options, runner


def _read_text(path: str) -> str:
  with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
    return f.read().decode("utf-8")


def _write_json(path: str, obj) -> None:
  if not _is_remote(path):
    io_utils.atomic_write_json(path, obj)
    return
  with FileSystems.create(path) as f:
    f.write((json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def _input_error_in(error: BaseException) -> Optional[str]:
  # Runners re-raise a worker's exception as their own with its traceback as text; the
  # user's mistake (a bad file, named with its line) is the InputError line in it.
  found = re.findall(r"InputError: (.+)", str(error))
  return found[-1] if found else None


def create_pretraining_data_beam(
    options: GeneratorOptions,
    output_dir: str,
    num_output_shards: int,
    beam_runner: str = "DirectRunner",
    pipeline_args: Sequence[str] = (),
) -> Dict:
  """Runs the generator as a Beam pipeline; see the module docstring.

  Args:
    options: GeneratorOptions as for the local tool (input files already expanded);
      output_files and stats_file are set here from output_dir, and num_workers is the
      DirectRunner's worker count.
    output_dir: where the shards and stats.json go (local or a Beam file system).
    num_output_shards: number of TFRecord shards.
    beam_runner: "DirectRunner", "DataflowRunner", "FlinkRunner", "SparkRunner", ...
    pipeline_args: Beam pipeline options, e.g. ["--project=p", "--region=r"].

  Returns:
    The stats dict of `pretraining_data.create_pretraining_data`, plus "runner".

  Raises:
    InputError: a missing or unreadable input file (named), a bad vocabulary,
      an output directory holding other files, or an input without any document.
  """
  from recurrent_bert.data.vocab import read_vocabulary

  if num_output_shards < 1:
    raise ValueError(f"num_output_shards must be >= 1, got {num_output_shards}")
  options = dataclasses.replace(
      options,
      output_files=[os.path.join(output_dir, n) for n in shard_names(num_output_shards)],
      stats_file=os.path.join(output_dir, "stats.json"),
  )
  options.validate()
  # Every check before any work: inputs, vocabulary, output directory.
  total_bytes = _input_size(options.input_files)
  vocab = _local_copy(options.vocab_file)
  try:
    read_vocabulary(vocab)
  finally:
    if vocab != options.vocab_file:
      os.remove(vocab)
  for cleaned in pretraining_output.prepare_output_dir(output_dir):
    print(f"removed the leftover of a killed run: {cleaned}", file=sys.stderr)
  num_pools = max(1, round(total_bytes / options.chunk_bytes))
  beam_options, runner = pipeline_options(beam_runner, pipeline_args, options.num_workers)

  start = time.time()
  with io_utils.atomic_directory(output_dir) as work_dir:
    pipeline = beam.Pipeline(runner=runner, options=beam_options)
    build_pipeline(pipeline, options, work_dir, num_pools)
    try:
      pipeline.run().wait_until_finish()
    except Exception as e:
      message = _input_error_in(e)
      if message is None:
        raise
      raise InputError(message) from e
    counters_path = os.path.join(work_dir, _COUNTERS + ".json")
    counters = collections.Counter(json.loads(_read_text(counters_path)))
    FileSystems.delete([counters_path])
    if counters["documents"] - counters["documents_without_tokens"] == 0:
      raise InputError(
          "the input has no document with any text: "
          + ", ".join(options.input_files)
          + " (expected one sentence per line, a blank line between documents)"
      )
    text_bytes = counters.pop("text_bytes", 0)
    names = [os.path.basename(p) for p in options.output_files]
    sizes = [
        FileSystems.match([os.path.join(work_dir, name)])[0].metadata_list[0].size_in_bytes
        for name in names
    ]
    # Records per shard are Beam's choice (not known here): the readers check the bytes.
    shards = pretraining_output.shard_table(names, sizes, instances=None)
    stats = pretraining_stats.summarize(counters, options, time.time() - start, text_bytes, shards)
    stats["runner"] = f"beam:{beam_runner}"
    # Written last: on an object store its presence marks a finished run.
    _write_json(os.path.join(work_dir, "stats.json"), stats)
  return stats
