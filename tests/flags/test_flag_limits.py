"""Parse-time limits of the commands' flags (issue 15): each bad value is refused by absl's
flag parser naming the flag, before any work; the good neighbours still parse.

One subprocess per command (a command's flags live in its own process) parses every case
with FLAGS(argv) after unparse_flags(), so a case costs no TensorFlow start-up of its own.
"""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PARSE_CASES = r"""
import json, sys
from absl import flags
import importlib
module, cases = sys.argv[1], json.loads(sys.argv[2])
importlib.import_module(module)
FLAGS = flags.FLAGS
out = []
for argv in cases:
  FLAGS.unparse_flags()
  try:
    FLAGS(["prog"] + argv)
    out.append("accepted")
  except flags.Error as e:
    out.append(str(e).replace("\n", " "))
print(json.dumps(out))
"""

# command -> (required flags every case carries, [(bad flag, value)], [(good flag, value)])
CASES = {
    "recurrent_bert.finetune_squad": (
        ["--model_dir=/tmp/m", "--train_file=t.json"],
        [
            ("max_answer_length", "0"),
            ("n_best_size", "-1"),
            ("null_score_diff_threshold", "nan"),
            ("seed", "-1"),
            ("train_batch_size", str(2**31)),
            ("shuffle_buffer_size", str(2**31)),
        ],
        # A stride past the window's context room is fine: windows advance by at most the room.
        [("doc_stride", "400"), ("seed", str(2**32 - 1)), ("null_score_diff_threshold", "-1.5")],
    ),
    "recurrent_bert.finetune_glue": (
        ["--model_dir=/tmp/m", "--data_dir=/tmp/d"],
        [("label_list", "a,b"), ("eval_batch_size", "0")],
        [("eval_batch_size", str(2**31 - 1))],
    ),
    "recurrent_bert.finetune_tagging": (
        ["--model_dir=/tmp/m", "--train_file=t.txt"],
        [("doc_stride", "0"), ("max_seq_length", "2"), ("tag_column", "0")],
        [("doc_stride", "1000"), ("tag_column", "3"), ("tag_column", "-2")],
    ),
    "recurrent_bert.finetune_multiple_choice": (
        ["--model_dir=/tmp/m", "--data_dir=/tmp/d"],
        [("max_seq_length", "0"), ("task", "jsonl"), ("train_batch_size", str(2**31))],
        [("max_seq_length", "512")],
    ),
    "recurrent_bert.extract_features": (
        ["--input_file=x.txt", "--init_checkpoint=/tmp/m", "--output_file=o.jsonl"],
        [
            ("layers", "-1,-1"),
            ("layers", "-1,x"),
            ("num_shards", "0"),
            ("num_shards", "2"),  # jsonl: one file
            ("batch_size", "0"),
            ("max_seq_length", "2"),
            ("input_file", ""),
            ("init_checkpoint", ""),
        ],
        [("layers", "-1,0"), ("max_seq_length", "3")],
    ),
    "recurrent_bert.tools.build_vocab": (
        ["--input_files=x.txt", "--output_file=v.txt"],
        [
            ("max_token_length", "0"),
            ("max_token_length", str(2**31)),
            ("min_count", "0"),
            ("max_lines", "-1"),
            ("max_unique_chars", "0"),
            ("vocab_size", str(2**31)),
        ],
        [("max_token_length", "256"), ("max_lines", "0")],
    ),
    "recurrent_bert.tools.create_pretraining_data": (
        ["--input_files=x.txt", "--vocab_file=v.txt", "--output_dir=/tmp/o"],
        [
            ("random_seed", "-1"),
            ("dupe_factor", str(2**31)),
            ("num_workers", str(2**31)),
            ("beam_runner", ""),
            ("builtin_max_bytes", "-1"),
        ],
        [("dupe_factor", "10000"), ("builtin_max_bytes", "0")],
    ),
    "recurrent_bert.tools.tokenize_text": (
        ["--input_file=x.txt", "--vocab_file=v.txt", "--output_file=o.jsonl"],
        [("batch_size", "0"), ("batch_size", "-1")],
        [("batch_size", "1")],
    ),
    "recurrent_bert.tools.convert_checkpoint": (
        ["--source=tf1", "--input=/tmp/ckpt", "--output_dir=/tmp/o"],
        [("seed", "-1"), ("seed", str(2**32))],
        [("seed", "0")],
    ),
}


@pytest.mark.parametrize("module", sorted(CASES))
def test_bad_values_are_refused_at_parse_time_naming_the_flag(module):
  required, bad, good = CASES[module]
  argvs = [required + [f"--{name}={value}"] for name, value in bad + good]
  if module == "recurrent_bert.finetune_glue":
    required_task = ["--task=rte"]
    argvs = [a + required_task for a in argvs]
  result = subprocess.run(
      [sys.executable, "-c", _PARSE_CASES, module, json.dumps(argvs)],
      cwd=REPO,
      capture_output=True,
      text=True,
      env={**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "3"},
      timeout=300,
  )
  assert result.returncode == 0, result.stderr[-2000:]
  outcomes = json.loads(result.stdout.strip().splitlines()[-1])
  for (name, value), outcome in zip(bad, outcomes[: len(bad)]):
    assert outcome != "accepted", f"{module} accepted --{name}={value}"
    assert f"--{name}" in outcome or f"flag --{name}" in outcome, (name, value, outcome)
  for (name, value), outcome in zip(good, outcomes[len(bad) :]):
    assert outcome == "accepted", f"{module} refused --{name}={value}: {outcome}"
