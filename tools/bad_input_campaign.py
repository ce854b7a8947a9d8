"""Moved to `recurrent_bert.tools.bad_input_campaign`; this path runs it for one more release."""

if __name__ == "__main__":
  from recurrent_bert import commands

  commands.run_moved(__file__)
