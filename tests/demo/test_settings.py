"""The demo's settings: list flags that take ranges of seeds."""

import pytest

from recurrent_bert.demo import settings


def test_seed_flags_take_ranges():
  assert settings.expand_number("3-6", int) == [3, 4, 5, 6]
  assert settings.expand_number("7", int) == [7]
  assert settings.expand_number("1e-3", float) == [1e-3]
  # A negative seed is one number (refused later, naming the flag); a range must rise.
  assert settings.expand_number("-1", int) == [-1]
  with pytest.raises(ValueError):
    settings.expand_number("6-3", int)
