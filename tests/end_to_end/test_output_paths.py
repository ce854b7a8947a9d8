"""Output paths the user got wrong are one InputError naming the path (issue 15)."""

import pytest

from recurrent_bert import io_utils
from recurrent_bert.errors import InputError


def test_an_output_under_a_file_or_empty_is_refused_naming_it(tmp_path):
  a_file = tmp_path / "taken"
  a_file.write_text("x")
  target = str(a_file / "out.txt")
  with pytest.raises(InputError, match=r"taken/out.txt: cannot write here"):
    io_utils.atomic_write_text(target, "data")
  with pytest.raises(InputError, match="empty output path"):
    io_utils.atomic_write_text("", "data")
  assert a_file.read_text() == "x"  # nothing lost


def test_a_good_output_is_written_whole(tmp_path):
  target = tmp_path / "new" / "out.txt"
  io_utils.atomic_write_text(str(target), "data")
  assert target.read_text() == "data"
  assert [p.name for p in target.parent.iterdir()] == ["out.txt"]  # no temporary left
