"""The bad-input campaign's fixtures, and each command's base command line that works on them.

`Workspace` makes tiny good inputs (a corpus and vocabulary, pretraining records, sample
GLUE/SQuAD/CoNLL/SWAG tasks, a pretrained model dir) and bad ones (a vocabulary without
[UNK], binary junk, a path under a file ...) once, on first use, under the campaign's
--work_dir; `base_args` is the command line a run's one bad flag value is put after.
"""

import json
import os
import random
import shlex
import tempfile
from typing import List, Sequence

from recurrent_bert.tools.bad_input_process import COMMANDS
from recurrent_bert.tools.bad_input_process import run_command


class Workspace:
  """Tiny fixtures under `root`, made on first use."""

  def __init__(self, root: str, timeout: float):
    self.root = os.path.abspath(root)
    self.timeout = timeout
    self._runs = 0
    os.makedirs(self.root, exist_ok=True)

  def path(self, *parts: str) -> str:
    return os.path.join(self.root, *parts)

  def scratch(self, command: str) -> str:
    """A fresh folder for one run's outputs (an earlier campaign's in this --work_dir kept:
    a fine-tuning run would resume from its model_dir)."""
    while True:
      self._runs += 1
      directory = self.path("runs", f"{command}-{self._runs:04d}")
      if not os.path.exists(directory):
        os.makedirs(directory)
        return directory

  def _file(self, name: str, content, mode: str = "w") -> str:
    path = self.path(name)
    if not os.path.exists(path):
      with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
        f.write(content)
    return path

  # -- good fixtures --------------------------------------------------------------------

  WORDS = (
      "the a cat dog sat on mat ran fast slow red blue green house tree river stone bird "
      "sings song light dark night day sun moon star over under with from into big small "
      "old new man woman child walks talks reads writes book paper pen door window road"
  ).split()

  @property
  def corpus(self) -> str:
    """Text in the data tools' format: a sentence per line, documents split by a blank line."""
    rng = random.Random(0)
    documents = []
    for _ in range(40):
      sentences = [
          " ".join(rng.choice(self.WORDS) for _ in range(rng.randint(4, 10))) + " ."
          for _ in range(rng.randint(4, 8))
      ]
      documents.append("\n".join(sentences))
    return self._file("corpus.txt", "\n\n".join(documents) + "\n")

  @property
  def vocab(self) -> str:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    words = sorted(set(self.WORDS) | set(letters))
    tokens = specials + [".", ","] + words + ["##" + c for c in letters]
    return self._file("vocab.txt", "\n".join(tokens) + "\n")

  @property
  def other_vocab(self) -> str:
    """`vocab` with its first two words swapped: as valid and as large, another vocabulary."""
    tokens = self._read(self.vocab).split("\n")
    first = next(i for i, t in enumerate(tokens) if t.isalpha())
    tokens[first], tokens[first + 1] = tokens[first + 1], tokens[first]
    return self._file("other_vocab.txt", "\n".join(tokens))

  @staticmethod
  def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
      return f.read()

  def _run_once(self, name: str, module: str, args: Sequence[str], done: str) -> str:
    target = self.path(name)
    if not os.path.exists(done):
      result = run_command(module, args, self.timeout * 5, memory_limit_mb=0)
      if result[0] != 0:
        raise RuntimeError(f"fixture {name}: {module} {shlex.join(args)} failed:\n{result[1]}")
    return target

  @property
  def records(self) -> str:
    """A glob of tiny pretraining records (max_seq_length 32, 5 predictions)."""
    output = self.path("records", "train.tfrecord")
    self._run_once(
        "records",
        "recurrent_bert.tools.create_pretraining_data",
        [
            f"--input_files={self.corpus}",
            f"--vocab_file={self.vocab}",
            f"--output_files={output}",
            "--max_seq_length=32",
            "--max_predictions_per_seq=5",
            "--dupe_factor=1",
            "--noprogress",
        ],
        output,
    )
    return self.path("records", "*.tfrecord")

  @property
  def tasks(self) -> str:
    """A folder with rte/ and squad/ (tools/make_sample_tasks.py), a few examples each."""
    target = self.path("tasks")
    self._run_once(
        "tasks",
        "recurrent_bert.tools.make_sample_tasks",
        [f"--output_dir={target}", "--num_train=16", "--num_dev=8"],
        os.path.join(target, "rte", "train.tsv"),
    )
    return target

  def _written(self, name: str, write) -> str:
    """`write(folder)` into a new folder `name` (renamed into place when complete)."""
    target = self.path(name)
    if not os.path.exists(target):
      partial = tempfile.mkdtemp(prefix=f".{name}-", dir=self.root)
      write(partial)
      os.rename(partial, target)
    return target

  @property
  def conll(self) -> str:
    """CoNLL-2003-format {train,dev,test}.txt (tasks/sample_tasks.py), a few sentences each."""
    from recurrent_bert.tasks import sample_tasks

    return self._written(
        "conll", lambda d: sample_tasks.write_conll_files(d, num_train=16, num_dev=8, num_test=4)
    )

  @property
  def swag(self) -> str:
    """A SWAG folder ({train,val,test}.csv of tasks/sample_tasks.py), a few rows each."""
    from recurrent_bert.tasks import sample_tasks

    return self._written(
        "swag", lambda d: sample_tasks.write_swag_folder(d, num_train=8, num_dev=4, num_test=4)
    )

  @property
  def task_vocab(self) -> str:
    """The sample tasks' vocabulary, with the NER task's words."""
    from recurrent_bert.tasks import sample_tasks

    path = self.path("task_vocab.txt")
    return path if os.path.exists(path) else sample_tasks.write_vocab(path, entities=True)

  @property
  def texts(self) -> str:
    """Inputs of extract_features: a text a line, one a sentence pair."""
    return self._file("texts.txt", "the cat sat on the mat .\nred bird ||| a blue tree\nold road\n")

  @property
  def pretrained(self) -> str:
    """A pretraining model dir (2 steps of bert_tiny), for export."""
    target = self.path("pretrained")
    self._run_once(
        "pretrained",
        COMMANDS["pretrain"],
        pretrain_args(self, target),
        os.path.join(target, "encoder"),
    )
    return target

  # -- bad fixtures ---------------------------------------------------------------------

  @property
  def vocab_without_unk(self) -> str:
    return self._file("vocab_without_unk.txt", "[PAD]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\n")

  @property
  def config_wrong_type(self) -> str:
    return self._file("config_wrong_type.json", json.dumps({"hidden_size": "big"}) + "\n")

  @property
  def junk(self) -> str:
    return self._file("junk.bin", bytes(range(256)) * 4, "wb")

  @property
  def empty_file(self) -> str:
    return self._file("empty.txt", "")

  @property
  def directory(self) -> str:
    path = self.path("a_directory")
    os.makedirs(path, exist_ok=True)
    return path

  @property
  def missing(self) -> str:
    return self.path("missing", "nothing_here.txt")

  @property
  def under_a_file(self) -> str:
    return os.path.join(self._file("a_file.txt", "x\n"), "sub")


