"""Data: tokenization, pretraining instances and TFRecord schema, task readers."""
