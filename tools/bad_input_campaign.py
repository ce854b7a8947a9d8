r"""Bad-input campaign: every command run with bad values of its own flags, outcomes tallied.

  python -m tools.bad_input_campaign --output_json=/tmp/campaign.json
  python -m tools.bad_input_campaign --commands=pretrain,tokenize_text --flags=vocab_file

Each command has a base command line that works on tiny fixtures (a generated corpus and
vocabulary, pretraining records, sample GLUE/SQuAD/CoNLL/SWAG tasks, a pretrained model
dir, all made once under --work_dir). A run is the base with one flag replaced by a bad value of its
type, generated from the command's own flag definitions (its --helpxml):

  integer    a non-number, 0, -1; 2**31 for sizes and counts (memory is capped: a huge
             size ends in an out-of-memory error, not in the machine's swap)
  float      a non-number, -1, nan
  enum       an unknown value          boolean   a non-boolean
  path       empty, missing, a directory, a file of the wrong format (a vocabulary
             without [UNK], a config with a wrong type, binary junk); an output under a
             file
  other      empty, an unknown word

A flag of a shared group (recurrent_bert/flags/: one definition, one validation) is tried
in the first command that has it only, unless --repeat_shared_flags. Then comes a hand
list (`hand_cases`) of bad inputs no type implies (--vocab_size=0, a TPU that
is not there ...). Every run has a timeout and is classified:

  clear      exit 2, stderr's last line starts with "error:" and names the flag or file
  unclear    failed without a traceback, but not that way (another status, a line naming
             neither)
  traceback  "Traceback" on stderr
  hang       still running at --timeout (x SLOW_COMMANDS for fine-tuning)
  accepted   exit 0: the value was taken
  fine       accepted or still running, and legitimately so (a seed of -1, a huge step
             count that would simply run long ...): the hand list FINE

It prints a table per command (each outcome but clear and fine, with the last stderr
line) and the tally, and writes every run to --output_json.
"""

from concurrent import futures
import contextlib
import dataclasses
import json
import os
import random
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple
import xml.etree.ElementTree as ElementTree

if __package__ in (None, ""):  # run as `python tools/NAME.py`: make `tools` importable
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import flags

from recurrent_bert import cli
from recurrent_bert import io_utils
from recurrent_bert import jobs
from recurrent_bert import progress

FLAGS = flags.FLAGS
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Short name -> module run as `python -m`.
COMMANDS = {
    "pretrain": "recurrent_bert.pretrain",
    "finetune_glue": "recurrent_bert.finetune_glue",
    "finetune_squad": "recurrent_bert.finetune_squad",
    "finetune_tagging": "recurrent_bert.finetune_tagging",
    "finetune_multiple_choice": "recurrent_bert.finetune_multiple_choice",
    "extract_features": "recurrent_bert.extract_features",
    "export": "recurrent_bert.export",
    "summary": "recurrent_bert.summary",
    "smoke": "recurrent_bert.smoke",
    "create_pretraining_data": "tools.create_pretraining_data",
    "build_vocab": "tools.build_vocab",
    "tokenize_text": "tools.tokenize_text",
    "convert_checkpoint": "tools.convert_checkpoint",
    "builtin_corpus": "tools.builtin_corpus",
    "sweep": "tools.sweep",
}
OUTCOMES = ("clear", "fine", "accepted", "unclear", "traceback", "hang")

flags.DEFINE_list("commands", list(COMMANDS), f"Commands to run: {', '.join(COMMANDS)}.")
flags.DEFINE_list("flags", None, "Only these flags (and hand cases naming them); default all.")
flags.DEFINE_boolean("hand_cases", True, "Also run the hand list of bad inputs.")
flags.DEFINE_boolean(
    "repeat_shared_flags",
    False,
    "Try a flag of a shared group (recurrent_bert/flags/) in every command that has it; "
    "default: in the first command of --commands only (one definition, one validation).",
)
flags.DEFINE_string("work_dir", None, "Fixtures and run outputs; default a new temp dir.")
flags.DEFINE_string("output_json", None, "Every run: command line, outcome, last stderr line.")
flags.DEFINE_integer("parallel", 1, "Runs at a time (each may be a TensorFlow process).")
flags.DEFINE_float("timeout", 60.0, "Seconds a run may take before it counts as a hang.")
flags.DEFINE_integer("memory_limit_mb", 6000, "Address-space cap of each run (0 = none).")
flags.register_validator("timeout", lambda v: v > 0, "--timeout must be > 0")
flags.register_validator("parallel", lambda v: v >= 1, "--parallel must be >= 1")
flags.register_validator("memory_limit_mb", lambda v: v >= 0, "--memory_limit_mb must be >= 0")
flags.register_validator(
    "commands",
    lambda v: bool(v) and set(v) <= set(COMMANDS),
    f"--commands: choose from {', '.join(COMMANDS)}",
)

