"""What the bad-input campaign (rbert-bad-input-campaign) found in the commands of issue 16
(finetune_tagging, finetune_multiple_choice, extract_features): each bad value now ends
in one stderr line "error: ..." naming the flag or file, exit status 2, no traceback.

Each command runs as a subprocess on tiny generated files; every bad value here is refused
before a model is built, so no run trains.
"""

import os

import pytest

from recurrent_bert.tasks import sample_tasks
from tests.support import readme_text


def error_lines(stderr):
  """stderr's lines that are not TensorFlow's or absl's start-up chatter."""
  return [
      line
      for line in stderr.splitlines()
      if line.strip() and not line.startswith(("I0000", "W0000", "E0000", "WARNING: All log"))
  ]


def assert_one_line_error(result, *names):
  assert result.returncode == 2, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  lines = [line for line in error_lines(result.stderr) if not line.startswith(("I1", "W1"))]
  assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
  for name in names:
    assert name in lines[0], lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  root = tmp_path_factory.mktemp("issue16")
  return dict(
      conll=sample_tasks.write_conll_files(root / "conll", num_train=4, num_dev=2, num_test=2),
      swag=sample_tasks.write_swag_folder(root / "swag", num_train=4, num_dev=2, num_test=2),
      vocab=sample_tasks.write_vocab(root / "vocab.txt", entities=True),
      root=root,
  )


def tagging(files, *flags):
  return (
      "recurrent_bert.finetune_tagging",
      "--model_config=bert_tiny",
      f"--vocab_file={files['vocab']}",
      f"--model_dir={files['root'] / 'tagging'}",
      f"--train_file={files['conll']['train']}",
      f"--eval_file={files['conll']['dev']}",
      "--max_seq_length=16",
      "--doc_stride=4",
      *flags,
  )


def extract(files, *flags):
  return (
      "recurrent_bert.extract_features",
      f"--input_file={files['conll']['test']}",
      f"--init_checkpoint={files['root'] / 'no_model'}",
      f"--output_file={files['root'] / 'features.jsonl'}",
      *flags,
  )


# Each case: (command line maker, bad flags, what the error line must name).
CASES = {
    "a malformed --label_list tag": (
        tagging,
        ("--label_list=O,no_such_thing",),
        ("--label_list", "'no_such_thing'"),
    ),
    "--tag_column=0, the word's column": (tagging, ("--tag_column=0",), ("--tag_column",)),
    "an empty --input_file": (extract, ("--input_file=",), ("--input_file",)),
    "an empty --init_checkpoint": (extract, ("--init_checkpoint= ",), ("--init_checkpoint",)),
}


@pytest.mark.slow(seconds=9)
@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_value_is_one_line_naming_the_flag(files, name):
  command, flags, names = CASES[name]
  result = readme_text.finish(readme_text.start_module(*command(files, *flags)), timeout=300)
  assert_one_line_error(result, *names)


def test_campaign_runs_get_fresh_folders_in_a_reused_work_dir(tmp_path):
  # A second campaign in the same --work_dir reused the first one's run folders, so a
  # fine-tuning run resumed from an earlier model_dir and ignored a bad --init_checkpoint.
  from recurrent_bert.tools.bad_input_fixtures import Workspace

  first = Workspace(str(tmp_path), timeout=10).scratch("finetune_tagging")
  (tmp_path / "runs" / "finetune_tagging-0002").mkdir()
  second = Workspace(str(tmp_path), timeout=10)
  folders = [second.scratch("finetune_tagging") for _ in range(2)]
  assert [os.path.basename(f) for f in folders] == [
      "finetune_tagging-0003",
      "finetune_tagging-0004",
  ]
  assert first not in folders and all(not os.listdir(f) for f in folders)
