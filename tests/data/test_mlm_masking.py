"""The in-graph masking function: BERT's rules, checked by counting (statistical bounds)."""

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.data import mlm_masking
from recurrent_bert.data import record_batches
from recurrent_bert.data import schema
from recurrent_bert.data.dynamic_masking import DynamicMasker
from recurrent_bert.data.dynamic_masking import MaskingConfig
from recurrent_bert.data.dynamic_masking import mask_input_ids

VOCAB_SIZE, PAD, CLS, SEP, MASK = 1000, 0, 2, 3, 4
FIRST_CONTINUATION = 900  # ids >= 900 play the role of `##` pieces here


def random_batch(rng, batch=512, length=64):
  ids = np.zeros([batch, length], np.int64)
  mask = np.zeros([batch, length], np.int64)
  for row in range(batch):
    size = rng.integers(8, length + 1)
    body = rng.integers(10, VOCAB_SIZE, size=size - 3)
    split = rng.integers(1, size - 2)
    ids[row, :size] = [CLS, *body[: split - 1], SEP, *body[split - 1 :], SEP][:size]
    ids[row, size - 1] = SEP
    mask[row, :size] = 1
  return ids, mask


# The implementations of the rules: the in-graph one (tf.data's read time), the numpy twin
# (the offline tool's workers) and the JAX reader's `BatchMasker` (numpy, with the
# vocabulary's word starts); every rule test below runs on each.
IMPLEMENTATIONS = ("graph", "numpy", "batch_masker")


def run(config, ids, mask, seed=(1, 2), implementation="graph"):
  starts = ids < FIRST_CONTINUATION
  if implementation == "batch_masker":
    masker = record_batches.BatchMasker(
        config, VOCAB_SIZE, MASK, CLS, SEP, np.arange(VOCAB_SIZE) < FIRST_CONTINUATION
    )
    batch = {"input_ids": ids.astype(np.int32), "input_mask": mask.astype(np.int32)}
    out = masker(batch, np.random.default_rng(seed))
    return {k: v for k, v in out.items() if k != "input_mask"}
  if implementation == "numpy":
    return mlm_masking.mask_batch(
        ids,
        mask,
        starts,
        np.random.default_rng(seed),
        config,
        vocab_size=VOCAB_SIZE,
        mask_id=MASK,
        cls_id=CLS,
        sep_id=SEP,
    )
  out = mask_input_ids(
      tf.constant(ids),
      tf.constant(mask),
      tf.constant(starts),
      tf.constant(seed, tf.int64),
      config,
      vocab_size=VOCAB_SIZE,
      mask_id=MASK,
      cls_id=CLS,
      sep_id=SEP,
  )
  return {k: v.numpy() for k, v in out.items()}


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_counts_positions_and_80_10_10(implementation):
  rng = np.random.default_rng(0)
  ids, mask = random_batch(rng)
  config = MaskingConfig(max_predictions_per_seq=8)
  out = run(config, ids, mask, implementation=implementation)
  replaced = {"mask": 0, "random": 0, "keep": 0}
  for row in range(len(ids)):
    size = int(mask[row].sum())
    expected = min(8, max(1, int(round(size * 0.15))))
    weights = out["masked_lm_weights"][row]
    positions = out["masked_lm_positions"][row]
    count = int(weights.sum())
    assert count == expected
    assert np.all(weights[:count] == 1) and np.all(weights[count:] == 0)
    real = positions[:count]
    assert np.all(np.diff(real) > 0)  # sorted, distinct
    assert np.all(positions[count:] == 0) and np.all(out["masked_lm_ids"][row, count:] == 0)
    assert np.all(real < size)  # never padding
    assert not np.isin(ids[row, real], [CLS, SEP]).any()
    assert np.array_equal(out["masked_lm_ids"][row, :count], ids[row, real])
    untouched = np.setdiff1d(np.arange(ids.shape[1]), real)
    assert np.array_equal(out["input_ids"][row, untouched], ids[row, untouched])
    new = out["input_ids"][row, real]
    replaced["mask"] += int((new == MASK).sum())
    replaced["keep"] += int((new == ids[row, real]).sum())
    replaced["random"] += int(((new != MASK) & (new != ids[row, real])).sum())
  total = sum(replaced.values())
  assert total > 2000
  assert 0.77 < replaced["mask"] / total < 0.83
  assert 0.08 < replaced["random"] / total < 0.12
  assert 0.08 < replaced["keep"] / total < 0.12


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_swishrnn_recipe_masks_everything_with_mask_token(implementation):
  ids, mask = random_batch(np.random.default_rng(1), batch=64)
  out = run(
      MaskingConfig(mask_token_prob=1.0, random_token_prob=0.0),
      ids,
      mask,
      implementation=implementation,
  )
  positions, weights = out["masked_lm_positions"], out["masked_lm_weights"] > 0
  new = np.take_along_axis(out["input_ids"], positions, axis=1)[weights]
  assert np.all(new == MASK)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_whole_word_masking_takes_words_whole(implementation):
  rng = np.random.default_rng(2)
  ids, mask = random_batch(rng)
  # Make about half the body tokens continuation pieces.
  body = (ids >= 10) & (rng.random(ids.shape) < 0.5)
  ids = np.where(body, rng.integers(FIRST_CONTINUATION, VOCAB_SIZE, ids.shape), ids)
  config = MaskingConfig(max_predictions_per_seq=12, whole_word_mask=True)
  out = run(config, ids, mask, implementation=implementation)
  total_masked = 0
  for row in range(len(ids)):
    chosen = np.zeros(ids.shape[1], bool)
    count = int(out["masked_lm_weights"][row].sum())
    chosen[out["masked_lm_positions"][row, :count]] = True
    total_masked += count
    size = int(mask[row].sum())
    # Groups: a word start (or the first token after [CLS]/[SEP]) plus its continuations.
    group_start = 1
    for t in range(2, size + 1):
      if t == size or ids[row, t] < FIRST_CONTINUATION or ids[row, t - 1] in (CLS, SEP):
        group = chosen[group_start:t]
        assert group.all() or not group.any(), (row, group_start, t)
        group_start = t
    assert count <= min(12, max(1, int(round(size * 0.15))))
  assert total_masked > 0.8 * sum(min(12, round(int(m.sum()) * 0.15)) for m in mask)


