"""The generator over thousands of instances: statistical bounds and structural checks."""

import collections
import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from recurrent_bert.data import pretraining_corpus
from recurrent_bert.data import pretraining_data
from recurrent_bert.data import pretraining_instances
from recurrent_bert.data import pretraining_options
from recurrent_bert.data import pretraining_output
from recurrent_bert.data.dynamic_masking import DynamicMasker
from recurrent_bert.data.dynamic_masking import MaskingConfig
from recurrent_bert.data.tokenization import load_vocab
from recurrent_bert.errors import InputError
from tests.data.conftest import RESERVED
from tests.data.conftest import write_vocab

SEQ, PRED = 64, 20
CLS, SEP, MASK = 2, 3, 4
SPEC = {  # written out here, independent of schema.py
    "input_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
    "input_mask": tf.io.FixedLenFeature([SEQ], tf.int64),
    "segment_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
    "masked_lm_positions": tf.io.FixedLenFeature([PRED], tf.int64),
    "masked_lm_ids": tf.io.FixedLenFeature([PRED], tf.int64),
    "masked_lm_weights": tf.io.FixedLenFeature([PRED], tf.float32),
    "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
}


def generate(tmp_path, input_files, vocab_file, name="out", shards=2, **overrides):
  out_dir = tmp_path / name
  out_dir.mkdir()
  masking = overrides.pop("masking", MaskingConfig(max_predictions_per_seq=PRED))
  settings = dict(
      max_seq_length=SEQ, masking=masking, dupe_factor=2, chunk_bytes=60_000, show_progress=False
  )
  settings.update(overrides)
  options = pretraining_options.GeneratorOptions(
      input_files=list(input_files),
      vocab_file=vocab_file,
      output_files=[str(out_dir / f"shard-{i}.tfrecord") for i in range(shards)],
      stats_file=str(out_dir / "stats.json"),
      **settings,
  )
  stats = pretraining_data.create_pretraining_data(options)
  return options.output_files, stats


def read_records(paths, spec=SPEC):
  records = []
  for path in paths:
    for raw in tf.compat.v1.io.tf_record_iterator(path):
      parsed = tf.io.parse_single_example(raw, spec)
      records.append({k: v.numpy() for k, v in parsed.items()})
  return records


def original_ids(record):
  ids = record["input_ids"].copy()
  real = record["masked_lm_weights"] > 0
  ids[record["masked_lm_positions"][real]] = record["masked_lm_ids"][real]
  return ids


@pytest.fixture(scope="module")
def nsp_run(tmp_path_factory, corpus_file, vocab_file):
  paths, stats = generate(tmp_path_factory.mktemp("nsp"), [corpus_file], vocab_file)
  return read_records(paths), stats


@pytest.mark.slow(seconds=3)
def test_structure_lengths_and_segments(nsp_run):
  records, stats = nsp_run
  assert len(records) > 2000
  assert stats["instances"] == len(records)
  for record in records:
    ids, mask, segments = record["input_ids"], record["input_mask"], record["segment_ids"]
    size = int(mask.sum())
    assert size <= SEQ and np.all(mask[:size] == 1) and np.all(mask[size:] == 0)
    assert np.all(ids[size:] == 0) and np.all(segments[size:] == 0)
    original = original_ids(record)[:size]
    seps = np.flatnonzero(original == SEP)
    assert original[0] == CLS and len(seps) == 2 and seps[1] == size - 1
    assert seps[0] >= 2 and seps[1] - seps[0] >= 2  # both segments non-empty
    assert np.all(segments[: seps[0] + 1] == 0) and np.all(segments[seps[0] + 1 : size] == 1)
    assert CLS not in original[1:]


def test_masked_fraction_and_80_10_10(nsp_run):
  records, stats = nsp_run
  masked = real_tokens = 0
  kinds = collections.Counter()
  for record in records:
    weights = record["masked_lm_weights"]
    count = int(weights.sum())
    positions = record["masked_lm_positions"][:count]
    assert np.all(weights[count:] == 0) and np.all(record["masked_lm_positions"][count:] == 0)
    assert np.all(np.diff(positions) > 0)
    masked += count
    real_tokens += int(record["input_mask"].sum())
    new, old = record["input_ids"][positions], record["masked_lm_ids"][:count]
    assert not np.isin(old, [CLS, SEP]).any()
    kinds["mask"] += int((new == MASK).sum())
    kinds["keep"] += int((new == old).sum())
    kinds["random"] += int(((new != MASK) & (new != old)).sum())
  assert 0.135 < masked / real_tokens < 0.165
  assert 0.77 < kinds["mask"] / masked < 0.83
  assert 0.08 < kinds["random"] / masked < 0.12
  assert 0.08 < kinds["keep"] / masked < 0.12
  assert abs(stats["masked_fraction"] - masked / real_tokens) < 1e-9


