"""Issue 15's property on the SWAG CSV reader: a valid file, one mutation, then either an
InputError naming file:line or exactly the examples the mutated file holds.

Valid files are written here with the official header and the csv module's quoting;
the expected examples follow BERT §4.4 as SWAG's README lays the columns out (context =
sent1, ending c = sent2 + " " + ending{c}, id = the unnamed first column), not the reader.
"""

import csv
import io

from hypothesis import given
from hypothesis import strategies as st

from recurrent_bert.tasks.multiple_choice import swag
from tests.support import mutations

HEADER = [
    "",
    "video-id",
    "fold-ind",
    "startphrase",
    "sent1",
    "sent2",
    "gold-source",
    "ending0",
    "ending1",
    "ending2",
    "ending3",
    "label",
]
# Quotes and commas exercise the CSV quoting; no leading or trailing space (an all-space
# text is refused as empty).
TEXTS = st.text(alphabet='abcxyz ,"é東', min_size=1, max_size=8).filter(
    lambda t: t.strip() == t and t
)
# Labels the reader must refuse: not an integer 0..3.
BAD_LABELS = ("4", "-1", "10", "a", "0.0", "١", *mutations.BAD_NUMBERS)


def csv_line(fields):
  out = io.StringIO()
  csv.writer(out, lineterminator="\n").writerow(fields)
  return out.getvalue().encode("utf-8")


@st.composite
def swag_rows(draw):
  """2-4 rows of the official columns, ids 0, 1, ..."""
  rows = []
  for i in range(draw(st.integers(2, 4))):
    sent1, sent2 = draw(TEXTS), draw(TEXTS)
    endings = [draw(TEXTS) for _ in range(4)]
    label = str(draw(st.integers(0, 3)))
    rows.append([str(i), "v", str(i), f"{sent1} {sent2}", sent1, sent2, "gold", *endings, label])
  return rows


def expected_example(row):
  return (row[0], row[4], tuple(f"{row[5]} {e}" for e in row[7:11]), int(row[11]))


def examples(data):
  return [(e.guid, e.context, e.endings, e.label) for e in data.examples]


MUTATIONS = [
    "bad_label",
    "extra_column",
    "missing_column",
    "duplicate_line",
    "repeated_header",
    "empty_ending",
    "non_utf8",
    "odd_character",
    "newline_in_field",
    "blank_line",
    "crlf",
    "no_final_newline",
]


@mutations.fuzz_settings()
@given(swag_rows(), st.sampled_from(MUTATIONS), st.data())
def test_property_swag_csv_mutations(tmp_path, rows, mutation, data):
  k = data.draw(st.integers(0, len(rows) - 1), label="row")
  expected = [expected_example(row) for row in rows]
  content = b"".join(csv_line(row) for row in [HEADER, *rows])
  line = k + 2  # the 1-based line of row k (one line per row: no newline in the texts)
  refused_at = None
  row = list(rows[k])
  if mutation == "bad_label":
    row[11] = data.draw(st.sampled_from(BAD_LABELS))
    content = mutations.replace_line(content, line - 1, csv_line(row))
    refused_at = line
  elif mutation == "extra_column":
    content = mutations.replace_line(content, line - 1, csv_line(row + ["x"]))
    refused_at = line
  elif mutation == "missing_column":
    content = mutations.replace_line(content, line - 1, csv_line(row[:-1]))
    refused_at = line
  elif mutation == "duplicate_line":
    content = mutations.insert_line(content, line, csv_line(row))
    refused_at = line + 1  # its id repeats
  elif mutation == "repeated_header":
    content = mutations.insert_line(content, line - 1, csv_line(HEADER))
    refused_at = line
  elif mutation == "empty_ending":
    row[7 + data.draw(st.integers(0, 3))] = data.draw(st.sampled_from(["", " ", "\t"]))
    content = mutations.replace_line(content, line - 1, csv_line(row))
    refused_at = line
  elif mutation == "non_utf8":
    bad = data.draw(st.sampled_from(mutations.NON_UTF8))
    raw = csv_line(row)
    cut = raw.index(b",gold,") + 1  # inside the gold-source field
    content = mutations.replace_line(content, line - 1, raw[:cut] + bad + raw[cut:])
    refused_at = line
  elif mutation == "odd_character":
    odd = data.draw(st.sampled_from(mutations.ODD_CHARACTERS))
    row[4] = row[4][:1] + odd + row[4][1:]
    content = mutations.replace_line(content, line - 1, csv_line(row))
    expected[k] = expected_example(row)
  elif mutation == "newline_in_field":
    # A quoted field may hold a newline: still one record, the lines after it shift.
    row[4] = row[4][:1] + "\n" + row[4][1:]
    content = mutations.replace_line(content, line - 1, csv_line(row))
    expected[k] = expected_example(row)
  elif mutation == "blank_line":
    content = mutations.insert_line(content, line - 1, b"")
  elif mutation == "crlf":
    content = mutations.to_crlf(content)
  elif mutation == "no_final_newline":
    content = content.rstrip(b"\n")
  path = tmp_path / "train.csv"
  path.write_bytes(content)
  mutations.check_outcome(
      "swag csv",
      lambda: examples(swag.read_swag_csv(str(path), "train")),
      str(path),
      expected=None if refused_at else expected,
      line=refused_at,
  )