# Commands whose base run takes long (fine-tuning compiles, trains, evaluates and
# predicts): their runs get this many times --timeout before they count as a hang.
SLOW_COMMANDS = {
    "finetune_glue": 3,
    "finetune_squad": 3,
    "finetune_tagging": 3,
    "finetune_multiple_choice": 3,
}
# The fine-tuning commands: they share flags/finetuning.py, so a shared flag's legitimate
# values are fine in whichever of them leads --commands.
FINETUNE_COMMANDS = tuple(SLOW_COMMANDS)
# Outputs: a bad value is an empty name or a path under a regular file. Everything else
# with a path-like name is an input.
OUTPUT_FLAGS = {
    "output_file",
    "output_dir",
    "output_files",
    "export_dir",
    "write_configs",
    "cache_dir",
    "run_dir",
    "model_dir",
    "tfds_data_dir",
}
INPUT_FLAGS_BY_COMMAND = {"export": {"model_dir"}}  # model_dir is what export reads
_PATH_WORDS = ("file", "dir", "checkpoint", "config", "input", "flagfile")
# Integer flags that are sizes or counts also get a huge value.
_SIZE_WORDS = ("size", "length", "max", "num", "steps", "bytes", "documents", "factor", "count")

# (command, flag, value label) legitimately accepted (or running long): the value is fine
# as such, or unused by the base command line.
_HUGE = "2147483648"
# Fine-tuning counts and periods beyond the base's 2 steps: simply never reached.
_NEVER_REACHED = (
    "eval_every_steps",
    "keep_checkpoint_max",
    "log_steps",
    "save_checkpoints_steps",
    "steps_per_loop",
    "max_train_steps",  # a long run, as asked
)
FINE = {
    # Counts and periods beyond the run's 2 steps: simply never reached.
    *(
        ("pretrain", name, _HUGE)
        for name in (
            "eval_every_steps",
            "max_eval_steps",
            "keep_checkpoint_max",
            "log_steps",
            "save_checkpoints_steps",
            "steps_per_loop",
            "shuffle_buffer_size",
            "eval_batch_size",  # used by evaluation only; the base trains only
        )
    ),
    ("pretrain", "num_train_steps", _HUGE),  # a long run, as asked
    ("pretrain", "run_dir", "empty"),  # the working directory
    ("pretrain", "run_dir", "under a file"),  # the base's paths are absolute
    ("pretrain", "tpu", "empty"),  # no TPU strategy asked for: unused
    ("pretrain", "tpu", "word"),
    ("pretrain", "eval_input_files", "empty"),  # no evaluation
    ("pretrain", "init_checkpoint", "empty"),  # random initialisation
    ("pretrain", "vocab_file", "empty"),  # none: the records are masked, the size is the config's
    ("pretrain", "warmup_steps", "0"),  # no warmup
    # Empty is the default: the train labels, the test splits.
    *(("finetune_glue", name, "empty") for name in ("label_list", "predict_splits")),
    # Read with --tfds only; the base reads files.
    *(
        (command, "tfds_data_dir", label)
        for command in FINETUNE_COMMANDS
        for label in ("empty", "under a file")
    ),
    # Empty is the default: no dev / test file, CoNLL-2003's nine tags.
    *(("finetune_tagging", name, "empty") for name in ("eval_file", "predict_file", "label_list")),
    # --task=jsonl's files; the base reads --task=swag's --data_dir.
    *(
        ("finetune_multiple_choice", name, "empty")
        for name in ("train_file", "eval_file", "predict_file")
    ),
    ("finetune_squad", "max_answer_length", _HUGE),  # no cap on an answer's length
    ("finetune_squad", "n_best_size", _HUGE),  # every candidate
    ("finetune_squad", "null_score_diff_threshold", "-1"),  # any real number is a threshold
    # --checkpoint is for --mode=eval/predict; the base trains (train_and_eval).
    *(
        (command, "checkpoint", label)
        for command in FINETUNE_COMMANDS
        for label in ("empty", "missing", "directory", "wrong format")
    ),
    ("export", "vocab_file", "empty"),  # the model dir's
    ("sweep", "entry_flagfile", "empty"),  # none
    ("sweep", "log_tail_lines", "0"),  # no log lines
    # A dry run (the base: no runs started) leaves the pass-through flags to the runs: a
    # real sweep stops a model x task at its first run's exit status 2.
    ("sweep", "entry_flagfile", "wrong format"),
    ("sweep", "entry_flags", "unknown flag"),
    ("sweep", "glue_flags", "unknown flag"),
    ("sweep", "squad_flags", "unknown flag"),
    # Shared flags tried in the first command that has them (whichever fine-tuning
    # command leads).
    *(
        (command, name, label)
        for command in FINETUNE_COMMANDS + ("extract_features",)
        for name, label in (
            ("run_dir", "empty"),  # the working directory
            ("run_dir", "under a file"),  # the base's paths are absolute
            ("tpu", "empty"),  # no TPU strategy asked for: unused
            ("tpu", "word"),
        )
    ),
    *(
        (command, name, label)
        for command in FINETUNE_COMMANDS
        for name, label in (
            ("warmup_steps", "0"),  # no warmup
            # Past the run's steps: shortened to them with a warning (flagfiles carry the
            # paper's warmup, a short --max_train_steps run keeps its shape).
            ("warmup_steps", _HUGE),
            *((name, _HUGE) for name in _NEVER_REACHED),
            *((name, "empty") for name in ("init_checkpoint", "cache_dir")),
        )
    ),
    *(  # windows advance by their room
        (command, "doc_stride", "beyond the window")
        for command in ("finetune_squad", "finetune_tagging")
    ),
    ("create_pretraining_data", "beam_runner", "word"),  # --runner=local: unused
    ("create_pretraining_data", "builtin_max_bytes", _HUGE),  # all of it
    ("create_pretraining_data", "random_seed", "0"),  # a seed
    ("build_vocab", "max_lines", _HUGE),  # all of them
    ("build_vocab", "min_count", _HUGE),  # only the characters: every word is rarer
    ("summary", "config", "empty"),  # unset: the base's --preset
    ("summary", "write_configs", "empty"),  # unset: summarise
    ("builtin_corpus", "max_bytes", _HUGE),  # all of it
    ("builtin_corpus", "max_documents", _HUGE),
}


