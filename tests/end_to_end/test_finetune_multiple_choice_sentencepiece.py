"""finetune_multiple_choice with a SentencePiece model as --vocab_file, end to end on
generated SWAG files: trains a few steps, evaluates, records the model and exports a
SavedModel whose choose, served in a fresh process, packs each context with each ending
as the `sentencepiece` library tokenizes them."""

import pytest
import sentencepiece

from recurrent_bert import serving
from recurrent_bert.tasks import sample_tasks as generated_tasks
from tests.support.sentencepiece_tasks import check_recorded
from tests.support.sentencepiece_tasks import serve_exports
from tests.support.sentencepiece_tasks import train
from tests.support.sentencepiece_tasks import write_task_model

pytestmark = pytest.mark.slow(seconds=45)


def test_multiple_choice_trains_evaluates_and_serves_with_a_sentencepiece_model(tmp_path):
  model_file = write_task_model(str(tmp_path / "spm"))
  swag = generated_tasks.write_swag_folder(tmp_path / "swag", num_train=48, num_dev=16, num_test=4)
  model_dir = train(
      tmp_path,
      model_file,
      "swag",
      ["recurrent_bert.finetune_multiple_choice", f"--data_dir={swag}"],
  )
  check_recorded(model_dir, model_file)
  export_dir = str(tmp_path / "export")
  serving.export_model_dir(model_dir, export_dir, max_seq_length=64)
  contexts = ["The cat, a Mango!", "zork (slow) ."]
  endings = [["yes the dog", "no  tree"], ["quiet yes", "cold, no"]]
  [chosen] = serve_exports([(export_dir, "choose", {"context": contexts, "endings": endings})])
  reference = sentencepiece.SentencePieceProcessor(model_file=model_file)
  cls, sep = reference.piece_to_id("[CLS]"), reference.piece_to_id("[SEP]")
  for row, context in enumerate(contexts):
    for choice, ending in enumerate(endings[row]):
      want = [cls, *reference.encode(context), sep, *reference.encode(ending), sep]
      assert chosen["input_ids"][row][choice][: len(want)] == want
  assert set(chosen["choice"]) <= {0, 1}
