"""Checkpoint interop: TF1 BERT, Hugging Face and keras-hub weights mapped onto ours, and
warm start across families.

May import: the base modules, models/ and training/checkpoints. Only commands and tools
import it.
"""
