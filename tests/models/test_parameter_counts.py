"""Parameter counts computed by the models against the papers' published sizes."""

import numpy as np
import pytest

from recurrent_bert.config import get_preset
from recurrent_bert.models import build_encoder
from recurrent_bert.models import count_parameters


def _count(preset):
  return count_parameters(get_preset(preset))[0]


def test_uninitialised_count_equals_built_model():
  model = build_encoder("trans_blstm_2_tiny")
  total, by_layer = count_parameters(model.config)
  assert total == sum(int(np.prod(w.shape)) for w in model.weights)
  assert sum(by_layer.values()) == total


# BERT paper (110M / 340M); TRANS-BLSTM paper Table 1 (TRANS-BLSTM-SMALL and TRANS-BLSTM).
PAPER_SIZES = {
    "bert_base": 110e6,
    "bert_large": 340e6,
    "trans_blstm_small_2_base": 152e6,
    "trans_blstm_small_2_large": 487e6,
    "trans_blstm_2_base": 237e6,
    "trans_blstm_2_large": 789e6,
}


@pytest.mark.parametrize("preset,paper", sorted(PAPER_SIZES.items()))
def test_matches_paper_within_two_percent(preset, paper):
  assert abs(_count(preset) - paper) / paper < 0.02


@pytest.mark.parametrize("size", ["tiny", "mini", "base", "large"])
def test_swishrnn_within_one_percent_of_bert_rab(size):
  swish, rab = _count(f"swishrnn_{size}"), _count(f"bert_rab_{size}")
  assert abs(swish - rab) / rab < 0.01


def test_bert_base_exact_count_from_its_formula():
  # google-research/bert base: embeddings, 12 blocks, pooler, written out by hand.
  V, P, S, H, F, L = 30522, 512, 2, 768, 3072, 12
  embeddings = (V + P + S) * H + 2 * H
  block = 4 * (H * H + H) + 2 * H + (H * F + F) + (F * H + H) + 2 * H
  assert _count("bert_base") == embeddings + L * block + H * H + H


@pytest.mark.slow(seconds=2)
def test_blstm_variants_add_the_lstm_weights():
  H, L = 768, 12
  lstm = lambda u: 2 * 4 * (H * u + u * u + u)  # two directions, four gates
  ffn = H * 4 * H + 4 * H + 4 * H * H + H
  projection = 2 * H * H + H
  bert = _count("bert_base")
  assert _count("trans_blstm_2_base") - bert == L * (lstm(H) + projection)
  assert _count("trans_blstm_small_2_base") - bert == L * lstm(H // 2)
  assert _count("trans_blstm_1_base") - bert == L * (lstm(H) + projection - ffn)
