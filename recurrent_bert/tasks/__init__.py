"""Fine-tuning tasks: readers of the official files, feature packing, official metrics,
prediction files, and each kind of problem's adapter for the training loop.

May import: the base modules (config, model_dir, io_utils, cli), data/ (tokenizers),
models/ and training/. Never imported by layers/, models/, data/ or training/.
"""
