"""The command-line tools, run as users run them (subprocesses, flags)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from recurrent_bert.data import tokenization
from tests.support import forkserver

pytestmark = pytest.mark.slow(seconds=50)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_tool(module, *flags, check=True):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  result = forkserver.run([sys.executable, "-m", module, *flags], REPO, env, timeout=300)
  if check:
    assert result.returncode == 0, result.stderr[-3000:]
  return result


def test_build_vocab_cased_and_uncased(tmp_path, corpus_file):
  uncased, cased = tmp_path / "uncased.txt", tmp_path / "cased.txt"
  run_tool(
      "recurrent_bert.tools.build_vocab",
      f"--input_files={corpus_file}",
      "--vocab_size=1200",
      f"--output_file={uncased}",
      "--max_lines=3000",
  )
  run_tool(
      "recurrent_bert.tools.build_vocab",
      f"--input_files={corpus_file}",
      "--vocab_size=1200",
      f"--output_file={cased}",
      "--nodo_lower_case",
      "--max_lines=3000",
  )
  for path, lower in ((uncased, True), (cased, False)):
    tokens = tokenization.load_vocab(str(path))
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(tokens) == 1200
    assert any(t.startswith("##") for t in tokens)
    has_upper = any(any(c.isupper() for c in t) for t in tokens[5:] if not t.startswith("["))
    assert has_upper != lower
    # The learned vocabulary covers its own corpus with few unknowns.
    tokenizer = tokenization.BertWordpieceTokenizer(str(path), do_lower_case=lower)
    with open(corpus_file, encoding="utf-8") as f:
      lines = [line for line in f.read().splitlines() if line][:500]
    ids = tokenizer.tokenize_flat(lines).flat_values.numpy()
    assert (ids == tokenizer.unk_id).mean() < 0.02


def test_tokenize_text_writes_one_json_list_per_line(tmp_path, vocab_file):
  text = tmp_path / "in.txt"
  lines = ["Hello, world!", "", "Return the value of the attribute."]
  text.write_text("\n".join(lines) + "\n", encoding="utf-8")
  out = tmp_path / "out.jsonl"
  run_tool(
      "recurrent_bert.tools.tokenize_text",
      f"--vocab_file={vocab_file}",
      "--do_lower_case=true",
      f"--input_file={text}",
      f"--output_file={out}",
  )
  rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
  tokenizer = tokenization.BertWordpieceTokenizer(vocab_file, do_lower_case=True)
  expected = [[p.decode() for p in row] for row in tokenizer.tokenize_to_pieces(lines).to_list()]
  assert rows == expected and rows[1] == []


def test_create_pretraining_data_end_to_end(tmp_path, corpus_file, vocab_file):
  out = tmp_path / "out"
  result = run_tool(
      "recurrent_bert.tools.create_pretraining_data",
      f"--input_files={corpus_file}",
      f"--vocab_file={vocab_file}",
      f"--output_dir={out}",
      "--max_seq_length=32",
      "--max_predictions_per_seq=5",
      "--dupe_factor=1",
      "--num_output_shards=2",
      "--noprogress",
  )
  assert "instances" in result.stderr
  shards = sorted(p for p in os.listdir(out) if p.endswith(".tfrecord"))
  assert shards == ["pretraining-00000-of-00002.tfrecord", "pretraining-00001-of-00002.tfrecord"]
  stats = json.loads((out / "stats.json").read_text())
  spec = {
      "input_ids": tf.io.FixedLenFeature([32], tf.int64),
      "masked_lm_weights": tf.io.FixedLenFeature([5], tf.float32),
      "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
  }
  count = 0
  for shard in shards:
    for raw in tf.compat.v1.io.tf_record_iterator(str(out / shard)):
      tf.io.parse_single_example(raw, spec)
      count += 1
  assert count == stats["instances"] > 100
  for key in (
      "documents",
      "instance_tokens",
      "truncation_rate",
      "masked_fraction",
      "random_next_fraction",
  ):
    assert key in stats


def test_bad_flags_fail_before_work_naming_the_problem(tmp_path, corpus_file, vocab_file):
  out = tmp_path / "out"
  missing_vocab = run_tool(
      "recurrent_bert.tools.create_pretraining_data",
      f"--input_files={corpus_file}",
      f"--vocab_file={tmp_path}/nope.txt",
      f"--output_dir={out}",
      check=False,
  )
  assert missing_vocab.returncode != 0 and "nope.txt" in missing_vocab.stderr
  missing_input = run_tool(
      "recurrent_bert.tools.create_pretraining_data",
      f"--input_files={tmp_path}/*.none",
      f"--vocab_file={vocab_file}",
      f"--output_dir={out}",
      check=False,
  )
  assert missing_input.returncode != 0 and "--input_files" in missing_input.stderr
  bad_prob = run_tool(
      "recurrent_bert.tools.create_pretraining_data",
      f"--input_files={corpus_file}",
      f"--vocab_file={vocab_file}",
      f"--output_dir={out}",
      "--mask_token_prob=0.95",
      check=False,
  )
  assert bad_prob.returncode != 0 and "random_token_prob" in bad_prob.stderr
  assert not out.exists() or not any(p.endswith(".tfrecord") for p in os.listdir(out))
  helpfull = run_tool("recurrent_bert.tools.create_pretraining_data", "--helpfull", check=False)
  for flag in (
      "--input_files",
      "--output_dir",
      "--[no]do_whole_word_mask",
      "--[no]use_nsp",
      "--mask_token_prob",
      "--num_workers",
      "--num_output_shards",
  ):
    assert flag in helpfull.stdout + helpfull.stderr


def _generate_into(out, corpus_file, vocab_file, *flags, check=True):
  return run_tool(
      "recurrent_bert.tools.create_pretraining_data",
      f"--input_files={corpus_file}",
      f"--vocab_file={vocab_file}",
      f"--output_dir={out}",
      "--max_seq_length=32",
      "--max_predictions_per_seq=5",
      "--dupe_factor=1",
      "--noprogress",
      *flags,
      check=check,
  )


def _folder_state(out):
  """{name: bytes} of the folder, and whether stats.json agrees with the shards in it."""
  files = {name: (out / name).read_bytes() for name in sorted(os.listdir(out))}
  stats = json.loads(files["stats.json"])
  shards = [n for n in files if n.endswith(".tfrecord")]
  records = sum(1 for n in shards for _ in tf.compat.v1.io.tf_record_iterator(str(out / n)))
  consistent = len(shards) == stats["num_output_shards"] and records == stats["instances"]
  return files, consistent


def test_output_dir_is_replaced_as_a_unit(tmp_path, corpus_file, vocab_file):
  out = tmp_path / "out"
  _generate_into(out, corpus_file, vocab_file, "--num_output_shards=4")
  _generate_into(out, corpus_file, vocab_file, "--num_output_shards=2", "--random_seed=7")
  # Exactly the new set: the README's `dir/*.tfrecord` recipe cannot mix in old shards.
  assert sorted(os.listdir(out)) == [
      "pretraining-00000-of-00002.tfrecord",
      "pretraining-00001-of-00002.tfrecord",
      "stats.json",
  ]
  assert _folder_state(out)[1]
  assert os.listdir(tmp_path) == ["out"]  # no temp or old folder beside it


def test_output_dir_with_foreign_shards_is_refused(tmp_path, corpus_file, vocab_file):
  out = tmp_path / "out"
  out.mkdir()
  (out / "mine.tfrecord").write_bytes(b"someone else's data")
  result = _generate_into(out, corpus_file, vocab_file, check=False)
  assert result.returncode == 2
  error_lines = [line for line in result.stderr.splitlines() if "mine.tfrecord" in line]
  assert len(error_lines) == 1 and "Traceback" not in result.stderr
  assert os.listdir(out) == ["mine.tfrecord"]
  assert (out / "mine.tfrecord").read_bytes() == b"someone else's data"


def test_kill_mid_write_keeps_the_old_folder_and_next_start_cleans_up(
    tmp_path, corpus_file, vocab_file
):
  out = tmp_path / "out"
  _generate_into(out, corpus_file, vocab_file, "--num_output_shards=2")
  before, consistent = _folder_state(out)
  assert consistent
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  process = subprocess.Popen(
      [
          sys.executable,
          "-m",
          "recurrent_bert.tools.create_pretraining_data",
          f"--input_files={corpus_file}",
          f"--vocab_file={vocab_file}",
          f"--output_dir={out}",
          "--max_seq_length=32",
          "--max_predictions_per_seq=5",
          "--dupe_factor=40",
          "--chunk_bytes=20000",
          "--num_output_shards=3",
          "--random_seed=5",
          "--noprogress",
      ],
      cwd=REPO,
      env=env,
      stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL,
  )
  try:
    # Kill it once the new shards hold data, i.e. mid-write.
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:
      staged = [
          tmp_path / n / s
          for n in os.listdir(tmp_path)
          if n != "out"
          for s in (os.listdir(tmp_path / n) if (tmp_path / n).is_dir() else [])
      ]
      if any(p.suffix == ".tfrecord" and p.exists() and p.stat().st_size > 0 for p in staged):
        break
      time.sleep(0.01)
    assert process.poll() is None, "the run ended before it could be killed mid-write"
    process.send_signal(signal.SIGKILL)
  finally:
    process.kill()
    process.wait()
  assert _folder_state(out) == (before, True)  # old folder complete and intact
  leftovers = [n for n in os.listdir(tmp_path) if n != "out"]
  assert leftovers
  result = _generate_into(out, corpus_file, vocab_file, "--num_output_shards=3")
  assert all(n in result.stderr for n in leftovers)  # said what it removed
  assert os.listdir(tmp_path) == ["out"]
  assert _folder_state(out)[1] and len(os.listdir(out)) == 4


def test_worker_pool_in_a_process_without_tensorflow(tmp_path, corpus_file, vocab_file):
  """The tool as a user starts it: a fresh interpreter, no TensorFlow loaded, so the pool is
  forked after warming the workers' modules (`pretraining_workers`), unlike under the fork
  server, which has TensorFlow loaded. Its records are those of one in-process worker."""
  args = [
      f"--input_files={corpus_file}",
      f"--vocab_file={vocab_file}",
      "--max_seq_length=32",
      "--max_predictions_per_seq=5",
      "--dupe_factor=1",
      "--noprogress",
  ]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  pooled = subprocess.run(
      [sys.executable, "-m", "recurrent_bert.tools.create_pretraining_data", *args]
      + [f"--output_dir={tmp_path / 'pooled'}", "--num_workers=2"],
      cwd=REPO,
      env=env,
      capture_output=True,
      text=True,
      timeout=300,
  )
  assert pooled.returncode == 0, pooled.stderr[-3000:]
  _generate_into(tmp_path / "single", corpus_file, vocab_file, "--num_workers=1")
  shards = sorted(p.name for p in (tmp_path / "single").glob("*.tfrecord*"))
  assert shards and shards == sorted(p.name for p in (tmp_path / "pooled").glob("*.tfrecord*"))
  for name in shards:
    assert (tmp_path / "pooled" / name).read_bytes() == (tmp_path / "single" / name).read_bytes()
