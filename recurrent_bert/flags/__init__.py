"""Command-line flag groups, one definition each, shared by the commands.

Each module is one group: execution (strategy, precision, --run_dir), optimization,
finetuning, pretraining, masking (the pretraining records' layout and masking recipe),
vocabulary (--vocab_file, --do_lower_case) and corpus (the data tools' text input).
A group defines nothing on import: its `define_flags(...)` is called once at the top of
the command module, and its other functions turn the parsed values into plain settings
for the layers below. Errors in user input go through `cli.fail`. Only commands import
this package; nothing under layers/, models/, data/, training/, tasks/ or convert/ reads
FLAGS.
"""
