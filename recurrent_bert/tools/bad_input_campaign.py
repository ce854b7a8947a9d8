r"""Bad-input campaign: every command run with bad values of its own flags, outcomes tallied.

  python -m recurrent_bert.tools.bad_input_campaign --output_json=/tmp/campaign.json
  python -m recurrent_bert.tools.bad_input_campaign --commands=pretrain,tokenize_text \
      --flags=vocab_file

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
import dataclasses
import json
import shlex
import signal
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

from absl import flags

from recurrent_bert import cli
from recurrent_bert import io_utils
from recurrent_bert import jobs
from recurrent_bert import progress
from recurrent_bert.tools.bad_input_cases import FINE
from recurrent_bert.tools.bad_input_cases import Case
from recurrent_bert.tools.bad_input_cases import flag_cases
from recurrent_bert.tools.bad_input_cases import hand_cases
from recurrent_bert.tools.bad_input_cases import own_flags
from recurrent_bert.tools.bad_input_fixtures import Workspace
from recurrent_bert.tools.bad_input_fixtures import base_args
from recurrent_bert.tools.bad_input_process import COMMANDS
from recurrent_bert.tools.bad_input_process import SLOW_COMMANDS
from recurrent_bert.tools.bad_input_process import run_command
from recurrent_bert.tools.bad_input_process import stop_live_runs

FLAGS = flags.FLAGS
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


# -- running and classifying ------------------------------------------------------------


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
  code, stderr, stdout = run_command(
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
    stop_live_runs()
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
      stop_live_runs()
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
