"""SavedModels that take raw text: in-graph tokenization, packing and task post-processing.

`ServingModule` wraps our Keras models and their tokenizer (`tokenization.make_tokenizer`:
WordPiece, or a SentencePiece model) in one `tf.Module` whose signatures need only
`tensorflow` and `tensorflow_text` to load and run:

  encode(text)                       -> sequence_output [B, T, H], pooled_output [B, H],
  encode_pair(text, text_pair)          input_ids, input_mask, segment_ids [B, T] int32
  encode_ids(input_ids, input_mask, segment_ids) -> sequence_output, pooled_output
  encode_layers(text)                -> encoder_outputs [B, L, T, H] float32 (every
  encode_layers_pair(text, text_pair)   block's output, block 0 first: features for
                                        ELMo-style use), input_ids, input_mask,
                                        segment_ids [B, T] int32
  classify(text) / classify_pair(text, text_pair)
                                     -> logits, probabilities [B, K], label_id [B] int32,
                                        label [B] string (+ input_ids, input_mask)
  regress(text) / regress_pair(text, text_pair) -> score [B] (+ input_ids, input_mask)
  answer_question(question, context) -> answer [B] string, start_char, end_char [B]
                                        int32 (answer == context[start_char:end_char]),
                                        score [B] float32 (start + end logit of the
                                        best span), context_truncated [B] bool
                                        (+ input_ids, input_mask)
    SQuAD v2.0 models (`null_score_diff_threshold` given) add
                                     -> null_score [B] float32 (start + end logit at
                                        [CLS]), null_score_diff [B] float32 (null_score
                                        - score), no_answer [B] bool (null_score_diff >
                                        the threshold chosen on dev at training time,
                                        kept in the SavedModel as the float32 scalar
                                        variable `null_score_diff_threshold`)
  choose(context, endings [B, C])    -> logits, probabilities [B, C], choice [B] int32
                                        (the chosen ending's index), input_ids [B, C, T]
                                        (each choice packed [CLS] context [SEP] ending [SEP])
  answer_question_with_threshold(question, context, null_score_diff_threshold)
                                     -> the same, with a per-question float32 [B]
                                        threshold instead (v2.0 models only; [B], not
                                        a scalar, so that TF Serving's row-format
                                        requests work: repeat one value for a batch)
  tag(text)                          -> words [B, W] string (padded ""), tags [B, W]
                                        string ("" past num_words or the cut),
                                        num_words [B] int32, start_char, end_char
                                        [B, W] int32 (words == text[start_char:end_char]),
                                        logits [B, W, K] float32 (at each word's first
                                        piece; 0 where the tag is ""), truncated [B]
                                        bool
  tag_words(words [B, W] string, num_words [B] int32)
                                     -> the same but start_char / end_char, for text
                                        already split into words (CoNLL tokens)

serving_default is the task's own signature: classify / regress, or classify_pair /
regress_pair for sentence-pair tasks (`text_pair`: a client of the default signature must
not silently lose the second text), answer_question, choose or tag; encode when there is
no task.

Tagging (`token_tagger`): `tag` splits text into the basic tokenizer's words
(`tokenization.split_words_with_offsets`, as SQuAD contexts); `tag_words` takes words as
given. Either way each word is tokenized on its own, a word of no piece stands as [UNK],
and its tag is read at its first piece (as `tasks/tagging_features.py` trains). Serving
reads ONE window per row, [CLS] words [SEP] cut to `max_seq_length`, with NO document
context (training, by default, fills windows with the neighbouring sentences, and cuts a
long sentence into several windows): words whose first piece falls past the cut get the
tag "" and `truncated` is set.

Packing is google-research/bert's: `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, pairs cut
longest first (a tie cuts the second text) to fit `max_seq_length`. T is the longest packed
row of the batch (at most `max_seq_length`); shorter rows are right-padded, and
`input_mask` says which positions are real.

SQuAD limitation: `answer_question` reads ONE window per question,
`[CLS] question [SEP] context [SEP]` with the question cut to `max_query_length` pieces and
the context cut to what is left of `max_seq_length`; answers past the cut cannot be found
(`context_truncated` flags those rows). For long contexts, use the windowed numpy
pipeline (`tasks/squad_windows.py`: doc_stride windows, `tasks/squad_postprocessing.py`).
The span is the best `start_logit + end_logit` with start <= end < start +
max_answer_length over the context pieces; a piece maps to the characters of the
basic-tokenizer word it came from, so answers are exact substrings of the original
context (as in `tasks/squad_alignment.py`). With a SentencePiece model a piece maps to
its own characters (`tokenization.pieces_with_offsets`), and a lone "▁" piece (no
character) neither starts nor ends the span.

SQuAD v2.0 "no answer": null_score_diff is `postprocess_squad`'s null odds of the window,
null score minus best span score; a row is answered "no answer" when it exceeds the
threshold, and then `answer` is "" and start_char = end_char = 0 (so answer ==
context[start_char:end_char] still holds); `score` stays the best span's. A row with no
context piece has no span: no_answer whatever the threshold, null_score_diff 1e9 (as in
`postprocess_squad`). The span search here is exhaustive, where `postprocess_squad` pairs
only its n_best_size best starts and ends: the two agree whenever that best span is among
them (always when n_best_size >= the context pieces).

Twins, and which is the spec: serving must pack and decode inside the graph, training
reads numpy features, so two pieces exist twice. The numpy side is the spec and the graph
side is held to it on the same inputs: `truncate_pair` and the packing here against
`tasks/pair_features.py` (`truncate_longest_first`, `pack_pair`; tests/support/export_checks.py
serves exported models on rows that pipeline packed), `best_spans` against
`tasks/squad_postprocessing.py` (`postprocess_squad`; tests/end_to_end/test_export_tasks.py). Change
the spec first, then its twin here.

`export_model_dir` is the library side of `python -m recurrent_bert.export`: it builds
the module from a fine-tuning model dir (the task's signatures: the threshold of a v2.0
model is the dev `best_f1_threshold` of its best checkpoint, 0.0 when none was recorded;
text_pair as recorded in task_info.json) or from a pretraining or converted model dir
(encoder signatures).
"""