@dataclasses.dataclass(frozen=True)
class Flag:
  """One of a command's own flags, as its --helpxml describes it."""

  name: str
  module: str  # the file or module that defines it
  type: str  # absl's: int, float, bool, string, string enum, comma separated list ..., multi string
  default: Optional[str]  # None: the flag has no default
  enum_values: Tuple[str, ...] = ()


@dataclasses.dataclass
class Case:
  """One run: the base command line of `command` with `args` put after it (they win)."""

  command: str
  flag: str  # the flag (or file) the error must name
  label: str  # what is bad about the value
  args: Tuple[str, ...]
  subject: str = ""  # also accepted as naming the culprit (a file path)


@dataclasses.dataclass
class Outcome:
  command: str
  flag: str
  label: str
  args: Tuple[str, ...]
  outcome: str
  exit_code: Optional[int]
  seconds: float
  last_line: str


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

  def _run_once(self, name: str, module: str, args: Sequence[str], done: str) -> str:
    target = self.path(name)
    if not os.path.exists(done):
      result = _run_command(module, args, self.timeout * 5, memory_limit_mb=0)
      if result[0] != 0:
        raise RuntimeError(f"fixture {name}: {module} {shlex.join(args)} failed:\n{result[1]}")
    return target

  @property
  def records(self) -> str:
    """A glob of tiny pretraining records (max_seq_length 32, 5 predictions)."""
    output = self.path("records", "train.tfrecord")
    self._run_once(
        "records",
        "tools.create_pretraining_data",
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
        "tools.make_sample_tasks",
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


# -- the flags and their bad values ------------------------------------------------------


def own_flags(module: str) -> List[Flag]:
  """The flags `module` defines itself (this package's and tools'), from its --helpxml."""
  code, _, stdout = _run_command(module, ["--helpxml"], 120.0, memory_limit_mb=0)
  if "<?xml" not in stdout:  # absl's --helpxml exits with status 1 after printing
    raise RuntimeError(f"{module} --helpxml failed with status {code}")
  root = ElementTree.fromstring(stdout[stdout.index("<?xml") :])
  own = []
  for element in root.findall("flag"):
    file = element.findtext("file") or ""
    if (
        file.startswith(("recurrent_bert", "tools"))
        or "/recurrent_bert/" in file
        or ("/tools/" in file)
    ):
      own.append(
          Flag(
              name=element.findtext("name"),
              module=file,
              type=element.findtext("type") or "",
              default=_default(element),
              enum_values=tuple(e.text for e in element.findall("enum_value")),
          )
      )
  return sorted(own, key=lambda flag: flag.name)


def _default(element) -> Optional[str]:
  # --helpxml shows a None default as an empty <default> with <current>None</current>.
  default = element.findtext("default") or ""
  return None if not default and element.findtext("current") == "None" else default


def _is_path(command: str, flag: Flag) -> bool:
  return flag.name in OUTPUT_FLAGS or any(word in flag.name for word in _PATH_WORDS)


def _is_output(command: str, flag: Flag) -> bool:
  return flag.name in OUTPUT_FLAGS and flag.name not in INPUT_FLAGS_BY_COMMAND.get(command, ())


def bad_values(command: str, flag: Flag, workspace: Workspace) -> List[Tuple[str, str]]:
  """(label, value) pairs of bad values for `flag`, its default left out."""
  kind = flag.type
  if kind == "bool":
    values = [("not a boolean", "maybe")]
  elif kind == "int":
    values = [("not a number", "x1"), ("0", "0"), ("-1", "-1")]
    if any(word in flag.name for word in _SIZE_WORDS):
      values.append((_HUGE, _HUGE))
  elif kind == "float":
    values = [("not a number", "x1"), ("-1", "-1"), ("nan", "nan")]
  elif kind.endswith("enum"):
    values = [("unknown", "no_such_value")]
  elif kind.startswith("multi"):
    values = [("unknown flag", "--no_such_flag=1")]
  elif _is_output(command, flag):
    values = [("empty", ""), ("under a file", workspace.under_a_file)]
  elif _is_path(command, flag):
    wrong = workspace.junk
    if "vocab" in flag.name:
      wrong = workspace.vocab_without_unk
    elif "config" in flag.name and "flagfile" not in flag.name:
      wrong = workspace.config_wrong_type
    values = [
        ("empty", ""),
        ("missing", workspace.missing),
        ("directory", workspace.directory),
        ("wrong format", wrong),
    ]
  else:
    values = [("empty", ""), ("word", "no_such_thing")]
  return [(label, value) for label, value in values if value != flag.default]


def hand_cases(command: str, workspace: Workspace) -> List[Case]:
  """Bad inputs no flag type implies."""
  no_unk = ("vocab_file", "without [UNK]", (f"--vocab_file={workspace.vocab_without_unk}",))
  no_tpu = (
      "distribution_strategy",
      "tpu without a TPU",
      ("--distribution_strategy=tpu", "--tpu=no-such-tpu"),
  )
  if command == "pretrain":
    cases = [
        ("vocab_size", "0", ("--vocab_size=0",)),
        ("vocab_size", "smaller than the vocabulary", ("--vocab_size=10",)),
        no_unk,
        ("max_seq_length", "not the records'", ("--max_seq_length=64",)),
        (
            "mode",
            "eval without a checkpoint",
            ("--mode=eval", "--eval_input_files=" + workspace.records),
        ),
        no_tpu,
    ]
  elif command == "finetune_glue":
    cases = [no_unk, ("task", "unknown", ("--task=no_such_task",)), no_tpu]
  elif command == "finetune_squad":
    cases = [no_unk, ("doc_stride", "beyond the window", ("--doc_stride=1000",)), no_tpu]
  elif command == "finetune_tagging":
    cases = [
        no_unk,
        ("max_seq_length", "2", ("--max_seq_length=2",)),
        ("doc_stride", "0", ("--doc_stride=0",)),
        ("doc_stride", "beyond the window", ("--doc_stride=1000",)),
        # Refused at a file's first line the value does not fit, which the error names
        # (file:line) like every case below that ends with the files' folder.
        ("tag_column", "beyond the columns", ("--tag_column=7",), workspace.conll),
        ("tag_column", "the word's", ("--tag_column=0",)),
        ("label_list", "without O", ("--label_list=B-PER,I-PER,B-LOC,I-LOC",), workspace.conll),
        ("label_list", "a tag twice", ("--label_list=O,B-PER,O",)),
        (
            "label_list",
            "without the files' tags",
            ("--label_list=O,B-PER,I-PER",),
            workspace.conll,
        ),
        ("file_format", "word_tag on CoNLL", ("--file_format=word_tag",), workspace.conll),
        ("file_format", "unknown", ("--file_format=x",)),
        ("train_file", "SWAG CSV", (f"--train_file={os.path.join(workspace.swag, 'train.csv')}",)),
        ("eval_file", "binary junk", (f"--eval_file={workspace.junk}",)),
        ("mode", "eval without a checkpoint", ("--mode=eval",)),
        no_tpu,
    ]
  elif command == "finetune_multiple_choice":
    cases = [
        no_unk,
        ("max_seq_length", "2", ("--max_seq_length=2",)),
        ("data_dir", "CoNLL files", (f"--data_dir={workspace.conll}",)),
        ("data_dir", "an empty folder", (f"--data_dir={workspace.directory}",)),
        ("task", "jsonl", ("--task=jsonl",)),
        ("task", "hellaswag without --tfds", ("--task=hellaswag",)),
        (
            "train_file",
            "SWAG CSV as JSONL",
            (
                f"--train_file={os.path.join(workspace.swag, 'train.csv')}",
                "--task=jsonl",
                "--data_dir=",
            ),
        ),
        ("mode", "eval without a checkpoint", ("--mode=eval",)),
    ]
  elif command == "extract_features":
    cases = [
        ("layers", "99", ("--layers=99",)),
        ("layers", "-1,-1", ("--layers=-1,-1",)),
        ("layers", "-99", ("--layers=-99",)),
        ("layers", "not a number", ("--layers=-1,x",)),
        ("num_shards", "0", ("--num_shards=0",)),
        ("num_shards", "2 for jsonl", ("--num_shards=2",)),
        ("max_seq_length", "2", ("--max_seq_length=2",)),
        ("input_file", "binary junk", (f"--input_file={workspace.junk}",)),
        ("input_file", "empty file", (f"--input_file={workspace.empty_file}",)),
        (
            "init_checkpoint",
            "not a model",
            (f"--init_checkpoint={os.path.dirname(workspace.records)}",),
        ),
        no_unk,
    ]
  elif command == "tokenize_text":
    cases = [no_unk, ("input_file", "binary junk", (f"--input_file={workspace.junk}",))]
  elif command == "create_pretraining_data":
    cases = [no_unk, ("input_files", "binary junk", (f"--input_files={workspace.junk}",))]
  elif command == "export":
    cases = [("model_dir", "not a model", (f"--model_dir={os.path.dirname(workspace.records)}",))]
  elif command == "summary":
    cases = [("config", "wrong type", (f"--config={workspace.config_wrong_type}",))]
  else:
    cases = []
  # A case may end with the path its error must name, if not its first argument's.
  return [
      Case(command, flag, label, args, subject=subject[0] if subject else _subject(args))
      for flag, label, args, *subject in cases
  ]


def _subject(args: Sequence[str]) -> str:
  value = args[0].partition("=")[2]
  return value if os.path.isabs(value) else ""


def flag_cases(command: str, flag_list: Sequence[Flag], workspace: Workspace) -> List[Case]:
  cases = []
  for flag in flag_list:
    for label, value in bad_values(command, flag, workspace):
      subject = value if os.path.isabs(value) else ""
      cases.append(Case(command, flag.name, label, (f"--{flag.name}={value}",), subject))
  return cases


# -- running and classifying ------------------------------------------------------------


_live = set()  # the runs' processes, killed if the campaign is stopped


def _limit_memory(megabytes: int):
  def limit():
    os.setsid()  # its own process group: a timeout ends its workers too
    if megabytes:
      size = megabytes * 1024 * 1024
      resource.setrlimit(resource.RLIMIT_AS, (size, size))

  return limit


def _run_command(
    module: str,
    args: Sequence[str],
    timeout: float,
    memory_limit_mb: int,
    cwd: Optional[str] = None,
) -> Tuple[Optional[int], str, str]:
  """Runs `python -m module args` from the repository root.

  Args:
    module: the module run with `python -m`.
    args: its arguments.
    timeout: seconds before it is killed.
    memory_limit_mb: its address-space cap (0: none).
    cwd: its working directory (default the repository root); a run's is its scratch
      folder, so an empty path flag writes there, not into the checkout.

  Returns:
    (exit code or None on timeout, stderr, stdout).
  """
  # The package from this checkout, whatever the working directory.
  python_path = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
  env = dict(os.environ, PYTHONPATH=python_path, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
  process = subprocess.Popen(
      jobs.python_module(module, *args),
      cwd=cwd or REPO,
      env=env,
      stdin=subprocess.DEVNULL,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      errors="replace",
      preexec_fn=_limit_memory(memory_limit_mb),
  )
  _live.add(process)
  try:
    stdout, stderr = process.communicate(timeout=timeout)
    return process.returncode, stderr, stdout
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, signal.SIGKILL)
    stdout, stderr = process.communicate()
    return None, stderr, stdout
  finally:
    _live.discard(process)


def _stop_live_runs() -> None:
  """Kills the runs still going (Ctrl-C, SIGTERM): each is a process group of its own."""
  for process in list(_live):
    with contextlib.suppress(ProcessLookupError):
      os.killpg(process.pid, signal.SIGKILL)


def last_line(stderr: str) -> str:
  lines = [line.strip() for line in stderr.splitlines() if line.strip()]
  return lines[-1] if lines else ""


def classify(case: Case, code: Optional[int], stderr: str) -> str:
  """The outcome of one run (see the module docstring)."""
  if "Traceback (most recent call last)" in stderr:
    return "traceback"
  if code is None or code == 0:
    if (case.command, case.flag, case.label) in FINE:
      return "fine"
    return "hang" if code is None else "accepted"
  line = last_line(stderr)
  named = case.flag in line or (case.subject and case.subject in line)
  return "clear" if code == 2 and line.startswith("error:") and named else "unclear"


def run_case(
    case: Case, args: Sequence[str], timeout: float, memory_limit_mb: int, cwd: str
) -> Outcome:
  """Runs the command line `args` of `case` and classifies how it ended."""
  timeout *= SLOW_COMMANDS.get(case.command, 1)
  start = time.time()
  code, stderr, stdout = _run_command(
      COMMANDS[case.command], args, timeout, memory_limit_mb, cwd=cwd
  )
  return Outcome(
      command=case.command,
      flag=case.flag,
      label=case.label,
      args=tuple(case.args),
      outcome=classify(case, code, stderr),
      exit_code=code,
      seconds=round(time.time() - start, 1),
      last_line=last_line(stdout if code == 0 else stderr)[:300],
  )


def tally(outcomes: Sequence[Outcome]) -> Dict[str, Dict[str, int]]:
  """{command: {outcome: count}} with every outcome listed."""
  table: Dict[str, Dict[str, int]] = {}
  for outcome in outcomes:
    row = table.setdefault(outcome.command, dict.fromkeys(OUTCOMES, 0))
    row[outcome.outcome] += 1
  return table


def format_table(outcomes: Sequence[Outcome]) -> str:
  """The tally per command, then every run that is not clear or fine."""
  counts = tally(outcomes)
  width = max([len("command")] + [len(c) for c in counts])
  lines = [f"{'command':{width}s} " + " ".join(f"{o:>9s}" for o in OUTCOMES) + "      runs"]
  for command, row in counts.items():
    lines.append(
        f"{command:{width}s} "
        + " ".join(f"{row[o]:9d}" for o in OUTCOMES)
        + f" {sum(row.values()):9d}"
    )
  problems = [o for o in outcomes if o.outcome not in ("clear", "fine")]
  if problems:
    lines.append("")
    for o in problems:
      lines.append(
          f"{o.outcome:9s} {o.command} {shlex.join(o.args)} ({o.label}): {o.last_line or '-'}"
      )
  return "\n".join(lines)


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}")
  work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix="bad_input_campaign_")
  workspace = Workspace(work_dir, FLAGS.timeout)
  print(f"fixtures and run outputs under {workspace.root}", flush=True)
  cases: List[Case] = []
  tried = set()  # (defining module, flag name)
  for command in FLAGS.commands:
    flag_list = own_flags(COMMANDS[command])
    if not FLAGS.repeat_shared_flags:
      flag_list = [f for f in flag_list if (f.module, f.name) not in tried]
      tried.update((f.module, f.name) for f in flag_list)
    if FLAGS.flags:
      unknown = sorted(set(FLAGS.flags) - {f.name for f in flag_list} - {"distribution_strategy"})
      flag_list = [f for f in flag_list if f.name in FLAGS.flags]
      if unknown and len(FLAGS.commands) == 1:
        cli.fail(f"--flags: {command} has no flag {', '.join(unknown)}")
    cases += flag_cases(command, flag_list, workspace)
    if FLAGS.hand_cases:
      cases += [
          c for c in hand_cases(command, workspace) if not FLAGS.flags or c.flag in FLAGS.flags
      ]
  # Fixtures are made here, before any run starts: the runs may go side by side.
  scratches = [workspace.scratch(case.command) for case in cases]
  command_lines = [
      base_args(case.command, workspace, scratch) + list(case.args)
      for case, scratch in zip(cases, scratches)
  ]
  # SIGTERM as Ctrl-C: either stops the runs going (their own process groups) on the way out.
  signal.signal(signal.SIGTERM, signal.default_int_handler)
  try:
    outcomes = _run_all(cases, command_lines, scratches)
  finally:
    _stop_live_runs()
  print()
  print(format_table(outcomes))
  if FLAGS.output_json:
    print(f"wrote {FLAGS.output_json}")


