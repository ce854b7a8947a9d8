import pytest

from tests.backends.support import BACKEND


def pytest_collection_modifyitems(items):
  """Tagged with the backend, so a failure names which session it came from."""
  for item in items:
    item.add_marker(pytest.mark.backend(BACKEND))
