"""`ServingModule`: the raw-text signatures of our Keras models, one `tf.Module` to save.

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

Where the pieces live: packing in serving/text_inputs.py, span decoding and SQuAD's
limits in serving/spans.py, tagging's words in serving/tagging.py, saving and model dirs
in serving/export.py.
"""

from typing import Dict, Optional, Sequence

import tensorflow as tf

from recurrent_bert.data import tokenization
from recurrent_bert.serving import spans
from recurrent_bert.serving import tagging
from recurrent_bert.serving.text_inputs import IDS_SIGNATURE
from recurrent_bert.serving.text_inputs import char_offsets
from recurrent_bert.serving.text_inputs import keep_first
from recurrent_bert.serving.text_inputs import pack_inputs
from recurrent_bert.serving.text_inputs import string_inputs


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
      self.encode = tf.function(self._encode_text, input_signature=string_inputs("text"))
      self.encode_pair = tf.function(
          self._encode_text, input_signature=string_inputs("text", "text_pair")
      )
      self.encode_ids = tf.function(self._encode_ids, input_signature=IDS_SIGNATURE)
      self.encode_layers = tf.function(self._encode_layers, input_signature=string_inputs("text"))
      self.encode_layers_pair = tf.function(
          self._encode_layers, input_signature=string_inputs("text", "text_pair")
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
      setattr(self, kind, tf.function(self._classify, input_signature=string_inputs("text")))
      setattr(
          self,
          kind + "_pair",
          tf.function(self._classify, input_signature=string_inputs("text", "text_pair")),
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
          self._answer_question, input_signature=string_inputs("question", "context")
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
            input_signature=string_inputs("question", "context")
            + [tf.TensorSpec([None], tf.float32, name="null_score_diff_threshold")],
        )

    if token_tagger is not None:
      if tag_names is None or len(tag_names) != token_tagger.num_labels:
        raise ValueError(f"the token_tagger needs its {token_tagger.num_labels} tag_names")
      self.tag_names = tf.constant(list(tag_names), tf.string)
      self.tag = tf.function(self._tag_text, input_signature=string_inputs("text"))
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
    question_ids = keep_first(tok.tokenize_flat(question), self.max_query_length)
    context_ids, byte_start, byte_end = tokenization.pieces_with_offsets(tok, context)
    room = self.max_seq_length - 3 - question_ids.row_lengths()
    kept = tf.minimum(context_ids.row_lengths(), room)
    inputs = pack_inputs(
        question_ids,
        keep_first(context_ids, kept),
        self.max_seq_length,
        tok.cls_id,
        tok.sep_id,
        tok.pad_id,
    )
    logits = self.span_extractor(inputs, training=False)
    start_logits = tf.cast(logits["start_logits"], tf.float32)  # [B, T]
    end_logits = tf.cast(logits["end_logits"], tf.float32)
    first = question_ids.row_lengths() + 2  # after [CLS] question [SEP]
    can_bound = spans.boundable_positions(byte_start, byte_end, first, start_logits)
    start, end, score = spans.best_spans(
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
      outputs.update(
          spans.no_answer_outputs(
              start_logits, end_logits, score, has_span, null_score_diff_threshold
          )
      )
      has_span &= ~outputs["no_answer"]  # "no answer" is the empty span at character 0
    return {
        **spans.answer_text(context, byte_start, byte_end, start, end, first, has_span),
        **outputs,
    }

  def _tag(self, words: tf.RaggedTensor):
    """Tags of string words [B, (W)] (serving/tagging.py); the outputs without offsets."""
    tok = self.tokenizer
    pieces, ids = tagging.word_pieces(tok, words)
    inputs = pack_inputs(ids, None, self.max_seq_length, tok.cls_id, tok.sep_id, tok.pad_id)
    logits = tf.cast(self.token_tagger(inputs, training=False), tf.float32)  # [B, T, K]
    return tagging.word_tags(words, pieces, ids, logits, self.tag_names, self.max_seq_length)

  def _tag_words(self, words, num_words):
    return self._tag(tf.RaggedTensor.from_tensor(words, lengths=num_words))

  def _tag_text(self, text):
    words, byte_start, byte_end = tokenization.split_words_with_offsets(text)
    texts = tf.repeat(text, words.row_lengths())  # each word's text

    def char_offset(byte_offset):
      chars = char_offsets(texts, byte_offset)
      return words.with_flat_values(chars).to_tensor(default_value=0)

    return {
        **self._tag(words),
        "start_char": char_offset(byte_start.flat_values),
        "end_char": char_offset(byte_end.flat_values),
    }
