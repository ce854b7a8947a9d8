"""The old path of `recurrent_bert.tools.create_pretraining_data`: runs it, for one more release."""

if __name__ == "__main__":
  from recurrent_bert import commands

  commands.run_moved(__file__)
