"""Tokenizer: hand-written cases, an independent pure-Python reference, graph modes."""

import unicodedata

import pytest
import tensorflow as tf

from recurrent_bert.data import tokenization
from recurrent_bert.errors import InputError
from tests.data.conftest import RESERVED
from tests.data.conftest import vocab_from_text
from tests.data.conftest import write_vocab

HAND_VOCAB = RESERVED + [
    "hello",
    "world",
    ",",
    "!",
    ".",
    "'",
    "$",
    "the",
    "cafe",
    "Café",
    "una",
    "##ffable",
    "un",
    "##aff",
    "##able",
    "中",
    "国",
    "a",
    "##a",
    "b",
    "##b",
    "ab",
    "x",
    "ドイツ",
    "ñ",
    "n",
]


@pytest.fixture(scope="module")
def hand_vocab(tmp_path_factory):
  return write_vocab(tmp_path_factory.mktemp("hand") / "vocab.txt", HAND_VOCAB)


def pieces(tokenizer, text):
  return [p.decode("utf-8") for p in tokenizer.tokenize_to_pieces([text])[0].numpy()]


@pytest.mark.parametrize(
    "text, lower, expected",
    [
        ("Hello, World!", True, ["hello", ",", "world", "!"]),
        ("Hello, World!", False, ["[UNK]", ",", "[UNK]", "!"]),
        ("Café", True, ["cafe"]),  # accent stripped when lower-casing
        ("Café", False, ["Café"]),  # kept when cased
        ("CAFÉ", True, ["cafe"]),
        ("hello$world", True, ["hello", "$", "world"]),  # ASCII symbols are punctuation
        ("hello'", True, ["hello", "'"]),
        ("中国hello", True, ["中", "国", "hello"]),  # CJK ideographs are words of their own
        ("ドイツ", False, ["ドイツ"]),  # katakana is not in the CJK blocks
        ("ドイツ", True, ["[UNK]"]),  # uncased: NFD + Mn stripping removes the dakuten (as BERT)
        ("unaffable", True, ["una", "##ffable"]),  # greedy longest match first
        ("unax", True, ["[UNK]"]),  # no full segmentation: the whole word is unknown
        ("zebra", True, ["[UNK]"]),
        ("a" * 100, True, ["a"] + ["##a"] * 99),  # 100 bytes: still tokenized
        ("a" * 101, True, ["[UNK]"]),  # over the word limit
        ("", True, []),
        ("   \t\n ", True, []),
        ("a\x00b", True, ["ab"]),  # NUL dropped, not a separator
        ("a\u200bb", True, ["ab"]),  # zero-width space (Cf) dropped
        ("a\x07b\ufffd", True, ["ab"]),  # bell (Cc) and U+FFFD dropped
        ("a\tb\u00a0x", True, ["a", "b", "x"]),  # tab and no-break space separate words
        ("Ñ", True, ["n"]),
    ],
)
def test_hand_written_cases(hand_vocab, text, lower, expected):
  tokenizer = tokenization.BertWordpieceTokenizer(hand_vocab, do_lower_case=lower)
  assert pieces(tokenizer, text) == expected


def test_word_grouping_and_special_ids(hand_vocab):
  tokenizer = tokenization.BertWordpieceTokenizer(hand_vocab, do_lower_case=True)
  ids = tokenizer.tokenize(["hello unaffable", ""])
  assert ids.shape.rank == 3
  index = {t: i for i, t in enumerate(HAND_VOCAB)}
  assert ids.to_list() == [[[index["hello"]], [index["una"], index["##ffable"]]], []]
  assert (
      tokenizer.pad_id,
      tokenizer.unk_id,
      tokenizer.cls_id,
      tokenizer.sep_id,
      tokenizer.mask_id,
  ) == (0, 1, 2, 3, 4)
  assert tokenizer.vocab_size == len(HAND_VOCAB)
  starts = tokenizer.is_word_start(tokenizer.tokenize_flat(["hello unaffable"]))
  assert starts.to_list() == [[True, True, False]]


