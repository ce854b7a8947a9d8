"""The old home of the data tools, conversion and the sweep: now `recurrent_bert.tools`.

Each `tools/NAME.py` left here runs `recurrent_bert.tools.NAME` (flags, output and exit
codes unchanged) after one line on stderr saying where it moved
(`recurrent_bert.commands.run_moved`). They go in the release after 0.1.0; the console
commands (`rbert-build-vocab`, ...) are the lasting names.
"""
