"""The bad-input campaign's cases: a command's own flags, their bad values, the hand list.

`own_flags` reads a command's flags from its --helpxml; `bad_values` gives the bad values
of a flag's type (the campaign's module docstring lists them) and `hand_cases` the bad
inputs no type implies. `FINE` lists the (command, flag, value label) runs that are
legitimately accepted or run long.
"""

import dataclasses
import os
from typing import List, Optional, Sequence, Tuple
import xml.etree.ElementTree as ElementTree

from recurrent_bert.tools.bad_input_fixtures import Workspace
from recurrent_bert.tools.bad_input_process import SLOW_COMMANDS
from recurrent_bert.tools.bad_input_process import run_command

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


# -- the flags and their bad values ------------------------------------------------------


def own_flags(module: str) -> List[Flag]:
  """The flags `module` defines itself (this package's and tools'), from its --helpxml."""
  code, _, stdout = run_command(module, ["--helpxml"], 120.0, memory_limit_mb=0)
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
        ("vocab_file", "not the records' vocabulary", (f"--vocab_file={workspace.other_vocab}",)),
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
