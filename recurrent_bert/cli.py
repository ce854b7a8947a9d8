"""What every command shares on the command line: the error exit and a readable --help.

`fail(message)` is the one exit for bad user input (one line on stderr, status 2);
`run_checked(function, ...)` routes a library's ValueError (errors.InputError included)
there; `run` does the same for an InputError raised anywhere below a command's main, so a
command never shows a traceback for input the user must fix (errors.py says how a message
names the place).

`run(main, groups)` is `absl.app.run` with a `--help` that lists the command's own flags
(those defined by this package and the command itself) in the groups the
command names (data, model, optimisation, execution, output ...), then any of its own
flags no group names under "other", so nothing a user must set is hidden. `--helpfull`
stays absl's: every flag of every loaded module, TensorFlow's included. Ctrl-C ends a
command with one line and exit status 130: the training loop's own line
(`training.loop.TrainingInterrupted`: what was saved, how to resume) or, outside
training, that nothing was saved.
"""

import contextlib
import os
import sys
import textwrap
from typing import Callable, Iterator, Mapping, Optional, Sequence, Type, TypeVar

from absl import app
from absl import flags
from absl import logging

from recurrent_bert.errors import InputError

FLAGS = flags.FLAGS
HELP_ARGUMENTS = ("--help", "-help", "-?", "--helpshort", "-helpshort")
_OWN_MODULE_PREFIXES = ("recurrent_bert",)
T = TypeVar("T")


def fail(message: str) -> None:
  """Bad input: one line on stderr, exit status 2, no work done."""
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


@contextlib.contextmanager
def ends_on(error_type: Type[Exception], status: int) -> Iterator[None]:
  """Inside: an `error_type` ends the command with `error: <message>` and `status`.

  For failures of a run, not of its input (e.g. training.loop.NonFiniteLossError, exit
  1): logged too, so the run's log keeps the reason; no traceback.
  """
  try:
    yield
  except error_type as e:
    logging.error("%s", e)
    print(f"error: {e}", file=sys.stderr)
    sys.exit(status)


def run_checked(function: Callable[..., T], *args, **kwargs) -> T:
  """Calls `function`; the bad input it reports as a ValueError becomes `fail`.

  Args:
    function: a library call that raises ValueError (InputError included) with a
      message naming the culprit.
    *args: its positional arguments.
    **kwargs: its keyword arguments.

  Returns:
    What `function` returns.
  """
  try:
    return function(*args, **kwargs)
  except ValueError as e:
    logging.debug("failed", exc_info=True)
    fail(str(e))


def _own_flag_names() -> list:
  main_path = sys.argv[0]
  names = []
  for module, module_flags in FLAGS.flags_by_module_dict().items():
    if (
        module == main_path
        or module.startswith(_OWN_MODULE_PREFIXES)
        or "/recurrent_bert/" in module
    ):
      names += [flag.name for flag in module_flags]
  return sorted(set(names))


def _describe(flag) -> str:
  name = f"--[no]{flag.name}" if flag.boolean else f"--{flag.name}"
  default = flag.default_as_str if flag.default is not None else "none"
  text = f"{flag.help} (default: {default})"
  return (
      "  "
      + name
      + "\n"
      + textwrap.fill(text, width=88, initial_indent="      ", subsequent_indent="      ")
  )


def grouped_help(groups: Mapping[str, Sequence[str]]) -> str:
  """The command's own flags, group by group (names not defined are skipped)."""
  own = _own_flag_names()
  listed, sections = set(), []
  for title, names in list(groups.items()) + [("other" if groups else "flags", own)]:
    names = [n for n in names if n in FLAGS and n in own and n not in listed]
    if names:
      listed.update(names)
      sections.append(f"{title}:\n" + "\n".join(_describe(FLAGS[n]) for n in names))
  return "\n\n".join(sections)


def run(main, groups: Optional[Mapping[str, Sequence[str]]] = None) -> None:
  """`app.run(main)` with the grouped --help of the module docstring."""

  def parse(argv):
    if any(arg.split("=")[0] in HELP_ARGUMENTS for arg in argv[1:]):
      doc = sys.modules["__main__"].__doc__ or ""
      print(
          doc.strip()
          + "\n\n"
          + grouped_help(groups or {})
          + "\n\n--helpfull lists every flag, TensorFlow's included."
      )
      sys.exit(0)
    try:
      return FLAGS(argv)
    except flags.Error as e:
      # absl's own message names the flag; one line and status 2, as for any bad input.
      fail(str(e).replace("\n", " "))

  def main_with_one_line_errors(argv):
    try:
      return main(argv)
    except InputError as e:
      logging.debug("bad input", exc_info=True)
      fail(str(e).replace("\n", " "))
    except KeyboardInterrupt as e:
      print(
          str(e)
          or "interrupted: nothing was being trained, nothing to save; run the "
          "same command again",
          file=sys.stderr,
      )
      sys.exit(130)

  app.run(main_with_one_line_errors, flags_parser=parse)


def keras_backend(supported: Sequence[str] = ("tensorflow", "jax")) -> str:
  """Keras' backend (KERAS_BACKEND) once this command can run under it.

  Fails (one line, status 2) when the backend's library is not installed or the command
  does not train under it.
  """
  try:
    import keras
  except ImportError as e:
    fail(f"KERAS_BACKEND={os.environ.get('KERAS_BACKEND')}: its library is not installed ({e})")
  backend = keras.backend.backend()
  if backend not in supported:
    fail(
        f"KERAS_BACKEND={backend}: this command trains under {' and '.join(supported)}; "
        f"set KERAS_BACKEND to one of them"
    )
  return backend
