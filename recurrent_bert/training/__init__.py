"""Training machinery, flag-free: the custom tf.distribute loop and its objectives,
replica-summable metric sums, optimisation (AdamW, LAMB, schedules, accumulation),
distribution (the one strategy factory), prediction, held-out pretraining evaluation and
the fine-tuning runner with its task adapter protocol.

May import: the base modules, data/, models/ and saving/ (every model file is opened and
written through it). Never imports tasks/, convert/, flags/ or the commands: a task
adapter is handed to the runner, not looked up by it.
"""