import os
from typing import Dict, Optional, Sequence

from absl import logging
import tensorflow as tf

from recurrent_bert import io_utils
from recurrent_bert import model_dir as layout
from recurrent_bert.data import tokenization
from recurrent_bert.training import checkpoints

# null_score_diff of a row without a span (no context piece): "no answer" under any
# sensible threshold, finite so that JSON clients can read it (`postprocess_squad`'s value).
NO_SPAN_NULL_SCORE_DIFF = 1e9
# The no-answer threshold when training recorded none: google-research/bert's default.
DEFAULT_NULL_SCORE_DIFF_THRESHOLD = 0.0


def _strings(*names):
  """Input signature of string [batch] arguments (named as the signature's inputs)."""
  return [tf.TensorSpec([None], tf.string, name=name) for name in names]


_IDS_SIGNATURE = [
    tf.TensorSpec([None, None], tf.int32, name=name)
    for name in ("input_ids", "input_mask", "segment_ids")
]


def _keep_first(ids: tf.RaggedTensor, counts: tf.Tensor) -> tf.RaggedTensor:
  """The first counts[b] (or `counts`, a scalar) items of each row b of a [B, (n)] ragged."""
  lengths = ids.row_lengths()
  keep = tf.minimum(lengths, tf.cast(counts, lengths.dtype))  # also broadcasts a scalar
  return tf.ragged.boolean_mask(ids, tf.ragged.range(lengths) < keep[:, None])


