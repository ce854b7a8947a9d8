"""What the end-to-end fine-tuning tests share: running a command as a user does, reading
its JSON, and the tiny GLUE run's flags (bert_tiny, 60 steps: enough to learn the generated
tasks of `recurrent_bert.tasks.sample_tasks`)."""

import json
import os
import sys

from tests.support import forkserver

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEQ_LEN = 32
GLUE_FLAGS = [
    "--model_config=bert_tiny",
    f"--max_seq_length={SEQ_LEN}",
    "--train_batch_size=16",
    "--learning_rate=1e-3",
    "--max_train_steps=60",
    "--warmup_steps=6",
    "--log_steps=20",
    "--eval_every_steps=30",
    "--eval_batch_size=24",
]


def run_entry(module, *flags, check=True, timeout=300):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
  env.pop("TF_CONFIG", None)
  result = forkserver.run([sys.executable, "-m", module, *flags], REPO, env, timeout=timeout)
  if check:
    assert result.returncode == 0, result.stderr[-4000:]
  return result


def read_json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)