def pretrain_args(workspace: Workspace, model_dir: str) -> List[str]:
  return [
      "--model_config=bert_tiny",
      f"--vocab_file={workspace.vocab}",
      f"--input_files={workspace.records}",
      f"--model_dir={model_dir}",
      "--max_seq_length=32",
      "--max_predictions_per_seq=5",
      "--train_batch_size=4",
      "--num_train_steps=2",
      "--warmup_steps=0",
      "--steps_per_loop=1",
      "--log_steps=1",
      "--save_checkpoints_steps=2",
      "--shuffle_buffer_size=10",
  ]


def base_args(command: str, workspace: Workspace, scratch: str) -> List[str]:
  """The command line (after `python -m module`) that works on the fixtures."""
  if command == "pretrain":
    return pretrain_args(workspace, os.path.join(scratch, "model"))
  sample_task = command in ("finetune_tagging", "finetune_multiple_choice")
  finetune = [
      "--model_config=bert_tiny",
      f"--vocab_file={workspace.task_vocab if sample_task else workspace.vocab}",
      f"--model_dir={os.path.join(scratch, 'model')}",
      "--train_batch_size=4",
      "--eval_batch_size=4",
      "--max_train_steps=2",
      "--steps_per_loop=1",
      "--log_steps=1",
  ]
  if command == "finetune_glue":
    rte = os.path.join(workspace.tasks, "rte")
    return finetune + ["--task=rte", f"--data_dir={rte}", "--max_seq_length=32"]
  if command == "finetune_squad":
    squad = os.path.join(workspace.tasks, "squad")
    return finetune + [
        f"--train_file={os.path.join(squad, 'train-v1.1.json')}",
        f"--predict_file={os.path.join(squad, 'dev-v1.1.json')}",
        "--max_seq_length=64",
        "--doc_stride=32",
        "--max_query_length=16",
    ]
  if command == "finetune_tagging":
    conll = workspace.conll
    return finetune + [
        *(
            f"--{flag}={os.path.join(conll, split)}.txt"
            for flag, split in (
                ("train_file", "train"),
                ("eval_file", "dev"),
                ("predict_file", "test"),
            )
        ),
        "--max_seq_length=32",
        "--doc_stride=8",
    ]
  if command == "finetune_multiple_choice":
    return finetune + ["--task=swag", f"--data_dir={workspace.swag}", "--max_seq_length=24"]
  if command == "extract_features":
    return [
        f"--input_file={workspace.texts}",
        f"--init_checkpoint={workspace.pretrained}",
        f"--output_file={scratch}/features.jsonl",
        "--max_seq_length=16",
        "--batch_size=2",
        "--layers=-1,0",
    ]
  if command == "export":
    return [f"--model_dir={workspace.pretrained}", f"--export_dir={scratch}/export"]
  if command == "summary":
    return ["--preset=bert_tiny"]
  if command == "smoke":
    return ["--sizes=tiny", "--families=bert", "--batch_size=1", "--seq_length=8"]
  if command == "create_pretraining_data":
    return [
        f"--input_files={workspace.corpus}",
        f"--vocab_file={workspace.vocab}",
        f"--output_files={scratch}/out.tfrecord",
        "--max_seq_length=32",
        "--max_predictions_per_seq=5",
        "--dupe_factor=1",
        "--noprogress",
    ]
  if command == "build_vocab":
    return [
        f"--input_files={workspace.corpus}",
        f"--output_file={scratch}/vocab.txt",
        "--vocab_size=100",
    ]
  if command == "tokenize_text":
    return [
        f"--vocab_file={workspace.vocab}",
        f"--input_file={workspace.corpus}",
        f"--output_file={scratch}/pieces.jsonl",
    ]
  if command == "convert_checkpoint":
    # No source checkpoint is made here (writing one takes a model of its own): the base
    # fails on --input, so only values refused before the source is read are measured.
    return ["--source=tf1", f"--input={workspace.missing}", f"--output_dir={scratch}/out"]
  if command == "builtin_corpus":
    return [f"--output_file={scratch}/corpus.txt", "--max_documents=3"]
  if command == "sweep":
    rte = os.path.join(workspace.tasks, "rte")
    return [
        "--models=bert=bert_tiny",
        f"--tasks=rte={rte}",
        "--learning_rates=1e-3",
        "--seeds=0",
        f"--output_dir={scratch}/sweep",
        "--dry_run",
    ]
  raise ValueError(f"no base command line for {command}")
