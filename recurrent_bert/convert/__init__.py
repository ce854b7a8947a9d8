"""Checkpoint interop: TF1 BERT, Hugging Face and keras-hub weights mapped onto ours and
back out, and warm start across families.

  mapping.py           name and layout tables between our variables and other BERTs', in
                       memory (no files); each table serves both directions
  importers.py         the three checkpoint formats read from files into a `Pretrainer`
  model_dir_source.py  a model dir read whole (encoder + the heads it holds) for export
  exporters.py         a model dir written as a keras-hub preset, HF or TF1 checkpoint
  keras_hub_preset.py  the keras-hub Backbone and tokenizers of every family, and presets
  warm_start.py        any family initialised from a BERT-orig model, by variable path

May import: the base modules, models/ and training/checkpoints. Only commands and tools
import it.
"""
