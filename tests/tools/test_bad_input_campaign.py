"""recurrent_bert/tools/bad_input_campaign.py on a small subset, and the issue's bad command lines.

The campaign's classification is checked against hand-written expectations; the issue's
examples (pretrain --vocab_size=0, a vocabulary without [UNK], --distribution_strategy=tpu
without a TPU, a --model_dir under a file) run as subprocesses: one stderr line naming the
flag or file, exit status 2, no traceback.
"""

import json
import os
import sys

import pytest

from recurrent_bert.tools import bad_input_campaign as campaign
from recurrent_bert.tools.bad_input_cases import Case
from recurrent_bert.tools.bad_input_cases import Flag
from recurrent_bert.tools.bad_input_cases import bad_values
from recurrent_bert.tools.bad_input_fixtures import Workspace
from recurrent_bert.tools.bad_input_fixtures import pretrain_args as workspace_pretrain_args
from tests.support import forkserver

pytestmark = pytest.mark.slow(seconds=40)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_module(module, *args, timeout=180):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
  return forkserver.run([sys.executable, "-m", module, *args], REPO, env, timeout=timeout)


def error_lines(stderr):
  """The lines of stderr that are not TensorFlow's or absl's start-up chatter."""
  return [
      line
      for line in stderr.splitlines()
      if line.strip() and not line.startswith(("I0000", "W0000", "E0000", "WARNING: All log"))
  ]


def assert_one_line_error(result, *names):
  assert result.returncode == 2, result.stderr
  assert "Traceback" not in result.stderr, result.stderr
  lines = error_lines(result.stderr)
  assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
  for name in names:
    assert name in lines[0], lines[0]
  return lines[0]


# -- classification ----------------------------------------------------------------------

CASE = Case("pretrain", "vocab_size", "0", ("--vocab_size=0",))


@pytest.mark.parametrize(
    "code, stderr, expected",
    [
        (2, "I0000 chatter\nerror: flag --vocab_size=0: --vocab_size must be >= 1\n", "clear"),
        (2, "error: --model_config: no such preset\n", "unclear"),  # names another flag
        (2, "vocab_size must be >= 1\n", "unclear"),  # not the one error line
        (1, "error: --vocab_size=0: must be >= 1\n", "unclear"),  # not status 2
        (1, "Traceback (most recent call last):\n  ...\nValueError: vocab_size=0\n", "traceback"),
        (2, "Traceback (most recent call last):\nerror: --vocab_size=0\n", "traceback"),
        (0, "", "accepted"),
        (None, "", "hang"),
    ],
)
def test_classify(code, stderr, expected):
  assert campaign.classify(CASE, code, stderr) == expected


def test_classify_names_the_file_instead_of_the_flag():
  case = Case("tokenize_text", "input_file", "missing", ("--input_file=/x/y.txt",), "/x/y.txt")
  assert campaign.classify(case, 2, "error: /x/y.txt: no such file\n") == "clear"


def test_classify_fine_when_the_hand_list_says_so():
  case = Case("pretrain", "num_train_steps", "2147483648", ("--num_train_steps=2147483648",))
  assert campaign.classify(case, None, "") == "fine"
  assert campaign.classify(case, 0, "") == "fine"


def test_bad_values_by_type(tmp_path):
  workspace = Workspace(str(tmp_path), timeout=10)
  count = Flag("train_batch_size", "m", "int", "32")
  assert bad_values("pretrain", count, workspace) == [
      ("not a number", "x1"),
      ("0", "0"),
      ("-1", "-1"),
      ("2147483648", "2147483648"),
  ]
  seed = Flag("seed", "m", "int", "0")  # not a size: no huge value; 0 is the default
  assert bad_values("pretrain", seed, workspace) == [("not a number", "x1"), ("-1", "-1")]
  enum = Flag("mode", "m", "string enum", None, ("train", "eval"))
  assert bad_values("pretrain", enum, workspace) == [("unknown", "no_such_value")]
  output = Flag("output_file", "m", "string", None)
  assert bad_values("build_vocab", output, workspace) == [
      ("empty", ""),
      ("under a file", os.path.join(str(tmp_path), "a_file.txt", "sub")),
  ]
  vocab = Flag("vocab_file", "m", "string", None)
  labels = dict(bad_values("pretrain", vocab, workspace))
  assert set(labels) == {"empty", "missing", "directory", "wrong format"}
  with open(labels["wrong format"], encoding="utf-8") as f:
    assert "[UNK]" not in f.read()
  assert not os.path.exists(labels["missing"]) and os.path.isdir(labels["directory"])
  # export reads --model_dir: an input there.
  model_dir = Flag("model_dir", "m", "string", None)
  assert [label for label, _ in bad_values("export", model_dir, workspace)] == [
      "empty",
      "missing",
      "directory",
      "wrong format",
  ]


