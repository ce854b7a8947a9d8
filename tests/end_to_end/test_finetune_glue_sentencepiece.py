"""finetune_glue with a SentencePiece model as --vocab_file, end to end on generated RTE
files: trains a few steps, evaluates, records the model (sentencepiece.model,
tokenizer.json, in model_dir and best/) and exports a SavedModel whose classify_pair,
served in a fresh process, tokenizes raw text with it (the served input ids are the
`sentencepiece` library's)."""

import pytest
import sentencepiece

from recurrent_bert import serving
from recurrent_bert.tasks import sample_tasks as generated_tasks
from tests.support.sentencepiece_tasks import check_recorded
from tests.support.sentencepiece_tasks import serve_exports
from tests.support.sentencepiece_tasks import train
from tests.support.sentencepiece_tasks import write_task_model

pytestmark = pytest.mark.slow(seconds=40)


def test_glue_trains_evaluates_and_serves_with_a_sentencepiece_model(tmp_path):
  model_file = write_task_model(str(tmp_path / "spm"))
  rte = generated_tasks.write_rte_folder(tmp_path / "rte", num_train=48, num_dev=16, num_test=4)
  model_dir = train(
      tmp_path,
      model_file,
      "rte",
      ["recurrent_bert.finetune_glue", "--task=RTE", f"--data_dir={rte}"],
  )
  check_recorded(model_dir, model_file)
  export_dir = str(tmp_path / "export")
  serving.export_model_dir(model_dir, export_dir, max_seq_length=64)
  texts = ["The cat, a Mango!", "zork (slow) ."]
  [classified] = serve_exports(
      [(export_dir, "classify_pair", {"text": texts, "text_pair": texts[::-1]})]
  )
  reference = sentencepiece.SentencePieceProcessor(model_file=model_file)
  cls, sep = reference.piece_to_id("[CLS]"), reference.piece_to_id("[SEP]")
  for row, (a, b) in enumerate(zip(texts, texts[::-1])):
    want = [cls, *reference.encode(a), sep, *reference.encode(b), sep]
    assert classified["input_ids"][row][: sum(classified["input_mask"][row])] == want
  assert set(classified["label"]) <= {"entailment", "not_entailment"}
