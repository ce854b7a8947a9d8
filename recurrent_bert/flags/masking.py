"""The pretraining records' layout and masked-LM recipe: one definition for both ends.

recurrent_bert/tools/create_pretraining_data writes the records (masking them, or leaving them for
read-time masking with --dynamic_masking); recurrent_bert.pretrain reads them (and masks
them itself under --dynamic_masking). The two must agree on the sequence length, the
masked positions per sequence and NSP, so both take these flags, with the same names,
defaults and checks, from here; only the help says which end the command is (what
--use_nsp and --dynamic_masking do there; in pretrain the recipe applies under
--dynamic_masking only). The recipe's meaning is in recurrent_bert/data/mlm_masking.py.
"""

from absl import flags

from recurrent_bert.flags import execution

FLAGS = flags.FLAGS

# Flags whose help in the reading command (pretrain) says they apply under
# --dynamic_masking only; the writing command always masks with them.
_RECIPE_HELP = {
    "masked_lm_prob": "Fraction of tokens to mask.",
    "mask_token_prob": "Chosen positions replaced by [MASK].",
    "random_token_prob": "Chosen positions replaced by a random token (the rest stay "
    "unchanged).",
    "do_whole_word_mask": "Mask all pieces of a word together.",
}


def define_flags(*, reads_records: bool) -> None:
  """--max_seq_length, --max_predictions_per_seq, --use_nsp, --dynamic_masking and the
  masking recipe (--masked_lm_prob, --mask_token_prob, --random_token_prob,
  --do_whole_word_mask), with their checks.

  Args:
    reads_records: True for the command that trains on the records (the recipe then
      applies under --dynamic_masking only), False for the one that writes them.
  """
  flags.DEFINE_integer(
      "max_seq_length", 128, "Tokens per sequence of the records, [CLS]/[SEP] included."
  )
  flags.DEFINE_integer(
      "max_predictions_per_seq",
      20,
      "Cap of masked positions per sequence (the records' length of masked_lm_positions).",
  )
  if reads_records:
    flags.DEFINE_boolean(
        "use_nsp",
        True,
        "Train the next-sentence head too (the records carry next_sentence_labels).",
    )
    flags.DEFINE_boolean(
        "dynamic_masking",
        False,
        "Records are unmasked: mask them while reading, fresh every epoch.",
    )
  else:
    flags.DEFINE_boolean(
        "use_nsp",
        True,
        "Sentence pairs with NSP labels; --nouse_nsp packs one segment of "
        "consecutive text per sequence (SwishRNN recipe).",
    )
    flags.DEFINE_boolean(
        "dynamic_masking",
        False,
        "Write unmasked records (input_ids, input_mask, segment_ids, "
        "next_sentence_labels) to be masked at read time.",
    )
  recipe_help = {
      name: text if not reads_records else "With --dynamic_masking: " + text[0].lower() + text[1:]
      for name, text in _RECIPE_HELP.items()
  }
  flags.DEFINE_float("masked_lm_prob", 0.15, recipe_help["masked_lm_prob"])
  flags.DEFINE_float("mask_token_prob", 0.8, recipe_help["mask_token_prob"])
  flags.DEFINE_float("random_token_prob", 0.1, recipe_help["random_token_prob"])
  flags.DEFINE_boolean("do_whole_word_mask", False, recipe_help["do_whole_word_mask"])
  # 65536 tokens is far past any model here; 2**31 would allocate 16 GB per sequence.
  for name in ("max_seq_length", "max_predictions_per_seq"):
    execution.register_range(name, 1, 1 << 16)
  for name in ("masked_lm_prob", "mask_token_prob", "random_token_prob"):
    flags.register_validator(name, lambda v: 0.0 <= v <= 1.0, f"--{name} must be in [0, 1]")
  flags.register_multi_flags_validator(
      ["mask_token_prob", "random_token_prob"],
      lambda f: f["mask_token_prob"] + f["random_token_prob"] <= 1.0 + 1e-9,
      "--mask_token_prob + --random_token_prob must be <= 1",
  )
  flags.register_multi_flags_validator(
      ["max_seq_length", "max_predictions_per_seq"],
      lambda f: f["max_predictions_per_seq"] <= f["max_seq_length"],
      "--max_predictions_per_seq must be <= --max_seq_length",
  )


def masking_config():
  """The masked-LM recipe the flags give.

  Returns:
    A `data.mlm_masking.MaskingConfig`.

  Raises:
    ValueError: a recipe MaskingConfig refuses (e.g. --masked_lm_prob=0).
  """
  from recurrent_bert.data.mlm_masking import MaskingConfig

  return MaskingConfig(
      max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      masked_lm_prob=FLAGS.masked_lm_prob,
      mask_token_prob=FLAGS.mask_token_prob,
      random_token_prob=FLAGS.random_token_prob,
      whole_word_mask=FLAGS.do_whole_word_mask,
  )