@pytest.mark.slow(seconds=3)
def test_runs_under_xla_with_static_shapes():
  ids, mask = random_batch(np.random.default_rng(3), batch=8, length=32)
  config = MaskingConfig(max_predictions_per_seq=5, whole_word_mask=True)
  fn = tf.function(
      lambda i, m, s: mask_input_ids(
          i,
          m,
          i < FIRST_CONTINUATION,
          s,
          config,
          vocab_size=VOCAB_SIZE,
          mask_id=MASK,
          cls_id=CLS,
          sep_id=SEP,
      ),
      jit_compile=True,
  )
  out = fn(tf.constant(ids), tf.constant(mask), tf.constant([5, 6], tf.int64))
  assert out["masked_lm_positions"].shape == (8, 5)
  assert out["input_ids"].shape == (8, 32)


def test_dataset_masks_afresh_each_epoch_and_reproducibly(tmp_path):
  ids, mask = random_batch(np.random.default_rng(4), batch=32, length=48)
  path = str(tmp_path / "unmasked.tfrecord")
  with tf.io.TFRecordWriter(path) as writer:
    for row in range(len(ids)):
      writer.write(
          schema.serialize_example(
              {
                  "input_ids": ids[row],
                  "input_mask": mask[row],
                  "segment_ids": np.zeros(48),
                  "next_sentence_labels": [0],
              }
          )
      )
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(995)]
  masker = DynamicMasker(MaskingConfig(max_predictions_per_seq=7), vocab)

  def epochs(seed):
    dataset = tf.data.TFRecordDataset(path).map(lambda r: schema.parse_unmasked_example(r, 48))
    dataset = masker.mask_dataset(dataset, seed=seed)
    return [[x["masked_lm_positions"].numpy().tolist() for x in dataset] for _ in range(2)]

  first, second = epochs(7), epochs(7)
  assert first == second  # same seed, same sequence of epochs
  assert first[0] != first[1]  # a fresh mask each epoch
  batched = masker.mask_dataset(
      tf.data.TFRecordDataset(path).batch(8).map(lambda r: schema.parse_unmasked_example(r, 48)),
      seed=1,
  )
  for batch in batched:
    assert batch["masked_lm_positions"].shape == (8, 7)
    assert set(batch) >= set(schema.PRETRAINING_FEATURE_NAMES)


def test_config_validation():
  with pytest.raises(ValueError):
    MaskingConfig(mask_token_prob=0.9, random_token_prob=0.2)
  with pytest.raises(ValueError):
    MaskingConfig(masked_lm_prob=0.0)
