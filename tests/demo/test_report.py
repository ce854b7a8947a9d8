"""recurrent_bert.demo.report: the pieces of the report that are pure functions."""

import pytest

from recurrent_bert.demo import figures
from recurrent_bert.demo import report


def test_report_helpers():
  assert figures.smooth([1.0, 3.0, 5.0, 7.0], 3) == [2.0, 3.0, 5.0, 6.0]
  records = {s: {"mlm_loss": float(s)} for s in range(1, 101)}
  assert report.last_n(100) == 10
  assert report.final_loss(records) == pytest.approx(95.5)
  assert report.mean_std([0.5, 0.7]) == pytest.approx((0.6, 0.1414213), rel=1e-5)
  # The report's accuracy cells: mean ± sample std over seeds; one seed, its value alone.
  assert report._pm([0.5, 0.7]) == "0.600 ± 0.141"
  assert report._pm([0.5]) == "0.500"
  assert report.display_name("trans_blstm_small_2_mini") == "TRANS-BLSTM-SMALL-2"
