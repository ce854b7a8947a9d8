"""What progress lines share: durations written for people.

A base module (no TensorFlow, no Keras), so the training loop, the subprocess pool, the
demo and the tools print elapsed times and ETAs the same way.
"""

import math
from typing import Optional


def format_duration(seconds: Optional[float]) -> str:
  """A duration for progress lines: 7 -> '7s', 73 -> '1m13s', 4000 -> '1h06m40s'.

  Args:
    seconds: the duration; None, NaN or infinity when unknown.

  Returns:
    The text, '?' for an unknown duration; negative durations count as 0.
  """
  if seconds is None or not math.isfinite(seconds):
    return "?"
  seconds = int(round(max(0.0, seconds)))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  if hours:
    return f"{hours}h{minutes:02d}m{secs:02d}s"
  return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
