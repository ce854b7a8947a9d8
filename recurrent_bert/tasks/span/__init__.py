"""Answer-span extraction: SQuAD v1.1 and v2.0, from the official JSON or TFDS, in
doc_stride windows, post-processed into the official prediction files.
`adapter.SpanExtractionAdapter` is what `finetune_squad` trains; the models' kind "span".
"""
