"""Fine-tuning tasks: readers of the official files, feature packing, official metrics,
prediction files, and each kind of problem's adapter for the training loop.

  registry.py           `TaskSpec`, the GLUE and SuperGLUE tasks, looked up by name
  glue.py, superglue.py, custom_task.py, tfds_tasks.py, squad.py
                        readers of the official files (and TFDS)
  squad_alignment.py, squad_windows.py, squad_postprocessing.py
                        SQuAD pieces <-> characters, doc_stride windows, logits -> answers
  conll.py              CoNLL-2003 and word<TAB>tag readers (`TaggedSentence`, the tag sets)
  pair_features.py      [CLS] a [SEP] (b [SEP]) packing of sentence(-pair) examples
  metrics.py            the official metrics
  conlleval.py          chunk precision/recall/F1 by the CoNLL conlleval script's rules
  predictions.py        leaderboard submission and SQuAD prediction files
  classification.py     `ClassificationAdapter` (GLUE, SuperGLUE, custom) and `task_source`
  span_extraction.py    `SpanExtractionAdapter` (SQuAD) and `squad_reader`
  swag.py, multiple_choice.py
                        SWAG CSV / JSONL choice readers; `MultipleChoiceAdapter`
  feature_extraction.py text file -> chosen encoder blocks' vectors (extract_features)
  tagging_features.py, token_tagging.py   windows of tagged sentences, `TaggingAdapter` (NER)

The adapters implement `training.task_adapter.TaskAdapter`, which the `Finetuner` drives.

May import: the base modules (config, model_dir, io_utils, cli), data/ (tokenizers, the
feature cache), models/ and training/. Never imported by layers/, models/, data/ or
training/.
"""
