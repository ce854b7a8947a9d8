"""Fine-tuning tasks: one subpackage per kind of problem, on a few shared pieces.

Each kind (`models.task_kinds`) has a subpackage named after it that holds its readers
of the official files and of TFDS, its features, its official metric's use and its
prediction files, and its `adapter.py`: the `training.task_adapter.TaskAdapter` that the
`Finetuner` drives (the objective, the metrics and the splits each mode reads).

  classification/   GLUE, SuperGLUE (BoolQ, MultiRC), custom TSV tasks: `registry`
                    (`TaskSpec`s by name), `glue`, `superglue`, `custom_task`,
                    `tfds_reader`, `submission` (leaderboard files), `adapter`
                    (`ClassificationAdapter`, `task_source`); regression (STS-B) too
  span/             SQuAD v1.1/v2.0: `squad` (reader), `squad_alignment` (pieces <->
                    characters), `squad_windows`, `squad_postprocessing` (logits ->
                    answers, the prediction files), `tfds_reader`, `adapter`
                    (`SpanExtractionAdapter`, `squad_reader`)
  tagging/          CoNLL-2003 NER and word<TAB>tag files: `conll`, `conlleval` (chunk
                    F1 by the conlleval script's rules), `tagging_features`,
                    `tfds_reader`, `adapter` (`TaggingAdapter`)
  multiple_choice/  SWAG and choice JSONL: `swag`, `tfds_reader`, `adapter`
                    (`MultipleChoiceAdapter`, `choice_source`)

Shared by the kinds (and importing none of them):

  pair_features.py      [CLS] a [SEP] (b [SEP]) packing, `tokenize_texts`
  windows.py            doc_stride windows and the max-context rule (SQuAD, tagging)
  text_rows.py          task files line by line; `BadRows` (refuse or skip a bad row)
  tfds_source.py        tensorflow-datasets loading, split names, the not-prepared error
  metrics.py            the official metrics
  feature_extraction.py text file -> chosen encoder blocks' vectors (extract_features)
  sample_tasks.py       the small task files the demo and tests fine-tune on

May import: the base modules (config, model_dir, io_utils, cli), data/ (tokenizers, the
feature cache), models/ and training/. A kind's subpackage imports the shared modules and
itself, never another kind (tests/test_architecture.py checks both). Never imported by
layers/, models/, data/ or training/.
"""