@pytest.mark.slow(seconds=5)
def test_nsp_balance_and_random_next_from_another_document(tmp_path):
  # Every document is written with its own token ("d7 d7 d7 ..."), so the origin of
  # every segment is visible in the records.
  num_docs = 60
  rng = np.random.default_rng(0)
  lines = []
  for doc in range(num_docs):
    for _ in range(rng.integers(2, 12)):
      lines.append(" ".join([f"d{doc}"] * int(rng.integers(3, 15))))
    lines.append("")
  corpus = tmp_path / "docs.txt"
  corpus.write_text("\n".join(lines) + "\n")
  vocab = RESERVED + [f"d{i}" for i in range(num_docs)]
  vocab_file = write_vocab(tmp_path / "vocab.txt", vocab)
  paths, _ = generate(tmp_path, [str(corpus)], vocab_file, dupe_factor=30, chunk_bytes=4000)
  records = read_records(paths)
  labels = collections.Counter()
  for record in records:
    original = original_ids(record)[: int(record["input_mask"].sum())]
    sep = int(np.flatnonzero(original == SEP)[0])
    doc_a, doc_b = set(original[1:sep]), set(original[sep + 1 : -1])
    assert len(doc_a) == 1 and len(doc_b) == 1
    label = int(record["next_sentence_labels"][0])
    labels[label] += 1
    if label == 1:
      assert doc_a != doc_b  # a random next segment always comes from another document
    else:
      assert doc_a == doc_b
  assert sum(labels.values()) > 2000
  # BERT's rule: 50% random, plus the instances whose chunk holds a single sentence.
  assert 0.45 < labels[1] / sum(labels.values()) < 0.65


@pytest.mark.slow(seconds=5)
def test_whole_word_masking_never_masks_part_of_a_word(tmp_path, corpus_file, vocab_file):
  vocab = load_vocab(vocab_file)
  continuation = np.array([t.startswith("##") for t in vocab])
  paths, _ = generate(
      tmp_path,
      [corpus_file],
      vocab_file,
      masking=MaskingConfig(max_predictions_per_seq=PRED, whole_word_mask=True),
  )
  records = read_records(paths)
  multi_piece_words_masked = 0
  for record in records:
    size = int(record["input_mask"].sum())
    original = original_ids(record)[:size]
    chosen = np.zeros(size, bool)
    count = int(record["masked_lm_weights"].sum())
    chosen[record["masked_lm_positions"][:count]] = True
    start = 1
    for t in range(2, size + 1):
      if (
          t == size
          or not continuation[original[t]]
          or original[t] in (CLS, SEP)
          or original[t - 1] in (CLS, SEP)
      ):
        group = chosen[start:t]
        assert group.all() or not group.any()
        multi_piece_words_masked += int(group.all() and len(group) > 1)
        start = t
  assert multi_piece_words_masked > 100


@pytest.mark.slow(seconds=4)
def test_no_nsp_packs_single_segments(tmp_path, corpus_file, vocab_file):
  paths, stats = generate(
      tmp_path,
      [corpus_file],
      vocab_file,
      use_nsp=False,
      masking=MaskingConfig(
          max_predictions_per_seq=PRED, mask_token_prob=1.0, random_token_prob=0.0
      ),
  )
  records = read_records(paths)
  lengths = []
  for record in records:
    size = int(record["input_mask"].sum())
    original = original_ids(record)[:size]
    assert original[0] == CLS and original[-1] == SEP and SEP not in original[1:-1]
    assert np.all(record["segment_ids"] == 0) and record["next_sentence_labels"][0] == 0
    count = int(record["masked_lm_weights"].sum())
    assert np.all(record["input_ids"][record["masked_lm_positions"][:count]] == MASK)
    lengths.append(size)
  assert np.mean(lengths) > 0.6 * SEQ  # consecutive sentences are packed
  assert stats["truncated_tokens"] == 0  # long sentences are split, not cut


