"""Issue 15, vocabularies: what tensorflow-text's WordPiece cannot hold is refused by
`load_vocab` as `vocab.txt:LINE: ...`, before tensorflow-text fails with a RuntimeError
naming neither ("... This should never happen").

tensorflow-text's limits (core/kernels/fast_wordpiece_tokenizer_utils.h): 8 bits of token
length, i.e. 256 UTF-8 bytes after a leading "##"; NUL-terminated trie keys; unique tokens.
"""

import os

from hypothesis import given
from hypothesis import strategies as st
import pytest

from recurrent_bert.data import tokenization
from recurrent_bert.data.vocab import load_vocab
from recurrent_bert.errors import InputError
from tests.data.conftest import RESERVED
from tests.support import mutations
from tests.support.readme_text import run_module

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENS = RESERVED + ["the", "cat", "##s", "sat", "on", "mat", "##ting", "."]
VALID = ("\n".join(TOKENS) + "\n").encode("utf-8")


def write(tmp_path, data: bytes, name="vocab.txt"):
  path = tmp_path / name
  path.write_bytes(data)
  return str(path)


def with_line(data: bytes, index: int, token: bytes) -> bytes:
  return mutations.replace_line(data, index, token)


def refused(path, line, match):
  with pytest.raises(InputError, match=match) as error:
    load_vocab(path)
  message = str(error.value)
  assert message.startswith(f"{path}:{line}: "), message
  return message


def test_nul_in_a_token_is_refused_naming_the_line(tmp_path):
  path = write(tmp_path, with_line(VALID, 6, b"c\x00at"))
  refused(path, 7, "NUL")


@pytest.mark.parametrize(
    "token,ok",
    [
        ("a" * 256, True),
        ("a" * 257, False),
        ("##" + "a" * 256, True),  # the "##" does not count
        ("##" + "a" * 257, False),
        ("é" * 128, True),  # bytes, not characters: 256 bytes
        ("é" * 129, False),
    ],
)
def test_token_length_limit_is_tensorflow_texts(tmp_path, token, ok):
  path = write(tmp_path, with_line(VALID, 6, token.encode("utf-8")))
  if ok:
    # Accepted means tensorflow-text builds it (the in-graph tokenizer, as the tools do).
    assert tokenization.BertWordpieceTokenizer(path).vocab[6] == token
  else:
    refused(path, 7, "UTF-8 bytes.*at most 256")


def test_duplicate_empty_and_non_utf8_lines_are_named(tmp_path):
  refused(write(tmp_path, with_line(VALID, 8, b"cat"), "dup.txt"), 9, r"duplicate .* line 7")
  refused(write(tmp_path, with_line(VALID, 8, b"  "), "empty.txt"), 9, "empty vocab entry")
  refused(write(tmp_path, with_line(VALID, 8, b"caf\xe9"), "latin1.txt"), 9, "not valid UTF-8")


@pytest.mark.parametrize("ending", [b"\r\n", b"\r"])
def test_windows_and_old_mac_line_ends_read_the_same_tokens(tmp_path, ending):
  path = write(tmp_path, VALID.replace(b"\n", ending))
  assert load_vocab(path) == TOKENS


def test_more_tokens_than_tensorflow_text_holds_is_refused(tmp_path, monkeypatch):
  # 2^22 tokens is a 30 MB file; the rule is the same with a smaller limit.
  from recurrent_bert.data import vocab

  monkeypatch.setattr(vocab, "MAX_VOCAB_SIZE", len(TOKENS) - 1)
  path = write(tmp_path, VALID)
  with pytest.raises(InputError, match=rf"^{path}: {len(TOKENS)} tokens; .* at most"):
    load_vocab(path)


def test_byte_order_mark_is_dropped(tmp_path):
  assert load_vocab(write(tmp_path, b"\xef\xbb\xbf" + VALID)) == TOKENS


def _assert_one_line_exit_2(result, expected_start):
  assert result.returncode == 2, result.stderr[-2000:]
  assert "Traceback" not in result.stderr
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and errors[0].startswith(expected_start), result.stderr[-2000:]


