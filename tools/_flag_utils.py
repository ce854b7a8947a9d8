"""Small helpers shared by the tools' entry points (flag checks, error exits)."""

import sys

from absl import logging

from recurrent_bert.data.io_utils import InputError


def fail(message: str) -> None:
  """Prints `message` to stderr and exits with status 2 (bad input, no work done)."""
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


def run_checked(function, *args, **kwargs):
  """Runs function; an InputError or ValueError becomes a one-line error and exit 2."""
  try:
    return function(*args, **kwargs)
  except (InputError, ValueError) as e:
    logging.debug("failed", exc_info=True)
    fail(str(e))