def test_same_seed_same_bytes_and_workers_do_not_matter(tmp_path, corpus_file, vocab_file):
  first, _ = generate(tmp_path, [corpus_file], vocab_file, name="a", shards=3)
  second, _ = generate(tmp_path, [corpus_file], vocab_file, name="b", shards=3)
  parallel, _ = generate(tmp_path, [corpus_file], vocab_file, name="c", shards=3, num_workers=2)
  other_seed, _ = generate(tmp_path, [corpus_file], vocab_file, name="d", shards=3, random_seed=99)

  def read_bytes(paths):
    return [open(p, "rb").read() for p in paths]

  def multiset(paths):
    return collections.Counter(r for p in paths for r in tf.compat.v1.io.tf_record_iterator(p))

  assert read_bytes(first) == read_bytes(second)
  assert multiset(first) == multiset(parallel)
  assert multiset(first) != multiset(other_seed)
  assert all(os.path.getsize(p) > 0 for p in first)
  assert not glob.glob(str(tmp_path / "*" / "*.tmp"))  # no temp files left behind


@pytest.mark.slow(seconds=5)
def test_dynamic_masking_records_and_read_time_masks(tmp_path, corpus_file, vocab_file):
  paths, stats = generate(tmp_path, [corpus_file], vocab_file, dynamic_masking=True, dupe_factor=1)
  spec = {k: v for k, v in SPEC.items() if not k.startswith("masked_lm")}
  records = read_records(paths, spec)
  assert len(records) == stats["instances"] > 500
  assert not any((r["input_ids"] == MASK).any() for r in records)
  masker = DynamicMasker(MaskingConfig(max_predictions_per_seq=PRED), load_vocab(vocab_file))
  dataset = tf.data.TFRecordDataset(paths).map(lambda r: tf.io.parse_single_example(r, spec))
  dataset = masker.mask_dataset(dataset.batch(64), seed=3)
  epoch1 = [b["masked_lm_positions"].numpy() for b in dataset]
  epoch2 = [b["masked_lm_positions"].numpy() for b in dataset]
  assert any((a != b).any() for a, b in zip(epoch1, epoch2))
  weights = np.concatenate([b["masked_lm_weights"].numpy() for b in dataset])
  tokens = sum(int(r["input_mask"].sum()) for r in records)
  assert 0.135 < weights.sum() / tokens < 0.165


def test_chunks_keep_every_document_in_order():
  documents = [pretraining_corpus.Document([f"s{i}"] * (i % 5 + 1), "x") for i in range(200)]
  chunks = list(pretraining_corpus.iter_chunks(iter(documents), chunk_bytes=40))
  flat = [doc for chunk, _ in chunks for doc in chunk]
  assert flat == [d.sentences for d in documents]
  assert all(size >= 20 for _, size in chunks)  # small tail merged


def test_bad_inputs_name_file_and_line(tmp_path, vocab_file, corpus_file):
  bad = tmp_path / "latin1.txt"
  bad.write_bytes(b"fine line\nsecond line\ncaf\xe9 au lait\n")
  with pytest.raises(InputError, match=r"latin1\.txt:3: not valid UTF-8"):
    generate(tmp_path, [str(bad)], vocab_file, name="bad")
  empty = tmp_path / "empty.txt"
  empty.write_text("\n\n   \n")
  with pytest.raises(InputError, match=r"no document.*empty\.txt"):
    generate(tmp_path, [str(empty)], vocab_file, name="empty")
  assert not os.listdir(tmp_path / "empty")  # nothing half-written
  no_reserved = write_vocab(tmp_path / "v.txt", ["[PAD]", "[UNK]", "hello"])
  with pytest.raises(InputError, match=r"v\.txt.*\[CLS\]"):
    generate(tmp_path, [corpus_file], no_reserved, name="vocab")


def test_leftovers_of_killed_swaps_are_cleaned_and_a_half_swap_is_undone(tmp_path):
  # Written by hand as atomic_directory names them: a temp dir of a run killed while
  # writing, and an old copy of a run killed between the two renames of its swap.
  (tmp_path / ".out.tmp-abc").mkdir()
  (tmp_path / ".out.tmp-abc" / "pretraining-00000-of-00001.tfrecord").write_bytes(b"half")
  (tmp_path / ".out.old-def" / "out").mkdir(parents=True)
  (tmp_path / ".out.old-def" / "out" / "stats.json").write_text("{}")
  (tmp_path / ".other.tmp-x").mkdir()  # another folder's: not ours to touch
  cleaned = pretraining_output.prepare_output_dir(str(tmp_path / "out"))
  assert sorted(os.listdir(tmp_path)) == [".other.tmp-x", "out"]
  assert os.listdir(tmp_path / "out") == ["stats.json"]  # the old complete folder is back
  assert any(".out.tmp-abc" in c for c in cleaned) and any("restored" in c for c in cleaned)


