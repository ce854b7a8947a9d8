"""recurrent_bert: BERT, TRANS-BLSTM and SwishRNN-BERT on TensorFlow 2 / Keras 3."""

__version__ = "0.1.0"
