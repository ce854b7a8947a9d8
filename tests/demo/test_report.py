"""recurrent_bert.demo.report: the pieces of the report that are pure functions."""

import pytest

from recurrent_bert.demo import figures
from recurrent_bert.demo import run_results


def test_report_helpers():
  assert figures.smooth([1.0, 3.0, 5.0, 7.0], 3) == [2.0, 3.0, 5.0, 6.0]
  records = {s: {"mlm_loss": float(s)} for s in range(1, 101)}
  assert run_results.last_n(100) == 10
  assert run_results.final_loss(records) == pytest.approx(95.5)
  assert run_results.mean_std([0.5, 0.7]) == pytest.approx((0.6, 0.1414213), rel=1e-5)
  # The report's accuracy cells: mean ± sample std over seeds; one seed, its value alone.
  assert run_results.plus_minus([0.5, 0.7]) == "0.600 ± 0.141"
  assert run_results.plus_minus([0.5]) == "0.500"
  assert run_results.display_name("trans_blstm_small_2_mini") == "TRANS-BLSTM-SMALL-2"


def test_figure_labels_name_each_claims_baseline():
  rows = [
      {
          "preset": f"{family}_tiny",
          "model": run_results.display_name(f"{family}_tiny"),
          "family": family,
      }
      for family in ("bert", "bert_rab", "trans_blstm_small_2", "swishrnn")
  ]
  assert figures.model_labels(rows) == {
      "bert_tiny": "BERT-orig (bert_tiny), baseline of TRANS-BLSTM-SMALL-2",
      "bert_rab_tiny": "BERT-rab (bert_rab_tiny), baseline of SwishRNN-BERT",
      "trans_blstm_small_2_tiny": "TRANS-BLSTM-SMALL-2 (trans_blstm_small_2_tiny)",
      "swishrnn_tiny": "SwishRNN-BERT (swishrnn_tiny)",
  }
  # Without BERT-rab, SwishRNN-BERT's claims fall back on BERT-orig.
  assert figures.model_labels([rows[0], rows[3]])["bert_tiny"] == (
      "BERT-orig (bert_tiny), baseline of SwishRNN-BERT"
  )
