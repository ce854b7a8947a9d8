"""finetune_tagging with a SentencePiece model as --vocab_file, end to end on generated CoNLL
files: trains a few steps, evaluates, records the model, and its SavedModel's tag
signature, served in a fresh process, tags every word of raw text at its characters;
extract_features reads the model from that model dir (pieces checked against the
`sentencepiece` library)."""

import json

import pytest
import sentencepiece

from recurrent_bert import serving
from recurrent_bert.tasks import sample_tasks as generated_tasks
from tests.support.finetune_runs import run_entry
from tests.support.sentencepiece_tasks import check_recorded
from tests.support.sentencepiece_tasks import serve_exports
from tests.support.sentencepiece_tasks import train
from tests.support.sentencepiece_tasks import write_task_model

pytestmark = pytest.mark.slow(seconds=45)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  root = tmp_path_factory.mktemp("sp_tagging")
  model_file = write_task_model(str(root / "spm"))
  conll = generated_tasks.write_conll_files(root / "conll", num_train=48, num_dev=16, num_test=4)
  command = [
      "recurrent_bert.finetune_tagging",
      f"--train_file={conll['train']}",
      f"--eval_file={conll['dev']}",
  ]
  model_dir = train(root, model_file, "conll", command)
  return {"root": root, "model_file": model_file, "model_dir": model_dir}


def test_tagging_records_the_model_and_serves_words_of_raw_text(run):
  check_recorded(run["model_dir"], run["model_file"])
  export_dir = str(run["root"] / "export")
  serving.export_model_dir(run["model_dir"], export_dir)
  texts = ["mister Zork plim walks (slow).", "the  city, blit drav!"]
  [tagged] = serve_exports([(export_dir, "tag", {"text": texts})])
  for row, text in enumerate(texts):
    count = tagged["num_words"][row]
    words = tagged["words"][row][:count]
    assert "".join(words) == "".join(text.split())
    for word, start, end, tag in zip(
        words, tagged["start_char"][row], tagged["end_char"][row], tagged["tags"][row]
    ):
      assert text[start:end] == word and tag


def test_extract_features_reads_the_model_from_a_model_dir(run, tmp_path):
  inputs = tmp_path / "texts.txt"
  inputs.write_text("The cat sees a Mango!\nwhich fruit is it ? ||| a peach\n", encoding="utf-8")
  output = tmp_path / "features.jsonl"
  run_entry(
      "recurrent_bert.extract_features",
      f"--input_file={inputs}",
      f"--init_checkpoint={run['model_dir']}",
      f"--output_file={output}",
      "--layers=-1",
      "--max_seq_length=24",
  )
  reference = sentencepiece.SentencePieceProcessor(model_file=run["model_file"])
  rows = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
  pieces = [[feature["token"] for feature in row["features"]] for row in rows]
  assert pieces[0] == ["[CLS]", *reference.encode("The cat sees a Mango!", out_type=str), "[SEP]"]
  assert pieces[1] == [
      "[CLS]",
      *reference.encode("which fruit is it ?", out_type=str),
      "[SEP]",
      *reference.encode("a peach", out_type=str),
      "[SEP]",
  ]