def truncate_pair(ids_a: tf.RaggedTensor, ids_b: Optional[tf.RaggedTensor], max_pieces: int):
  """Cuts (a, b) to at most `max_pieces` pieces together, longest first.

  Closed form of google-research/bert's loop "pop from the longer, the second on a tie":
  a keeps min(len_a, max(budget - len_b, ceil(budget / 2))), b keeps the rest.

  Args:
    ids_a, ids_b: int RaggedTensors [B, (pieces)]; ids_b may be None.
    max_pieces: the budget.
  Returns:
    (ids_a, ids_b) truncated, same types.
  """
  len_a = ids_a.row_lengths()
  if ids_b is None:
    return _keep_first(ids_a, tf.minimum(len_a, max_pieces)), None
  len_b = ids_b.row_lengths()
  keep_a = tf.minimum(len_a, tf.maximum(max_pieces - len_b, (max_pieces + 1) // 2))
  keep_b = tf.minimum(len_b, max_pieces - keep_a)
  return _keep_first(ids_a, keep_a), _keep_first(ids_b, keep_b)


def pack_inputs(
    ids_a: tf.RaggedTensor,
    ids_b: Optional[tf.RaggedTensor],
    max_seq_length: int,
    cls_id: int,
    sep_id: int,
    pad_id: int,
) -> Dict[str, tf.Tensor]:
  """Truncates and packs [CLS] a [SEP] (b [SEP]) into right-padded model inputs.

  Args:
    ids_a, ids_b: int RaggedTensors [B, (pieces)]; ids_b may be None.
    max_seq_length: longest packed row, special tokens included.
  Returns:
    dict of int32 [B, T] input_ids, input_mask, segment_ids; T = the longest packed row.
  """
  special = 3 if ids_b is not None else 2
  ids_a, ids_b = truncate_pair(ids_a, ids_b, max_seq_length - special)
  ids_a = tf.cast(ids_a, tf.int32)
  batch = ids_a.nrows()

  def column(value):
    return tf.RaggedTensor.from_tensor(tf.fill(tf.stack([batch, 1]), value))

  pieces = [column(cls_id), ids_a, column(sep_id)]
  segments = [column(0), tf.zeros_like(ids_a), column(0)]
  if ids_b is not None:
    ids_b = tf.cast(ids_b, tf.int32)
    pieces += [ids_b, column(sep_id)]
    segments += [tf.ones_like(ids_b), column(1)]
  input_ids = tf.concat(pieces, axis=1)
  return {
      "input_ids": input_ids.to_tensor(default_value=pad_id),
      "input_mask": tf.ones_like(input_ids).to_tensor(default_value=0),
      "segment_ids": tf.concat(segments, axis=1).to_tensor(default_value=0),
  }


def best_spans(start_logits, end_logits, first, length, max_answer_length, can_bound=None):
  """The best span start <= end < start + max_answer_length inside [first, first+length).

  Args:
    start_logits, end_logits: float [B, T].
    first, length: int [B], where the context pieces sit in each row.
    can_bound: bool [B, T] or None (all): positions that may start or end a span.
  Returns:
    (start, end, score): int32 [B] positions and float32 [B] start + end logit; rows with
    no context get start = end = first and score -inf.
  """
  steps = tf.shape(start_logits)[1]
  positions = tf.range(steps)[None, :]
  first, length = tf.cast(first, tf.int32)[:, None], tf.cast(length, tf.int32)[:, None]
  in_context = (positions >= first) & (positions < first + length)  # [B, T]
  if can_bound is not None:
    in_context &= can_bound
  offsets = positions[0][None, :] - positions[0][:, None]  # [T, T]: end - start
  allowed = (
      in_context[:, :, None]
      & in_context[:, None, :]
      & ((offsets >= 0) & (offsets < max_answer_length))[None]
  )
  scores = start_logits[:, :, None] + end_logits[:, None, :]
  scores = tf.where(allowed, scores, float("-inf"))
  best = tf.argmax(tf.reshape(scores, [tf.shape(scores)[0], -1]), axis=1, output_type=tf.int32)
  score = tf.reduce_max(scores, axis=[1, 2])
  has_span = tf.reduce_any(in_context, axis=1)
  start = tf.where(has_span, best // steps, first[:, 0])
  end = tf.where(has_span, best % steps, first[:, 0])
  return start, end, score


class ServingModule(tf.Module):
  """Serving signatures over our Keras models (module docstring lists them).

  Args:
    tokenizer: the `tokenizer_interface.Tokenizer` of the model's vocabulary; its vocab
      file is also stored as a SavedModel asset (`assets/vocab.txt`, or the `.model`).
    max_seq_length: longest packed input (truncation limit), special tokens included.
    encoder: an `Encoder` -> encode, encode_pair, encode_ids, encode_layers(_pair).
    classifier: a `Classifier` -> classify(_pair) (K > 1) or regress(_pair) (K = 1).
    label_names: K label strings of the classifier (default "0".."K-1").
    text_pair: the classifier's task takes two texts: serving_default is classify_pair /
      regress_pair instead of classify / regress.
    span_extractor: a `SpanExtractor` -> answer_question.
    multiple_choice: a `MultipleChoice` -> choose.
    token_tagger: a `TokenTagger` -> tag, tag_words.
    tag_names: the tagger's K tag strings.
    max_query_length: question pieces kept by answer_question.
    max_answer_length: longest answer in pieces.
    null_score_diff_threshold: a SQuAD v2.0 span extractor: answer_question also decides
      "no answer" (null_score_diff > this), and answer_question_with_threshold takes the
      threshold per call. None: a v1.1 model, always a span.
  """

  def __init__(
      self,
      tokenizer,
      max_seq_length: int,
      *,
      encoder=None,
      classifier=None,
      label_names: Optional[Sequence[str]] = None,
      text_pair: bool = False,
      span_extractor=None,
      max_query_length: int = 64,
      max_answer_length: int = 30,
      null_score_diff_threshold: Optional[float] = None,
      multiple_choice=None,
      token_tagger=None,
      tag_names: Optional[Sequence[str]] = None,
  ):
    super().__init__(name="recurrent_bert_serving")
    if max_seq_length < 3:
      raise ValueError(
          f"max_seq_length={max_seq_length} leaves no room for text ([CLS], [SEP], [SEP] take 3)"
      )
    if all(m is None for m in (encoder, classifier, span_extractor, multiple_choice, token_tagger)):
      raise ValueError(
          "ServingModule needs an encoder, classifier, span_extractor, multiple_choice or "
          "token_tagger"
      )
    if text_pair and classifier is None:
      raise ValueError("text_pair is about a classifier's task, and there is none")
    if null_score_diff_threshold is not None and span_extractor is None:
      raise ValueError("null_score_diff_threshold needs a span_extractor")
    self.tokenizer = tokenizer
    self.vocab_file = tf.saved_model.Asset(tokenizer.vocab_file)
    self.max_seq_length = max_seq_length
    # The Keras models are called, not saved as objects (bypassing tf.Module's tracking
    # __setattr__), so the SavedModel holds no Keras objects, only their tf.Variables:
    # Keras 3 variables wrap them, and tracking these makes the SavedModel own the
    # weights, as keras.export.ExportArchive does.
    for name, model in (
        ("encoder", encoder),
        ("classifier", classifier),
        ("span_extractor", span_extractor),
        ("multiple_choice", multiple_choice),
        ("token_tagger", token_tagger),
    ):
      object.__setattr__(self, name, model)
    models = [
        m
        for m in (encoder, classifier, span_extractor, multiple_choice, token_tagger)
        if m is not None
    ]
    self.model_variables = list({id(v): v.value for m in models for v in m.variables}.values())
    if encoder is not None:
      self.encode = tf.function(self._encode_text, input_signature=_strings("text"))
      self.encode_pair = tf.function(
          self._encode_text, input_signature=_strings("text", "text_pair")
      )
      self.encode_ids = tf.function(self._encode_ids, input_signature=_IDS_SIGNATURE)
      self.encode_layers = tf.function(self._encode_layers, input_signature=_strings("text"))
      self.encode_layers_pair = tf.function(
          self._encode_layers, input_signature=_strings("text", "text_pair")
      )
    if classifier is not None:
      num_classes = classifier.num_classes
      if label_names is None:
        label_names = [str(i) for i in range(num_classes)]
      if num_classes > 1 and len(label_names) != num_classes:
        raise ValueError(
            f"label_names has {len(label_names)} names, the classifier {num_classes} classes"
        )
      self.label_names = tf.constant(list(label_names), tf.string)
      kind = "classify" if num_classes > 1 else "regress"
      setattr(self, kind, tf.function(self._classify, input_signature=_strings("text")))
      setattr(
          self,
          kind + "_pair",
          tf.function(self._classify, input_signature=_strings("text", "text_pair")),
      )
    self.text_pair = text_pair
    if multiple_choice is not None:
      self.choose = tf.function(
          self._choose,
          input_signature=[
              tf.TensorSpec([None], tf.string, name="context"),
              tf.TensorSpec([None, None], tf.string, name="endings"),
          ],
      )
    if span_extractor is not None:
      if max_query_length + 4 > max_seq_length:
        raise ValueError(
            f"max_query_length={max_query_length} leaves no room for the "
            f"context in max_seq_length={max_seq_length}"
        )
      self.max_query_length = max_query_length
      self.max_answer_length = max_answer_length
      self.with_no_answer = null_score_diff_threshold is not None
      self.answer_question = tf.function(
          self._answer_question, input_signature=_strings("question", "context")
      )
      if null_score_diff_threshold is not None:
        # A variable, not a traced constant: the SavedModel records the default, which
        # clients read as `loaded.null_score_diff_threshold`.
        self.null_score_diff_threshold = tf.Variable(
            float(null_score_diff_threshold),
            dtype=tf.float32,
            trainable=False,
            name="null_score_diff_threshold",
        )
        # [B], not a scalar: TF Serving's row-format ("instances") requests need every
        # input to have the batch dimension. One value for all: repeat it.
        self.answer_question_with_threshold = tf.function(
            self._answer_question,
            input_signature=_strings("question", "context")
            + [tf.TensorSpec([None], tf.float32, name="null_score_diff_threshold")],
        )

    if token_tagger is not None:
      if tag_names is None or len(tag_names) != token_tagger.num_labels:
        raise ValueError(f"the token_tagger needs its {token_tagger.num_labels} tag_names")
      self.tag_names = tf.constant(list(tag_names), tf.string)
      self.tag = tf.function(self._tag_text, input_signature=_strings("text"))
      self.tag_words = tf.function(
          self._tag_words,
          input_signature=[
              tf.TensorSpec([None, None], tf.string, name="words"),
              tf.TensorSpec([None], tf.int32, name="num_words"),
          ],
      )

  SIGNATURE_NAMES = (
      "encode",
      "encode_pair",
      "encode_ids",
      "encode_layers",
      "encode_layers_pair",
      "classify",
      "classify_pair",
      "regress",
      "regress_pair",
      "answer_question",
      "answer_question_with_threshold",
      "choose",
      "tag",
      "tag_words",
  )

  def signature_functions(self) -> Dict[str, tf.types.experimental.GenericFunction]:
    """{signature name: tf.function} of the models given, plus serving_default."""
    functions = {name: getattr(self, name) for name in self.SIGNATURE_NAMES if hasattr(self, name)}
    # TF Serving and saved_model_cli look for serving_default: the task's own signature
    # when there is one (the two-text one for pair tasks), else encode.
    task_signatures = [
        name
        for name in ("classify", "regress", "answer_question", "choose", "tag")
        if name in functions
    ]
    default = (task_signatures or list(functions))[0]
    if self.text_pair and default in ("classify", "regress"):
      default += "_pair"
    functions["serving_default"] = functions[default]
    return functions

  # -- pieces shared by the signatures --------------------------------------------

  def _pack_text(self, text, text_pair=None):
    tok = self.tokenizer
    ids_b = None if text_pair is None else tok.tokenize_flat(text_pair)
    return pack_inputs(
        tok.tokenize_flat(text), ids_b, self.max_seq_length, tok.cls_id, tok.sep_id, tok.pad_id
    )

  def _encode_ids(self, input_ids, input_mask, segment_ids):
    outputs = self.encoder(
        {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids},
        training=False,
    )
    return {
        "sequence_output": tf.cast(outputs["sequence_output"], tf.float32),
        "pooled_output": tf.cast(outputs["pooled_output"], tf.float32),
    }

  def _encode_text(self, text, text_pair=None):
    inputs = self._pack_text(text, text_pair)
    return {**self._encode_ids(**inputs), **inputs}

  def _encode_layers(self, text, text_pair=None):
    inputs = self._pack_text(text, text_pair)
    blocks = self.encoder(inputs, training=False)["encoder_outputs"]  # L x [B, T, H]
    return {"encoder_outputs": tf.cast(tf.stack(blocks, axis=1), tf.float32), **inputs}

  def _classify(self, text, text_pair=None):
    inputs = self._pack_text(text, text_pair)
    logits = tf.cast(self.classifier(inputs, training=False), tf.float32)  # [B, K]
    outputs = {
        "input_ids": inputs["input_ids"],
        "input_mask": inputs["input_mask"],
        "logits": logits,
    }
    if self.classifier.num_classes == 1:
      outputs["score"] = logits[:, 0]
    else:
      label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
      outputs.update(
          probabilities=tf.nn.softmax(logits),
          label_id=label_id,
          label=tf.gather(self.label_names, label_id),
      )
    return outputs

  def _choose(self, context, endings):
    """choose: context [B] and endings [B, C] -> scores of the B x C choices."""
    num_choices = tf.shape(endings)[1]
    # Row b * C + c packs context b with its ending c.
    inputs = self._pack_text(tf.repeat(context, num_choices), tf.reshape(endings, [-1]))
    shape = tf.stack([tf.shape(endings)[0], num_choices, tf.shape(inputs["input_ids"])[1]])
    inputs = {name: tf.reshape(value, shape) for name, value in inputs.items()}
    logits = tf.cast(self.multiple_choice(inputs, training=False), tf.float32)  # [B, C]
    return {
        "logits": logits,
        "probabilities": tf.nn.softmax(logits),
        "choice": tf.argmax(logits, axis=-1, output_type=tf.int32),
        "input_ids": inputs["input_ids"],
    }

  def _answer_question(self, question, context, null_score_diff_threshold=None):
    """answer_question(_with_threshold); the module docstring describes the outputs.

    `null_score_diff_threshold`: float32 [B], or None for the module's default (v2.0).
    """
    tok = self.tokenizer
    question_ids = _keep_first(tok.tokenize_flat(question), self.max_query_length)
    context_ids, byte_start, byte_end = tokenization.pieces_with_offsets(tok, context)
    room = self.max_seq_length - 3 - question_ids.row_lengths()
    kept = tf.minimum(context_ids.row_lengths(), room)
    inputs = pack_inputs(
        question_ids,
        _keep_first(context_ids, kept),
        self.max_seq_length,
        tok.cls_id,
        tok.sep_id,
        tok.pad_id,
    )
    logits = self.span_extractor(inputs, training=False)
    start_logits = tf.cast(logits["start_logits"], tf.float32)  # [B, T]
    end_logits = tf.cast(logits["end_logits"], tf.float32)
    first = question_ids.row_lengths() + 2  # after [CLS] question [SEP]
    # Pieces that cover a character (not SentencePiece's lone "▁"), at their row positions.
    covers = (byte_end > byte_start).to_tensor(default_value=False)  # [B, P]
    piece_of = tf.range(tf.shape(start_logits)[1], dtype=tf.int64)[None, :] - first[:, None]
    piece_of = tf.clip_by_value(
        piece_of, 0, tf.maximum(tf.cast(tf.shape(covers)[1], tf.int64) - 1, 0)
    )
    covers = tf.pad(covers, [[0, 0], [0, 1]])  # rows without context: a dummy column
    can_bound = tf.gather(covers, piece_of, batch_dims=1)
    start, end, score = best_spans(
        start_logits, end_logits, first, kept, self.max_answer_length, can_bound
    )
    has_span = score > float("-inf")
    outputs = {
        "score": score,
        "context_truncated": kept < context_ids.row_lengths(),
        "input_ids": inputs["input_ids"],
        "input_mask": inputs["input_mask"],
    }
    if self.with_no_answer:  # SQuAD v2.0
      if null_score_diff_threshold is None:
        null_score_diff_threshold = self.null_score_diff_threshold
      null_score = start_logits[:, 0] + end_logits[:, 0]  # [CLS]
      null_score_diff = tf.where(has_span, null_score - score, NO_SPAN_NULL_SCORE_DIFF)
      # A row without a span answers "no answer" whatever the threshold.
      no_answer = ~has_span | (null_score_diff > null_score_diff_threshold)
      outputs.update(null_score=null_score, null_score_diff=null_score_diff, no_answer=no_answer)
      has_span &= ~no_answer  # "no answer" is the empty span at character 0
    piece_start = tf.where(has_span, start - tf.cast(first, tf.int32), 0)
    piece_end = tf.where(has_span, end - tf.cast(first, tf.int32), 0)
    # Rows without context get a dummy piece column so the gathers stay in range.
    starts = tf.pad(byte_start.to_tensor(), [[0, 0], [0, 1]])
    ends = tf.pad(byte_end.to_tensor(), [[0, 0], [0, 1]])
    answer_byte_start = tf.where(has_span, tf.gather(starts, piece_start, batch_dims=1), 0)
    answer_byte_end = tf.where(has_span, tf.gather(ends, piece_end, batch_dims=1), 0)
    answer = tf.strings.substr(
        context, answer_byte_start, answer_byte_end - answer_byte_start, unit="BYTE"
    )

    def char_offset(byte_offset):
      prefix = tf.strings.substr(context, tf.zeros_like(byte_offset), byte_offset, unit="BYTE")
      return tf.strings.length(prefix, unit="UTF8_CHAR")

    return {
        "answer": answer,
        "start_char": char_offset(answer_byte_start),
        "end_char": char_offset(answer_byte_end),
        **outputs,
    }

  def _tag(self, words: tf.RaggedTensor):
    """Tags of string words [B, (W)] (module docstring); the outputs without offsets."""
    tok = self.tokenizer
    pieces = tok.tokenize_flat(words.flat_values)  # [words, (pieces)]
    empty = tf.cast(pieces.row_lengths() == 0, tf.int64)
    unk = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(empty)], tf.constant(tok.unk_id, tf.int64)), empty
    )
    pieces = tf.concat([pieces, unk], axis=1)  # a word of no piece reads as [UNK]
    ids = words.with_flat_values(pieces).merge_dims(1, 2)  # [B, (P)]
    inputs = pack_inputs(ids, None, self.max_seq_length, tok.cls_id, tok.sep_id, tok.pad_id)
    logits = tf.cast(self.token_tagger(inputs, training=False), tf.float32)  # [B, T, K]
    counts = words.with_flat_values(tf.cast(pieces.row_lengths(), tf.int32)).to_tensor()
    first = tf.math.cumsum(counts, axis=1, exclusive=True) + 1  # [B, W] row positions
    num_words = tf.cast(words.row_lengths(), tf.int32)
    real = tf.range(tf.shape(counts)[1])[None, :] < num_words[:, None]
    seen = real & (first <= self.max_seq_length - 2)
    word_logits = tf.gather(logits, tf.minimum(first, tf.shape(logits)[1] - 1), batch_dims=1)
    word_logits = tf.where(seen[:, :, None], word_logits, 0.0)  # [B, W, K]
    tag_id = tf.argmax(word_logits, axis=-1, output_type=tf.int32)
    return {
        "words": words.to_tensor(default_value=""),
        "tags": tf.where(seen, tf.gather(self.tag_names, tag_id), ""),
        "num_words": num_words,
        "logits": word_logits,
        "truncated": ids.row_lengths() > self.max_seq_length - 2,
    }

  def _tag_words(self, words, num_words):
    return self._tag(tf.RaggedTensor.from_tensor(words, lengths=num_words))

  def _tag_text(self, text):
    words, byte_start, byte_end = tokenization.split_words_with_offsets(text)
    texts = tf.repeat(text, words.row_lengths())  # each word's text

    def char_offset(byte_offset):
      prefix = tf.strings.substr(texts, tf.zeros_like(byte_offset), byte_offset, unit="BYTE")
      chars = tf.strings.length(prefix, unit="UTF8_CHAR")
      return words.with_flat_values(chars).to_tensor(default_value=0)

    return {
        **self._tag(words),
        "start_char": char_offset(byte_start.flat_values),
        "end_char": char_offset(byte_end.flat_values),
    }


