"""Checkpoint interop: TF1 BERT, Hugging Face and keras-hub weights mapped onto ours and
back out, and warm start across families.

  mapping.py           name and layout tables between our variables and other BERTs', in
                       memory (no files); each table serves both directions
  importers.py         the three checkpoint formats read from files into a `Pretrainer`
  model_dir_source.py  a model dir read whole for export (encoder + the heads it trained)
  exporters.py         a model dir written as a keras-hub preset, HF or TF1 checkpoint
  keras_hub_preset.py  the keras-hub Backbone and tokenizers of every family, and presets
  keras_hub_bert.py    a plain BERT as keras-hub's own BertBackbone / BertMaskedLM preset
  warm_start.py        any family initialised from a BERT-orig model, by variable path

May import: the base modules, models/ and saving/. Only commands and tools
import it.
"""
