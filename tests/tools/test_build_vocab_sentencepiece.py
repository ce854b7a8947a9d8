"""rbert-build-vocab --tokenizer=unigram|bpe, run as users run it.

The reference for the written model is the `sentencepiece` library loading it."""

import os
import sys

import pytest
import sentencepiece

from recurrent_bert.data import vocab as vocab_lib
from tests.end_to_end.test_commands_bad_input import assert_one_line_error
from tests.support import forkserver
from tests.tools.test_tools import REPO

RESERVED = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def run_tool(*flags):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  return forkserver.run(
      [sys.executable, "-m", "recurrent_bert.tools.build_vocab", *flags], REPO, env, timeout=300
  )


@pytest.fixture(scope="module")
def text_file(tmp_path_factory, corpus_file):
  """~100 KB of the corpus slice plus some non-ASCII lines."""
  with open(corpus_file, encoding="utf-8") as f:
    text = f.read()[:100_000]
  path = tmp_path_factory.mktemp("text") / "text.txt"
  path.write_text(text + "\n\nCafé déjà vu.\n東京は日本の首都です。\n" * 5, encoding="utf-8")
  return str(path)


@pytest.mark.slow(seconds=11)
@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_writes_a_model_and_its_listing_deterministically(tmp_path, text_file, model_type):
  outputs = []
  for run in ("a", "b"):
    result = run_tool(
        f"--input_files={text_file}",
        f"--tokenizer={model_type}",
        "--vocab_size=500",
        f"--output_file={tmp_path / run / 'spm.model'}",  # a trailing .model is the model
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outputs.append(tmp_path / run / "spm")
  assert sorted(os.listdir(tmp_path / "a")) == ["spm.model", "spm.vocab"]
  model_a, model_b = (open(f"{p}.model", "rb").read() for p in outputs)
  assert model_a == model_b  # same text and flags: the same bytes
  processor = sentencepiece.SentencePieceProcessor(model_file=f"{outputs[0]}.model")
  assert processor.get_piece_size() == 500
  assert [processor.id_to_piece(i) for i in range(5)] == RESERVED
  assert processor.pad_id() == 0 and processor.unk_id() == 1
  assert processor.bos_id() == processor.eos_id() == -1
  with open(f"{outputs[0]}.vocab", encoding="utf-8") as f:
    listing = [line.split("\t") for line in f.read().splitlines()]
  assert [piece for piece, _ in listing] == [processor.id_to_piece(i) for i in range(500)]
  assert [float(score) for _, score in listing] == pytest.approx(
      [processor.get_score(i) for i in range(500)], rel=1e-5
  )
  # Case folded by default (--do_lower_case); the special symbols are matched as written.
  assert "[MASK]" in processor.encode("hello [MASK] World", out_type=str)
  assert "[MASK]" not in processor.encode("hello [mask] World", out_type=str)
  assert processor.encode("Hello") == processor.encode("hello")
  assert vocab_lib.read_vocabulary(f"{outputs[0]}.model").folds_case is True


@pytest.mark.slow(seconds=3)
def test_nodo_lower_case_keeps_case(tmp_path, text_file):
  result = run_tool(
      f"--input_files={text_file}",
      "--tokenizer=unigram",
      "--vocab_size=500",
      "--nodo_lower_case",
      f"--output_file={tmp_path / 'cased'}",
  )
  assert result.returncode == 0, result.stderr[-3000:]
  processor = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "cased.model"))
  assert processor.encode("Hello") != processor.encode("hello")
  # What tokenizers and model dirs report as the model's casing.
  assert vocab_lib.read_vocabulary(str(tmp_path / "cased.model")).folds_case is False


@pytest.mark.slow(seconds=2)
def test_a_failed_run_leaves_the_old_outputs_and_says_why_in_one_line(tmp_path, text_file):
  old = {"spm.model": b"old model", "spm.vocab": b"old listing"}
  for name, content in old.items():
    (tmp_path / name).write_bytes(content)
  # More pieces than 100 KB of text yields: SentencePiece refuses.
  result = run_tool(
      f"--input_files={text_file}",
      "--tokenizer=bpe",
      "--vocab_size=200000",
      f"--output_file={tmp_path / 'spm'}",
  )
  assert_one_line_error(result, "Vocabulary size too high (200000)")
  assert sorted(os.listdir(tmp_path)) == ["spm.model", "spm.vocab"]  # no temp files either
  for name, content in old.items():
    assert (tmp_path / name).read_bytes() == content


@pytest.mark.slow(seconds=11)
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--tokenizer=sentencepiece"], "tokenizer"),
        (["--tokenizer=unigram", "--min_count=2"], "--min_count"),
        (["--tokenizer=bpe", "--max_token_length=20"], "--max_token_length"),
        (["--tokenizer=unigram", "--character_coverage=1.5"], "character_coverage"),
        (["--character_coverage=1.0"], "--character_coverage"),  # WordPiece: not used
    ],
)
def test_bad_flags_exit_2_with_one_line(tmp_path, text_file, flags, message):
  result = run_tool(f"--input_files={text_file}", f"--output_file={tmp_path / 'out'}", *flags)
  assert_one_line_error(result, message)
  assert not os.listdir(tmp_path)
