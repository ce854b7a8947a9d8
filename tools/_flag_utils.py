"""Small helpers shared by the tools' entry points (flag checks, error exits)."""

from absl import logging

from recurrent_bert import cli

from recurrent_bert.io_utils import InputError


fail = cli.fail


def run_checked(function, *args, **kwargs):
  """Runs function; an InputError or ValueError becomes a one-line error and exit 2."""
  try:
    return function(*args, **kwargs)
  except (InputError, ValueError) as e:
    logging.debug("failed", exc_info=True)
    fail(str(e))
