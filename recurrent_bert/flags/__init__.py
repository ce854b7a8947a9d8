"""Command-line flag groups, one definition each, shared by the commands.

Each module defines one group (execution, optimization, finetuning, ...) and turns the
parsed values into plain settings for the layers below. Only commands import this
package; nothing under layers/, models/, data/, training/, tasks/ or convert/ reads FLAGS.
"""
