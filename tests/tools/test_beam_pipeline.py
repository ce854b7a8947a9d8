"""The Beam pipeline on the real DirectRunner (2 worker processes) against the local tool.

The local generator is the independent reference: it groups documents into consecutive
chunks in one reader, the pipeline into hashed pools through a GroupByKey, so records
differ but every statistic must agree within sampling noise. The tolerances below are
2-3x (or more) the largest local-vs-Beam gap measured over seeds 1-4 on this corpus.
"""

import collections
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

pytest.importorskip("apache_beam", reason="needs the beam extra: pip install '.[beam]'")

from recurrent_bert.data import beam_pipeline
from recurrent_bert.data import pretraining_data
from recurrent_bert.data import pretraining_options
from recurrent_bert.data import schema
from recurrent_bert.data.dynamic_masking import MaskingConfig
from recurrent_bert.errors import InputError
from recurrent_bert.tools import create_pretraining_data

pytestmark = pytest.mark.slow(seconds=30)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEQ, PRED, SHARDS = 64, 20, 2
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def options(corpus, vocab, **overrides):
  settings = dict(
      input_files=[corpus],
      output_files=[],
      vocab_file=vocab,
      max_seq_length=SEQ,
      masking=MaskingConfig(max_predictions_per_seq=PRED),
      dupe_factor=2,
      chunk_bytes=30_000,
      show_progress=False,
  )
  settings.update(overrides)
  return pretraining_options.GeneratorOptions(**settings)


def run_beam(out_dir, corpus, vocab, pipeline_args=(), **overrides):
  stats = beam_pipeline.create_pretraining_data_beam(
      options(corpus, vocab, **overrides), str(out_dir), SHARDS, "DirectRunner", pipeline_args
  )
  return [os.path.join(out_dir, n) for n in beam_pipeline.shard_names(SHARDS)], stats


def records(paths):
  return collections.Counter(r for p in paths for r in tf.compat.v1.io.tf_record_iterator(p))


def parsed(paths):
  serialized = list(records(paths).elements())
  return {
      k: v.numpy()
      for k, v in schema.parse_pretraining_example(
          tf.constant(serialized), SEQ, PRED, int_dtype=tf.int64
      ).items()
  }


@pytest.fixture(scope="module")
def short_documents(tmp_path_factory, corpus_file):
  """The corpus cut into documents of <= 8 sentences (~440 documents instead of ~60), so
  the per-document draws (target length, NSP) average out and the statistics are tight."""
  with open(corpus_file, encoding="utf-8") as f:
    documents = [d.split("\n") for d in f.read().split("\n\n") if d.strip()]
  pieces = ["\n".join(d[i : i + 8]) for d in documents for i in range(0, len(d), 8)]
  path = tmp_path_factory.mktemp("beam_corpus") / "corpus.txt"
  path.write_text("\n\n".join(pieces) + "\n", encoding="utf-8")
  return str(path)


@pytest.fixture(scope="module")
def beam_run(tmp_path_factory, short_documents, vocab_file):
  out = tmp_path_factory.mktemp("beam") / "out"
  return run_beam(
      out,
      short_documents,
      vocab_file,
      num_workers=2,
      pipeline_args=["--direct_running_mode=multi_processing"],
  )


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, short_documents, vocab_file):
  out = tmp_path_factory.mktemp("local")
  local = options(
      short_documents, vocab_file, output_files=[str(out / f"shard-{i}") for i in range(SHARDS)]
  )
  return local.output_files, pretraining_data.create_pretraining_data(local)


def test_output_is_sharded_and_parses_against_the_schema(beam_run):
  paths, stats = beam_run
  out_dir = os.path.dirname(paths[0])
  tool_names = [os.path.basename(p) for p in create_pretraining_data.shard_paths(out_dir, 2)]
  assert sorted(os.listdir(out_dir)) == sorted(tool_names + ["stats.json"])
  assert not [n for n in os.listdir(os.path.dirname(out_dir)) if ".tmp-" in n]
  assert all(sum(records([p]).values()) > 0 for p in paths)
  features = parsed(paths)
  mask, ids = features["input_mask"], features["input_ids"]
  assert len(ids) == stats["instances"] > 2000
  assert stats["runner"] == "beam:DirectRunner" and stats["num_workers"] == 2
  assert (ids[:, 0] == 2).all()  # [CLS]
  size = mask.sum(axis=1)
  assert (mask == (np.arange(SEQ) < size[:, None])).all() and (ids[mask == 0] == 0).all()
  weights = features["masked_lm_weights"]
  assert ((weights == 1) | (weights == 0)).all()
  assert ((features["masked_lm_positions"] < size[:, None]) | (weights == 0)).all()
  assert set(np.unique(features["next_sentence_labels"])) == {0, 1}


