"""Token tagging: CoNLL-2003 NER and word<TAB>tag files, from the files or TFDS, scored
by conlleval's chunk F1. `adapter.TaggingAdapter` is what `finetune_tagging` trains; the
models' kind "tagger".
"""
