"""Learning a SentencePiece model (unigram LM or BPE), without TensorFlow.

`rbert-build-vocab --tokenizer=unigram|bpe` runs `train_sentencepiece` on the same text
the WordPiece learner reads, then writes `<output>.model` and the `<output>.vocab` listing.

The model's fixed layout, what `vocab.Vocabulary.from_sentencepiece` and every tokenizer of
the package rely on:

- ids 0-4: [PAD] (the model's pad piece), [UNK] (its unknown piece), then [CLS] [SEP]
  [MASK] as *user-defined* symbols; no BOS/EOS. User-defined, not control: a user-defined
  symbol written in text is that one piece (so raw text "Paris is the [MASK]." holds the
  [MASK] id, the way Hugging Face tokenizers read special tokens in text, and it decodes
  back to "[MASK]"); a control symbol is never produced from text and decodes to nothing.
  The literal text of these three symbols in a corpus therefore becomes their ids too.
- casing: with do_lower_case the model's normaliser is SentencePiece's `nmt_nfkc_cf` (NFKC
  then Unicode case folding), else `nmt_nfkc`. The rule lives in the model, so the
  in-graph tokenizer, the `sentencepiece` package and any other reader of the model fold
  case alike. Accents are kept (WordPiece's uncased mode strips them).
- determinism: one training thread and a fixed random seed; all lines are used (no
  sampling), so the same text and options give the same model bytes.
"""

import io
import re
from typing import Iterable, Iterator, Sequence

from recurrent_bert import io_utils
from recurrent_bert.data import vocab as vocab_lib
from recurrent_bert.errors import InputError

MODEL_TYPES = ("unigram", "bpe")
SEED = 12345
# SentencePiece skips longer lines; ours (sentences, short paragraphs) are far shorter.
MAX_SENTENCE_BYTES = 1 << 16
USER_DEFINED_SYMBOLS = (vocab_lib.CLS_TOKEN, vocab_lib.SEP_TOKEN, vocab_lib.MASK_TOKEN)


def iter_lines(files: Sequence[str], max_lines: int = 0) -> Iterator[str]:
  """The non-blank lines of the files, in order (at most `max_lines` lines read; 0: all).

  Raises:
    InputError: unreadable file or invalid UTF-8, naming the file and line.
  """
  seen = 0
  for path in files:
    for _, line in io_utils.read_lines_checked(path):
      line = line.strip()
      if line:
        yield line
      seen += 1
      if max_lines and seen >= max_lines:
        return


def train_sentencepiece(
    lines: Iterable[str],
    model_type: str,
    vocab_size: int,
    do_lower_case: bool = True,
    character_coverage: float = 1.0,
) -> bytes:
  """Learns a SentencePiece model with the layout of the module docstring.

  Args:
    lines: the training text, one sentence (or paragraph) per item.
    model_type: "unigram" or "bpe".
    vocab_size: pieces in the model, the five reserved ones included.
    do_lower_case: fold case (normalisation rule nmt_nfkc_cf instead of nmt_nfkc).
    character_coverage: fraction of the text's characters the model covers; rarer
      characters become [UNK]. Not SentencePiece's default 0.9995: on English prose that
      drops "?", "!", "#" ... (the built-in corpus has ~145 distinct characters).

  Returns:
    The serialized model (the bytes of a `.model` file).

  Raises:
    InputError: SentencePiece refused the text or options (e.g. a vocab_size the text
      cannot fill), its reason in one line.
  """
  import sentencepiece

  if model_type not in MODEL_TYPES:
    raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {model_type!r}")
  sentencepiece.set_random_generator_seed(SEED)
  model = io.BytesIO()
  try:
    sentencepiece.SentencePieceTrainer.Train(
        sentence_iterator=iter(lines),
        model_writer=model,
        model_type=model_type,
        vocab_size=vocab_size,
        character_coverage=character_coverage,
        normalization_rule_name="nmt_nfkc_cf" if do_lower_case else "nmt_nfkc",
        pad_id=0,
        unk_id=1,
        bos_id=-1,
        eos_id=-1,
        pad_piece=vocab_lib.PAD_TOKEN,
        unk_piece=vocab_lib.UNK_TOKEN,
        user_defined_symbols=list(USER_DEFINED_SYMBOLS),
        max_sentence_length=MAX_SENTENCE_BYTES,
        num_threads=1,
        minloglevel=2,
    )
  except RuntimeError as e:
    # "INTERNAL: src/trainer_interface.cc(744) [check] reason": the reason is for users.
    reason = re.sub(r"^[A-Z_]+: \S+\(\d+\) \[.*?\] ", "", " ".join(str(e).split()))
    raise InputError(f"SentencePiece could not learn a {model_type} model: {reason}") from None
  return model.getvalue()


def vocab_listing(model_proto: bytes) -> str:
  """The readable listing of a model: "piece<TAB>score" per id, one a line."""
  processor = vocab_lib.load_sentencepiece(model_proto)
  return "".join(
      f"{processor.IdToPiece(i)}\t{processor.GetScore(i) + 0.0:g}\n"  # + 0.0: no "-0"
      for i in range(processor.GetPieceSize())
  )


def output_paths(output: str):
  """(`<output>.model`, `<output>.vocab`); an --output_file ending in .model is the model."""
  if output.endswith(vocab_lib.SENTENCEPIECE_SUFFIX):
    output = output[: -len(vocab_lib.SENTENCEPIECE_SUFFIX)]
  return output + vocab_lib.SENTENCEPIECE_SUFFIX, output + ".vocab"


def write_model(output: str, model_proto: bytes) -> None:
  """Writes `<output>.vocab` then `<output>.model`, each atomically (the model last: it is
  what readers take, and it appears only once the run succeeded)."""
  model_path, vocab_path = output_paths(output)
  io_utils.atomic_write_text(vocab_path, vocab_listing(model_proto))
  with io_utils.atomic_write(model_path, "wb") as f:
    f.write(model_proto)