def test_id_token_round_trip(hand_vocab):
  tokenizer = tokenization.BertWordpieceTokenizer(hand_vocab)
  all_ids = tf.range(tokenizer.vocab_size, dtype=tf.int64)
  tokens = tokenizer.ids_to_tokens(all_ids)
  assert [t.decode() for t in tokens.numpy()] == HAND_VOCAB
  assert tokenizer.tokens_to_ids(tokens).numpy().tolist() == list(range(len(HAND_VOCAB)))
  assert tokenizer.tokens_to_ids(["not-in-vocab"]).numpy().tolist() == [tokenizer.unk_id]
  assert tokenizer.convert_tokens_to_ids(tokenizer.convert_ids_to_tokens([5, 11, 12])) == [
      5,
      11,
      12,
  ]
  text = tokenizer.detokenize(tokenizer.tokenize_flat(["Hello, unaffable world!"]))
  assert text.numpy()[0].decode() == "hello , unaffable world !"


@pytest.mark.slow(seconds=5)
def test_eager_tf_data_and_tf_function_agree(hand_vocab):
  tokenizer = tokenization.BertWordpieceTokenizer(hand_vocab)
  texts = ["Hello, World!", "", "unaffable 中国 café", "a" * 101]
  eager = tokenizer.tokenize_flat(texts).to_list()
  graph = tf.function(tokenizer.tokenize_flat)(tf.constant(texts)).to_list()
  dataset = tf.data.Dataset.from_tensor_slices(texts).batch(2).map(tokenizer.tokenize_flat)
  from_data = [row for batch in dataset for row in batch.to_list()]
  per_example = [
      x.numpy().tolist()
      for x in tf.data.Dataset.from_tensor_slices(texts).map(
          lambda t: tokenizer.tokenize_flat(t[tf.newaxis]).flat_values
      )
  ]
  assert eager == graph == from_data == per_example


def test_saved_model_serves_the_tokenizer(hand_vocab, tmp_path):
  tokenizer = tokenization.BertWordpieceTokenizer(hand_vocab)
  module = tf.Module()
  module.tokenizer = tokenizer
  module.serve = tf.function(
      lambda texts: tokenizer.tokenize_flat(texts).to_tensor(),
      input_signature=[tf.TensorSpec([None], tf.string)],
  )
  tf.saved_model.save(module, str(tmp_path / "saved"))
  loaded = tf.saved_model.load(str(tmp_path / "saved"))
  texts = tf.constant(["Hello, unaffable world!", "中国"])
  assert (
      loaded.serve(texts).numpy().tolist()
      == tokenizer.tokenize_flat(texts).to_tensor().numpy().tolist()
  )


# --- An independent reference, written from the algorithm's description. ---------------


def _reference_is_punctuation(ch):
  cp = ord(ch)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(ch).startswith("P")


def _reference_is_cjk(ch):
  cp = ord(ch)
  ranges = [
      (0x4E00, 0x9FFF),
      (0x3400, 0x4DBF),
      (0x20000, 0x2A6DF),
      (0x2A700, 0x2B73F),
      (0x2B740, 0x2B81F),
      (0x2B820, 0x2CEAF),
      (0xF900, 0xFAFF),
      (0x2F800, 0x2FA1F),
  ]
  return any(lo <= cp <= hi for lo, hi in ranges)


def reference_tokenize(text, vocab, lower):
  """BERT basic tokenization + greedy longest-match WordPiece, in plain Python."""
  kept = []
  for ch in text:
    category = unicodedata.category(ch)
    if ch in "\t\n\r" or category in ("Zs", "Zl", "Zp"):  # as BERT's str.split
      kept.append(" ")
    elif ord(ch) == 0 or ord(ch) == 0xFFFD or category in ("Cc", "Cf"):
      continue
    else:
      kept.append(ch)
  text = "".join(kept)
  if lower:
    text = unicodedata.normalize("NFD", text.lower())
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Mn")
  words, current = [], ""
  for ch in text:
    if ch == " " or _reference_is_punctuation(ch) or _reference_is_cjk(ch):
      if current:
        words.append(current)
      current = ""
      if ch != " ":
        words.append(ch)
    else:
      current += ch
  if current:
    words.append(current)
  output = []
  for word in words:
    if len(word.encode("utf-8")) > 100:
      output.append("[UNK]")
      continue
    start, word_pieces = 0, []
    while start < len(word):
      end = len(word)
      while end > start:
        piece = word[start:end] if start == 0 else "##" + word[start:end]
        if piece in vocab:
          break
        end -= 1
      if end == start:
        word_pieces = ["[UNK]"]
        break
      word_pieces.append(piece)
      start = end
    output.extend(word_pieces)
  return output


EXTRA_LINES = [
    "Ünïcödé àccents, “curly quotes” — and dashes… plus 中文字符 and ドイツ語!",
    "tabs\tand\u00a0no-break\u2003em spaces; zero\u200bwidth; nul\x00byte",
    "x" * 120 + " end",
]


