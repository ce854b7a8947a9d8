"""Text to pretraining batches: vocabularies and tokenizers (in-graph tensorflow-text and
native), the built-in corpus, pretraining instances with NSP and whole-word masking, the
TFRecord schema, the tf.data input pipeline with dynamic masking, and the Beam pipeline.

May import: the base modules (config, model_dir, io_utils, cli). Imported by training/,
tasks/, serving and the commands; it imports none of them, nor layers/ or models/.
"""
