"""Sentence and sentence-pair classification and regression: GLUE, SuperGLUE (BoolQ,
MultiRC) and custom TSV tasks, from their files or TFDS, with leaderboard submission
files. `adapter.ClassificationAdapter` is what `finetune_glue` trains; the models'
kinds "classifier" and "regressor".
"""