def test_foreign_files_are_named():
  names = [
      "pretraining-00000-of-00002.tfrecord",
      "stats.json",
      "x.tfrecord",
      ".pretraining-00001-of-00002.tfrecord.k2j3.tmp",
      "notes.txt",
  ]
  assert pretraining_output.foreign_output_files(names) == ["notes.txt", "x.tfrecord"]
  with pytest.raises(InputError, match=r"'d'.*notes\.txt, x\.tfrecord"):
    pretraining_output.check_output_dir("d", names)


def test_split_long_sentence_cuts_at_sentence_ends_then_word_starts():
  end = 9  # plays "."
  # 3-token words (start, ##, ##); a sentence end after 15 tokens, none after that.
  ids = [1, 5, 5] * 5 + [end] + [1, 5, 5] * 10 + [7] * 25
  starts = [True, False, False] * 5 + [True] + [True, False, False] * 10 + [False] * 25
  pieces = pretraining_instances.split_long_sentence(np.array(ids), np.array(starts), 20, [end])
  assert pieces[0][0] == 0 and pieces[-1][1] == len(ids)
  assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))  # adjacent spans
  lengths = [b - a for a, b in pieces]
  assert max(lengths) <= 20
  # After the "." (in the second half of the first 20-token window); then no "." in
  # reach: before the last word start of each window (16 + 18 = 34, 34 + 9 = 43, the
  # last word); then one 28-token word is cut at the window's end (43 + 20) and the rest.
  assert lengths == [16, 18, 9, 20, 8]
  assert all(starts[a] for a, _ in pieces[:4])


def test_truncation_follows_berts_rule():
  def reference(a, b, limit, rng):  # google-research/bert's loop, on copies
    a, b = list(a), list(b)
    while len(a) + len(b) > limit:
      longer = a if len(a) > len(b) else b
      if rng.random() < 0.5:
        del longer[0]
      else:
        longer.pop()
    return a, b

  fronts = collections.Counter()
  for seed in range(400):
    rng = np.random.default_rng(seed)
    a = list(range(int(rng.integers(1, 120))))
    b = list(range(1000, 1000 + int(rng.integers(1, 120))))
    expected = reference(a, b, 61, pretraining_instances.random.Random(seed))
    flat = a + b  # spans of a flat token array holding a then b
    got_a, got_b, removed = pretraining_instances.truncate_seq_pair(
        (0, len(a)), (len(a), len(flat)), 61, pretraining_instances.random.Random(seed)
    )
    # The same lengths as BERT's loop; each segment keeps a contiguous run of its tokens.
    assert (got_a[1] - got_a[0], got_b[1] - got_b[0]) == (len(expected[0]), len(expected[1]))
    assert removed == max(0, len(a) + len(b) - 61)
    assert 0 <= got_a[0] <= got_a[1] <= len(a) <= got_b[0] <= got_b[1] <= len(flat)
    fronts["front"] += got_a[0] + (got_b[0] - len(a))
    fronts["removed"] += removed
  # Each removed token comes from the front with probability 1/2, as in the loop.
  assert fronts["removed"] > 5000
  assert abs(fronts["front"] / fronts["removed"] - 0.5) < 0.02


def test_one_long_line_yields_its_fair_share_of_instances(tmp_path, corpus_file, vocab_file):
  with open(corpus_file, encoding="utf-8") as f:
    words = f.read().split()[:12_000]
  one_line = tmp_path / "one_line.txt"
  one_line.write_text(" ".join(words) + "\n", encoding="utf-8")
  short_lines = tmp_path / "short_lines.txt"
  short_lines.write_text(
      "\n".join(" ".join(words[i : i + 20]) for i in range(0, len(words), 20)) + "\n",
      encoding="utf-8",
  )
  counts = {}
  for use_nsp in (True, False):
    _, long_stats = generate(
        tmp_path,
        [str(one_line)],
        vocab_file,
        name=f"l{use_nsp}",
        use_nsp=use_nsp,
        chunk_bytes=1 << 20,
    )
    _, short_stats = generate(
        tmp_path,
        [str(short_lines)],
        vocab_file,
        name=f"s{use_nsp}",
        use_nsp=use_nsp,
        chunk_bytes=1 << 20,
    )
    assert long_stats["input_tokens"] == short_stats["input_tokens"]
    assert long_stats["long_lines_split"] == 1
    assert long_stats["long_line_pieces"] > long_stats["input_tokens"] / (SEQ // 4)
    counts[use_nsp] = long_stats["instances"], short_stats["instances"]
    # ~2 * tokens / SEQ instances: not 2 (one per duplication), as before the split.
    assert long_stats["instances"] == pytest.approx(short_stats["instances"], rel=0.15)
  assert all(long > 500 for long, _ in counts.values())