def test_statistics_match_the_local_tool(beam_run, local_run):
  (beam_paths, beam), (local_paths, local) = beam_run, local_run
  # Every document read exactly once, whatever the grouping.
  for key in ("documents", "sentences", "input_tokens", "input_text_bytes"):
    assert beam[key] == local[key], key
  assert abs(beam["chunks"] - local["chunks"]) <= 1  # ~30 kB pools as ~30 kB chunks
  assert beam["instances"] / beam["documents"] == pytest.approx(
      local["instances"] / local["documents"], rel=0.04
  )
  assert abs(beam["random_next_fraction"] - local["random_next_fraction"]) < 0.03
  assert abs(beam["masked_fraction"] - local["masked_fraction"]) < 0.005
  for key in ("masked_as_mask_token", "masked_as_random_token", "masked_kept"):
    assert abs(beam[key] - local[key]) < 0.02, key
  assert abs(beam["truncation_rate"] - local["truncation_rate"]) < 0.05
  beam_lengths = parsed(beam_paths)["input_mask"].sum(axis=1)
  local_lengths = parsed(local_paths)["input_mask"].sum(axis=1)
  assert beam_lengths.mean() == pytest.approx(local_lengths.mean(), rel=0.02)
  histograms = [
      np.bincount(x // 8, minlength=SEQ // 8 + 1) / len(x) for x in (beam_lengths, local_lengths)
  ]
  assert 0.5 * np.abs(histograms[0] - histograms[1]).sum() < 0.06  # total variation
  # The stats report is the local tool's, plus the runner.
  assert set(beam) - set(local) == {"runner"} and not set(local) - set(beam)


def test_same_seed_same_records_through_the_tool(tmp_path, beam_run, short_documents, vocab_file):
  # Re-run through the command line, in one in-process worker: the set of records is a
  # function of the input and seed, not of workers or running mode.
  out = tmp_path / "again"
  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "recurrent_bert.tools.create_pretraining_data",
          "--runner=beam",
          f"--input_files={short_documents}",
          f"--vocab_file={vocab_file}",
          f"--output_dir={out}",
          f"--max_seq_length={SEQ}",
          f"--max_predictions_per_seq={PRED}",
          "--dupe_factor=2",
          "--chunk_bytes=30000",
          f"--num_output_shards={SHARDS}",
          "--",
          "--direct_running_mode=in_memory",
          "--direct_num_workers=1",
      ],
      cwd=REPO,
      env=ENV,
      capture_output=True,
      text=True,
      timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert "beam:DirectRunner" in result.stderr
  again = [str(out / n) for n in beam_pipeline.shard_names(SHARDS)]
  assert records(again) == records(beam_run[0])
  other_seed, _ = run_beam(tmp_path / "seed", short_documents, vocab_file, random_seed=7)
  assert records(other_seed) != records(beam_run[0])


def test_bad_input_is_named_and_nothing_is_written(tmp_path, corpus_file, vocab_file):
  out = tmp_path / "out"
  with pytest.raises(InputError, match="missing.txt"):
    run_beam(out, str(tmp_path / "missing.txt"), vocab_file)
  # A bad line only shows up inside the pipeline, on a worker: still named, file and line.
  bad = tmp_path / "latin1.txt"
  bad.write_bytes(b"fine line\nsecond line\ncaf\xe9 au lait\n")
  with pytest.raises(InputError, match=r"latin1\.txt:3: not valid UTF-8"):
    run_beam(out, str(bad), vocab_file)
  empty = tmp_path / "empty.txt"
  empty.write_text("\n\n   \n")
  with pytest.raises(InputError, match=r"no document.*empty\.txt"):  # known after the run
    run_beam(out, str(empty), vocab_file)
  (tmp_path / "busy").mkdir()
  (tmp_path / "busy" / "notes.txt").write_text("mine")
  with pytest.raises(InputError, match="notes.txt"):  # would be replaced whole
    run_beam(tmp_path / "busy", corpus_file, vocab_file)
  assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"
  assert sorted(os.listdir(tmp_path)) == ["busy", "empty.txt", "latin1.txt"]  # no output


def test_without_beam_the_tool_says_how_to_install_it(tmp_path, corpus_file, vocab_file):
  shadow = tmp_path / "apache_beam"
  shadow.mkdir()
  (shadow / "__init__.py").write_text("raise ImportError('No module named apache_beam')\n")
  env = dict(ENV, PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "recurrent_bert.tools.create_pretraining_data",
          "--runner=beam",
          f"--input_files={corpus_file}",
          f"--vocab_file={vocab_file}",
          f"--output_dir={tmp_path / 'out'}",
      ],
      cwd=REPO,
      env=env,
      capture_output=True,
      text=True,
      timeout=300,
  )
  assert result.returncode == 2
  assert "pip install -c constraints.txt -e '.[beam]'" in result.stderr
  assert not (tmp_path / "out").exists()
