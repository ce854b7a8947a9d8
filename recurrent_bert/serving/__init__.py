"""SavedModels that take raw text: in-graph tokenization, packing and task post-processing.

A `ServingModule` wraps our Keras models and their tokenizer in one `tf.Module` whose
signatures need only `tensorflow` and `tensorflow_text` to load and run. By concern:

  module.py       `ServingModule`: every signature, what it takes and returns, and which
                  one is serving_default (its docstring is the table of signatures)
  text_inputs.py  text to ids in the graph: the signatures' input specs, `truncate_pair`,
                  `pack_inputs` ([CLS] a [SEP] b [SEP]); "Twins, and which is the spec"
  spans.py        SQuAD decoding: `best_spans`, the answer text and its character
                  offsets, v2.0's no-answer scores; the one-window limitation
  tagging.py      token tagging: words to pieces, and logits back to one tag per word
  export.py       saving a module atomically (`export_saved_model`), `describe_signatures`,
                  and model dirs (`export_model_dir`, the library side of
                  `python -m recurrent_bert.export`)

The names below are the package's API: `from recurrent_bert import serving` and
`serving.export_model_dir(...)`.
"""

from recurrent_bert.serving.export import DEFAULT_MAX_SEQ_LENGTH
from recurrent_bert.serving.export import DEFAULT_NULL_SCORE_DIFF_THRESHOLD
from recurrent_bert.serving.export import ExportError
from recurrent_bert.serving.export import describe_signatures
from recurrent_bert.serving.export import export_model_dir
from recurrent_bert.serving.export import export_saved_model
from recurrent_bert.serving.export import recorded_null_score_diff_threshold
from recurrent_bert.serving.export import resolve_max_seq_length
from recurrent_bert.serving.export import save_serving_module
from recurrent_bert.serving.module import ServingModule
from recurrent_bert.serving.spans import NO_SPAN_NULL_SCORE_DIFF
from recurrent_bert.serving.spans import best_spans
from recurrent_bert.serving.text_inputs import pack_inputs
from recurrent_bert.serving.text_inputs import truncate_pair