@pytest.mark.slow(seconds=3)
@pytest.mark.parametrize("lower", [True, False])
def test_matches_pure_python_reference_on_real_text(corpus_file, tmp_path, lower):
  with open(corpus_file, encoding="utf-8") as f:
    text = f.read()
  lines = [line for line in text.splitlines() if line.strip()][:400] + EXTRA_LINES
  vocab = vocab_from_text(text, lower=lower)
  tokenizer = tokenization.BertWordpieceTokenizer(
      write_vocab(tmp_path / "vocab.txt", vocab), do_lower_case=lower
  )
  ours = tokenizer.tokenize_to_pieces(lines).to_list()
  vocab_set = set(vocab)
  mismatches = [
      (line, [p.decode() for p in got], reference_tokenize(line, vocab_set, lower))
      for line, got in zip(lines, ours)
      if [p.decode() for p in got] != reference_tokenize(line, vocab_set, lower)
  ]
  assert not mismatches, mismatches[:3]


# --- Vocabulary loading. -----------------------------------------------------------------


def test_google_bert_vocab_layout_loads_unchanged(tmp_path):
  # google-research/bert layout: [PAD], [unused0..98], [UNK], [CLS], [SEP], [MASK], ...
  tokens = (
      ["[PAD]"]
      + [f"[unused{i}]" for i in range(99)]
      + ["[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "##s", "cat"]
  )
  tokenizer = tokenization.BertWordpieceTokenizer(write_vocab(tmp_path / "v.txt", tokens))
  assert (
      tokenizer.pad_id,
      tokenizer.unk_id,
      tokenizer.cls_id,
      tokenizer.sep_id,
      tokenizer.mask_id,
  ) == (0, 100, 101, 102, 103)
  assert pieces(tokenizer, "The cats") == ["the", "cat", "##s"]


def test_vocab_errors_name_the_file_and_line(tmp_path):
  missing = write_vocab(tmp_path / "missing.txt", ["[PAD]", "[UNK]", "[CLS]", "hello"])
  with pytest.raises(InputError, match=r"missing\.txt.*\[SEP\] \[MASK\]"):
    tokenization.load_vocab(missing)
  duplicate = write_vocab(tmp_path / "dup.txt", RESERVED + ["a", "b", "a"])
  with pytest.raises(InputError, match=r"dup\.txt:8: duplicate"):
    tokenization.load_vocab(duplicate)
  bad = tmp_path / "bad.txt"
  bad.write_bytes(("\n".join(RESERVED) + "\n").encode() + b"\xff\xfe\n")
  with pytest.raises(InputError, match=r"bad\.txt:6: .*UTF-8"):
    tokenization.load_vocab(str(bad))
  with pytest.raises(InputError, match="does not exist"):
    tokenization.load_vocab(str(tmp_path / "nope.txt"))


@pytest.mark.parametrize("lower", [True, False])
def test_native_tokenizer_gives_the_in_graph_ids_on_real_text(corpus_file, vocab_file, lower):
  # The generator's workers tokenize with the native tokenizer, the served model with the
  # in-graph one: on real text (the corpus slice, ~4k lines) and a few non-ASCII lines
  # they must agree id for id.
  from recurrent_bert.data import native_tokenizer

  with open(corpus_file, encoding="utf-8") as f:
    lines = [line for line in f.read().splitlines() if line]
  lines += [
      "Café déjà vu — naïve façade, Ångström.",
      "東京は日本の首都です。",
      "tab\there, nbsp\u00a0there; zero\u200bwidth",
      "“Quotes” and ‘others’ … ¿Qué?",
  ]
  graph = tokenization.BertWordpieceTokenizer(vocab_file, do_lower_case=lower)
  native = native_tokenizer.NativeWordpieceTokenizer(vocab_file, do_lower_case=lower)
  expected = graph.tokenize_flat(lines).to_list()
  got = native.tokenize_lists(lines)
  assert len(lines) > 3000
  mismatches = [(line, a, b) for line, a, b in zip(lines, got, expected) if a != b]
  assert not mismatches, mismatches[:3]
  ids = native.tokenize(lines)[0]
  starts = ~native.is_continuation[ids]
  expected_starts = graph.is_word_start(graph.tokenize_flat(lines)).flat_values.numpy()
  assert (starts == expected_starts).all()