def test_campaign_on_two_commands(tmp_path):
  output = tmp_path / "campaign.json"
  result = run_module(
      "recurrent_bert.tools.bad_input_campaign",
      "--commands=summary,builtin_corpus",
      "--flags=layers,max_bytes",
      "--nohand_cases",
      "--timeout=60",
      f"--work_dir={tmp_path / 'work'}",
      f"--output_json={output}",
  )
  assert result.returncode == 0, result.stderr
  runs = json.loads(output.read_text())["runs"]
  outcomes = {(r["command"], r["flag"], r["label"]): r["outcome"] for r in runs}
  assert outcomes == {
      ("summary", "layers", "not a boolean"): "clear",
      ("builtin_corpus", "max_bytes", "not a number"): "clear",
      ("builtin_corpus", "max_bytes", "-1"): "clear",  # a cap: >= 0
      ("builtin_corpus", "max_bytes", "2147483648"): "fine",  # the base stops at 3 documents
  }
  assert "summary" in result.stdout and "builtin_corpus" in result.stdout  # the table


# -- the examples ----------------------------------------------------------------


def test_pretrain_vocab_size_zero_is_refused_at_parse_time():
  result = run_module("recurrent_bert.pretrain", "--model_dir=unused", "--vocab_size=0")
  assert_one_line_error(result, "--vocab_size")


def pretrain_args(tmp_path, *extra):
  return (
      "--model_config=bert_tiny",
      f"--input_files={tmp_path / 'none' / '*.tfrecord'}",
      f"--model_dir={tmp_path / 'model'}",
      *extra,
  )


def test_pretrain_vocab_without_unk_names_the_file(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[CLS]\n[SEP]\n[MASK]\nthe\n", encoding="utf-8")
  result = run_module("recurrent_bert.pretrain", *pretrain_args(tmp_path, f"--vocab_file={vocab}"))
  assert_one_line_error(result, str(vocab), "[UNK]")


def test_pretrain_vocab_size_below_the_vocabulary(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\n", encoding="utf-8")
  result = run_module(
      "recurrent_bert.pretrain", *pretrain_args(tmp_path, f"--vocab_file={vocab}", "--vocab_size=5")
  )
  assert_one_line_error(result, "--vocab_size=5", "7 tokens")


def test_pretrain_records_of_another_vocabulary_are_refused_naming_their_stats(tmp_path):
  """The records' stats.json records their vocabulary's SHA-256: a vocabulary of the same
  size but another order (ids naming other tokens) is refused before any model is built."""
  workspace = Workspace(str(tmp_path / "fixtures"), timeout=120)
  args = workspace_pretrain_args(workspace, str(tmp_path / "model"))
  args = [a for a in args if not a.startswith("--vocab_file=")]
  result = run_module("recurrent_bert.pretrain", *args, f"--vocab_file={workspace.other_vocab}")
  stats = os.path.join(os.path.dirname(workspace.records), "stats.json")
  assert_one_line_error(result, stats, "another vocabulary", "other_vocab.txt")


def test_pretrain_model_dir_under_a_file(tmp_path):
  a_file = tmp_path / "a_file"
  a_file.write_text("x")
  result = run_module(
      "recurrent_bert.pretrain",
      "--input_files=x",
      f"--model_dir={a_file / 'model'}",
  )
  assert_one_line_error(result, "--model_dir", "is a file")


def test_pretrain_tpu_without_a_tpu(tmp_path):
  result = run_module(
      "recurrent_bert.pretrain",
      *pretrain_args(tmp_path, "--distribution_strategy=tpu", "--tpu=no-such-tpu-xyz"),
  )
  assert_one_line_error(
      result, "--distribution_strategy=tpu: no TPU found at --tpu=no-such-tpu-xyz"
  )