def _run_all(
    cases: Sequence[Case], command_lines: Sequence[Sequence[str]], scratches: Sequence[str]
) -> List[Outcome]:
  """Runs every case, --parallel at a time, with a progress line as each finishes."""
  eta = jobs.Eta(prior_seconds=20.0)
  estimate = 5.0  # seconds a run is expected to take, before any has finished
  outcomes: List[Outcome] = []
  start = time.time()
  with futures.ThreadPoolExecutor(FLAGS.parallel) as pool:
    running = [
        pool.submit(run_case, case, args, FLAGS.timeout, FLAGS.memory_limit_mb, scratch)
        for case, args, scratch in zip(cases, command_lines, scratches)
    ]
    try:
      for future in futures.as_completed(running):
        outcome = future.result()
        outcomes.append(outcome)
        eta.finished(estimate, outcome.seconds)
        elapsed = time.time() - start
        left = eta.seconds_left([estimate] * (len(cases) - len(outcomes)), FLAGS.parallel)
        print(
            f"[{len(outcomes)}/{len(cases)}] {outcome.outcome:9s} {outcome.command} "
            f"{shlex.join(outcome.args)} ({outcome.seconds:.1f}s; "
            f"{len(outcomes) / max(elapsed, 1e-9) * 60:.1f} runs/min, "
            f"ETA {progress.format_duration(left)})",
            flush=True,
        )
        if FLAGS.output_json:  # as it goes: an interrupted campaign keeps what it measured
          write_json(FLAGS.output_json, outcomes)
    except BaseException:
      pool.shutdown(wait=False, cancel_futures=True)  # no new run starts
      _stop_live_runs()
      raise
  return outcomes


def write_json(path: str, outcomes: Sequence[Outcome]) -> None:
  """The tally and every run (in the order they finished), written atomically."""
  with io_utils.atomic_write(path, "w") as f:
    json.dump(
        {"tally": tally(outcomes), "runs": [dataclasses.asdict(o) for o in outcomes]},
        f,
        indent=1,
    )


if __name__ == "__main__":
  cli.run(main)
