"""Checkpoint interop: TF1 BERT, Hugging Face and keras-hub weights mapped onto ours, and
warm start across families.

  mapping.py     name and layout mappings onto our variables, in memory (no files)
  importers.py   the three checkpoint formats read from files into a `Pretrainer`
  warm_start.py  any family initialised from a BERT-orig model, by variable path

May import: the base modules, models/ and training/checkpoints. Only commands and tools
import it.
"""
