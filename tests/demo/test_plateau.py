"""The plateau flags: the unigram plateau from records against a hand count, and the flags
of synthetic held-out curves."""

import math

import pytest
import tensorflow as tf

from recurrent_bert.demo import claims
from recurrent_bert.demo import claims_report
from recurrent_bert.demo import plateau


def _write(path, masked):
  """A TFRecord file of tf.train.Examples, one per [(masked piece, weight), ...]."""
  with tf.io.TFRecordWriter(str(path)) as writer:
    for positions in masked:
      ids = [piece for piece, _ in positions]
      weights = [weight for _, weight in positions]
      feature = {
          "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2, 3])),
          "masked_lm_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
          "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(value=weights)),
      }
      writer.write(
          tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
      )


def test_unigram_plateau_of_tiny_files_equals_a_hand_count(tmp_path):
  # Training: piece 5 masked twice, 7 once (the 0-weight padding position is no mask).
  _write(tmp_path / "train-0.tfrecord", [[(5, 1.0), (7, 1.0), (0, 0.0)], [(5, 1.0)]])
  # Held out: 5 and 7 once each in the first record; the second is past what is read.
  _write(tmp_path / "eval-0.tfrecord", [[(5, 1.0), (7, 1.0), (9, 0.0)], [(9, 1.0)]])
  got, masked = plateau.unigram_plateau(
      str(tmp_path / "train-*.tfrecord"), str(tmp_path / "eval-*.tfrecord"), eval_records=1
  )
  # Counts 5: 2, 7: 1 (3 in all); 2 distinct pieces; α = 1/2: p(5) = 2.5 / 4, p(7) = 1.5 / 4.
  # U = -(ln 0.625 + ln 0.375) / 2 = (0.470004 + 0.980829) / 2.
  assert masked == 2
  assert got == pytest.approx(0.7254166, abs=1e-6)
  # Reading both held-out records adds piece 9, never masked in training: p = 0.5 / 4.5.
  both, masked = plateau.unigram_plateau(
      str(tmp_path / "train-*.tfrecord"), str(tmp_path / "eval-*.tfrecord"), eval_records=0
  )
  expected = -(math.log(2.5 / 4.5) + math.log(1.5 / 4.5) + math.log(0.5 / 4.5)) / 3
  assert masked == 3 and both == pytest.approx(expected)


U = 6.40


def test_a_flat_run_at_the_unigram_loss_is_on_the_plateau():
  flat = {200: 6.45, 400: 6.41, 600: 6.40, 800: 6.39}
  flag = plateau.flag_run(flat, 800, U)
  assert flag.on_plateau and flag.label == plateau.ON_PLATEAU


def test_a_falling_run_is_not_on_the_plateau_but_is_still_falling():
  # 0.3 nats over the last 200 of 800 steps: 0.12 per 10% of the run.
  falling = {200: 6.5, 400: 6.2, 600: 5.9, 800: 5.6}
  flag = plateau.flag_run(falling, 800, U)
  assert not flag.on_plateau and flag.drop_per_tenth == pytest.approx(0.12)
  assert flag.label == plateau.STILL_FALLING


def test_a_settled_run_below_the_plateau_is_not_flagged():
  settled = {200: 6.5, 400: 6.0, 600: 5.82, 800: 5.80}
  assert plateau.flag_run(settled, 800, U).label == ""
  # One evaluation: no rate to judge, only the plateau.
  assert plateau.flag_run({800: 5.8}, 800, U).label == ""
  assert plateau.flag_run({800: 6.38}, 800, U).label == plateau.ON_PLATEAU
  # Above the plateau (a run that has not learned even the pieces' frequencies).
  assert plateau.flag_run({800: 6.9}, 800, U).label == plateau.ABOVE_PLATEAU


def test_flagged_runs_are_named_next_to_the_claims_verdict():
  rows = [
      {
          "model": "BERT-orig",
          "pretrain_seeds": [1, 2, 3],
          "pretrain_steps": 800,
          "eval_curves": {1: {600: 6.41, 800: 6.40}, 2: {600: 6.2, 800: 6.0}, 3: {800: 6.39}},
      },
      {
          "model": "TRANS-BLSTM-SMALL-2",
          "pretrain_seeds": [1, 2, 3],
          "pretrain_steps": 800,
          "eval_curves": {seed: {600: 5.45, 800: 5.44} for seed in (1, 2, 3)},
      },
  ]
  plateau.flag_rows(rows, U)
  assert rows[0]["plateau_flags"] == [plateau.ON_PLATEAU, plateau.STILL_FALLING, plateau.ON_PLATEAU]
  assert rows[1]["plateau_flags"] == ["", "", ""]
  assert claims.flagged_runs(rows) == (
      "BERT-orig seeds 1, 3 on the unigram plateau; BERT-orig seed 2 still falling"
  )
  # Fine-tuning starts from the first pretraining seed's encoder: only that run counts.
  first = claims.flagged_runs(rows, first_seed_only=True)
  assert first == "BERT-orig seed 1 on the unigram plateau"
  comparison = claims.compare_seeds([(1.0, [1, 2], [5.4, 5.5]), (-1.0, [1, 2], [6.4, 6.0])])
  claim = claims.Claim("src", "s", "e", comparison, -1, 1.0, "seeds", flagged="BERT-orig seed 2 x")
  assert "(flagged runs: BERT-orig seed 2 x)" in claims_report.claims_table([claim])