@pytest.mark.slow(seconds=4)
@pytest.mark.parametrize(
    "module", ["recurrent_bert.tools.tokenize_text", "recurrent_bert.tools.create_pretraining_data"]
)
def test_tools_print_one_line_and_exit_2_on_a_bad_vocab(tmp_path, module):
  vocab = write(tmp_path, with_line(VALID, 6, b"c\x00at"))
  text = tmp_path / "in.txt"
  text.write_text("The cat sat.\n", encoding="utf-8")
  if module == "recurrent_bert.tools.tokenize_text":
    flags = [f"--input_file={text}", f"--output_file={tmp_path}/out.jsonl"]
  else:
    flags = [f"--input_files={text}", f"--output_dir={tmp_path}/out", "--noprogress"]
  result = run_module(module, f"--vocab_file={vocab}", *flags)
  _assert_one_line_exit_2(result, f"error: {vocab}:7: vocab entry 'c\\x00at' holds a NUL")


# Issue 31: a vocabulary of special tokens only made every word [UNK], silently.
SPECIAL_ONLY = RESERVED + ["[unused0]", "[unused1]"]
SPECIAL_ONLY_MESSAGE = (
    "holds only special tokens ([PAD] [UNK] [CLS] [SEP] [MASK] [unused0] [unused1]): it "
    "cannot tokenize any text; build one with `python -m recurrent_bert.tools.build_vocab`"
)


def test_vocab_of_special_tokens_only_is_refused(tmp_path):
  path = write(tmp_path, ("\n".join(SPECIAL_ONLY) + "\n").encode())
  with pytest.raises(InputError) as error:
    load_vocab(path)
  assert str(error.value) == f"{path}: {SPECIAL_ONLY_MESSAGE}"
  # One word piece is enough; a lone bracket is a word piece, not a special token.
  for piece in ("a", "[", "##]"):
    tokens = SPECIAL_ONLY + [piece]
    assert load_vocab(write(tmp_path, ("\n".join(tokens) + "\n").encode())) == tokens


@pytest.mark.slow(seconds=10)
def test_tool_exits_2_on_a_vocab_of_special_tokens_only(tmp_path):
  vocab = write(tmp_path, ("\n".join(SPECIAL_ONLY) + "\n").encode())
  text = tmp_path / "in.txt"
  text.write_text("The cat sat.\n", encoding="utf-8")
  result = run_module(
      "recurrent_bert.tools.tokenize_text",
      f"--vocab_file={vocab}",
      f"--input_file={text}",
      f"--output_file={tmp_path}/out.jsonl",
  )
  _assert_one_line_exit_2(result, f"error: {vocab}: {SPECIAL_ONLY_MESSAGE}")
  assert not (tmp_path / "out.jsonl").exists()


# -- the property -------------------------------------------------------------------------

BAD_TOKENS = st.sampled_from(
    [
        b"c\x00t",
        b"\x00",
        b"##\x00",
        b"x" * 257,
        b"##" + b"y" * 257,
        ("\u00e9" * 129).encode(),
        b"",
        b"   ",
    ]
    + [b"a" + bad for bad in mutations.NON_UTF8]
)
GOOD_TOKENS = st.sampled_from(
    [b"dog", b"##ly", b"x" * 256, b"##" + b"z" * 256, b"\xc3\xa9t\xc3\xa9", b"\xe2\x80\x8bz"]
)


@mutations.fuzz_settings(max_examples=40)
@given(data=st.data())
def test_vocab_property(tmp_path_factory, data):
  kinds = ["bad", "duplicate", "good", "crlf", "cr", "no final newline"]
  kind = data.draw(st.sampled_from(kinds))
  content, expected, line = VALID, None, None
  if kind == "bad":
    index = data.draw(mutations.line_index(VALID))
    content, line = with_line(VALID, index, data.draw(BAD_TOKENS)), index + 1
  elif kind == "duplicate":  # a later line repeats an earlier one: the later is named
    index = data.draw(mutations.line_index(VALID, first=1))
    earlier = data.draw(st.integers(0, index - 1))
    content, line = with_line(VALID, index, TOKENS[earlier].encode()), index + 1
  elif kind == "good":
    index = data.draw(mutations.line_index(VALID, first=len(RESERVED)))
    token = data.draw(GOOD_TOKENS)
    content = with_line(VALID, index, token)
    expected = list(TOKENS)
    expected[index] = token.decode("utf-8")
  else:
    content = {
        "crlf": mutations.to_crlf(VALID),
        "cr": VALID.replace(b"\n", b"\r"),
        "no final newline": VALID.rstrip(b"\n"),
    }[kind]
    expected = list(TOKENS)
  path = write(tmp_path_factory.mktemp("vocab"), content)
  # The real reader of the tools: load_vocab, then tensorflow-text's WordPiece built on it.
  mutations.check_outcome(
      "vocab.txt",
      lambda: tokenization.BertWordpieceTokenizer(path).vocab,
      path,
      expected,
      line=line,
  )