def describe_signatures(module: ServingModule, export_dir: Optional[str] = None) -> Dict[str, str]:
  """{signature name: "inputs -> outputs"} of a ServingModule, for logs and reports.

  With `export_dir`, the SavedModel just saved from `module`, the outputs are read from
  its signature definitions; without, each signature function is traced for them (saving
  traced them already: tracing is most of an export's time).
  """
  saved = _saved_signature_outputs(export_dir) if export_dir else {}
  described = {}
  for name, function in module.signature_functions().items():
    inputs = ", ".join(
        f"{spec.name} {spec.dtype.name}{spec.shape.as_list()}" for spec in function.input_signature
    )
    if name in saved:
      outputs = saved[name]
    else:
      traced = function.get_concrete_function().structured_outputs
      outputs = {key: (t.dtype.name, t.shape.as_list()) for key, t in traced.items()}
    outputs = ", ".join(f"{key} {dtype}{shape}" for key, (dtype, shape) in sorted(outputs.items()))
    described[name] = f"({inputs}) -> {outputs}"
    if getattr(module, "with_no_answer", False) and function is module.answer_question:
      described[
          name
      ] += f"; no_answer = null_score_diff > {float(module.null_score_diff_threshold.numpy()):g}"
  return described


def _saved_signature_outputs(export_dir: str) -> Dict[str, Dict[str, tuple]]:
  """{signature: {output: (dtype name, shape list)}} from a SavedModel's saved_model.pb."""
  # The SavedModel's own proto: TensorFlow has no public reader of signature definitions
  # short of loading the whole model.
  from tensorflow.core.protobuf import saved_model_pb2

  proto = saved_model_pb2.SavedModel()
  with tf.io.gfile.GFile(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
    proto.ParseFromString(f.read())
  described = {}
  for name, signature in proto.meta_graphs[0].signature_def.items():
    outputs = signature.outputs.values()
    if all(info.WhichOneof("encoding") == "name" and info.dtype for info in outputs):
      # Dense tensors only; a signature with composite outputs is traced instead.
      described[name] = {
          key: (
              tf.dtypes.as_dtype(info.dtype).name,
              [None if dim.size < 0 else dim.size for dim in info.tensor_shape.dim],
          )
          for key, info in signature.outputs.items()
      }
  return described


def save_serving_module(module: ServingModule, export_dir: str) -> Dict[str, str]:
  """Writes the SavedModel atomically: a temp dir beside `export_dir`, then a rename.

  An existing `export_dir` stays complete until the new one replaces it.

  Returns:
    describe_signatures(module).
  """
  with io_utils.atomic_directory(export_dir) as tmp_dir:
    tf.saved_model.save(module, tmp_dir, signatures=module.signature_functions())
    return describe_signatures(module, tmp_dir)


def export_saved_model(export_dir: str, tokenizer, max_seq_length: int, **models) -> Dict[str, str]:
  """Builds a ServingModule (`models`: its keyword arguments) and saves it atomically.

  Example:
    export_saved_model("out/classifier", tokenizer, 128, classifier=model,
                       label_names=["negative", "positive"])
  Returns:
    {signature name: "inputs -> outputs"}.
  """
  return save_serving_module(ServingModule(tokenizer, max_seq_length, **models), export_dir)


def recorded_null_score_diff_threshold(directory: str) -> Optional[float]:
  """The no-answer threshold chosen on dev for the checkpoint in `directory` (best/).

  That is best_metrics.json's `best_f1_threshold` (`metrics.squad_v2_scores`) of the
  first eval split: the null_score_diff above which "no answer" scored the best dev F1.

  Returns:
    The threshold, or None when none was recorded (no evaluation, or SQuAD v1.1).
  """
  best = layout.read_json_if_exists(os.path.join(directory, layout.BEST_METRICS_FILE))
  if not best:
    return None
  split = (best.get("eval_splits") or ["dev"])[0]
  value = (best.get(split) or {}).get("best_f1_threshold")
  return None if value is None else float(value)


# ------------------------------------------------------------- model dirs

DEFAULT_MAX_SEQ_LENGTH = 512


class ExportError(ValueError):
  """A flag or the model dir does not allow an export (the message names which)."""


def resolve_max_seq_length(config, max_seq_length: Optional[int]) -> int:
  """--max_seq_length checked against the model (absolute positions cap it)."""
  limit = config.max_position_embeddings if config.position_embedding == "absolute" else None
  if max_seq_length is None:
    return limit or DEFAULT_MAX_SEQ_LENGTH
  if max_seq_length < 3:
    raise ExportError(f"--max_seq_length={max_seq_length} must be at least 3")
  if limit is not None and max_seq_length > limit:
    raise ExportError(
        f"--max_seq_length={max_seq_length} exceeds the model's max_position_embeddings={limit}"
    )
  return max_seq_length


def export_model_dir(
    model_dir: str,
    export_dir: str,
    max_seq_length: Optional[int] = None,
    vocab_file: Optional[str] = None,
    do_lower_case: Optional[bool] = None,
) -> Dict[str, str]:
  """Writes the text-in SavedModel of `model_dir` to `export_dir`.

  A fine-tuning model_dir (finetune_glue / finetune_squad: it has task_info.json) gives
  the task's signatures (classify / regress / answer_question / choose / tag, from best/
  when present)
  plus encode; anything else `checkpoints.load_encoder` reads gives encode signatures.
  Defaults: vocab.txt of the model dir; casing as recorded there; max_seq_length the
  fine-tuning length, else the model's maximum.

  Returns:
    {signature name: "inputs -> outputs"} of what was written.
  Raises:
    ExportError, CheckpointNotFoundError: naming the flag or path at fault.
  """
  from recurrent_bert.models import task_kinds
  from recurrent_bert.training import finetuning

  task_model = info = None
  source = checkpoints.resolve_model(model_dir)
  config_dir = source.config_dir
  if layout.is_finetuning_dir(model_dir):
    task_model, info, config_dir, _ = finetuning.load_task_model(model_dir)
    encoder = task_model.encoder
    if max_seq_length is None:
      max_seq_length = info.max_seq_length
  else:
    encoder = checkpoints.load_encoder(model_dir)
  max_seq_length = resolve_max_seq_length(encoder.config, max_seq_length)
  vocab_file = vocab_file or source.vocab_file
  if vocab_file is None:
    raise ExportError(
        f"{model_dir!r} ({source.kind}) records no vocabulary "
        f"({layout.VOCAB_FILE} or {layout.SENTENCEPIECE_MODEL_FILE}); pass --vocab_file"
    )
  if do_lower_case is None:
    do_lower_case = source.do_lower_case
    if do_lower_case is None:
      logging.warning(
          "%s records no do_lower_case; lower-casing (pass --do_lower_case "
          "or --nodo_lower_case to choose)",
          model_dir,
      )
      do_lower_case = True
  tokenizer = tokenization.make_tokenizer(vocab_file, do_lower_case=do_lower_case)
  if tokenizer.vocab_size > encoder.config.vocab_size:
    raise ExportError(
        f"vocab file {vocab_file!r} has {tokenizer.vocab_size} tokens, "
        f"the model only {encoder.config.vocab_size} embeddings"
    )
  models = {"encoder": encoder}
  if info is not None:
    kind = task_kinds.get(info.kind)
    models.update({kind.serving_role: task_model}, **kind.serving_arguments(info))
  if info is not None and info.task == "squad_v2":
    threshold = recorded_null_score_diff_threshold(config_dir)
    if threshold is None:
      threshold = DEFAULT_NULL_SCORE_DIFF_THRESHOLD
      logging.warning(
          "%s records no dev best_f1_threshold (trained without "
          "evaluation?): no_answer when null_score_diff > %g",
          config_dir,
          threshold,
      )
    else:
      logging.info("no_answer when null_score_diff > %g (best_f1_threshold on dev)", threshold)
    models["null_score_diff_threshold"] = threshold
  return export_saved_model(export_dir, tokenizer, max_seq_length, **models)
