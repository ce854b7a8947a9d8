"""finetune_squad with a SentencePiece model as --vocab_file, end to end on generated SQuAD
v1.1 files (the fruits are several pieces each, "?" and "." lone-"▁" ones): the model dir
records the model, predictions are substrings of their contexts, an eval run finds the
model in the model dir, and the export's answer_question, served in a fresh process,
answers with substrings of the context; a --do_lower_case that contradicts the model's
casing is refused in one line."""

import json
import os

import pytest

from recurrent_bert import serving
from recurrent_bert.tasks import sample_tasks as generated_tasks
from tests.support import export_checks
from tests.support.finetune_runs import read_json
from tests.support.finetune_runs import run_entry
from tests.support.sentencepiece_tasks import write_task_model

pytestmark = pytest.mark.slow(seconds=50)

SERVE = r"""
import json, sys
import tensorflow as tf, tensorflow_text  # noqa
request = json.loads(sys.argv[2])
out = tf.saved_model.load(sys.argv[1]).signatures["answer_question"](
    question=tf.constant(request["question"]), context=tf.constant(request["context"]))
print(json.dumps({"answer": [a.decode() for a in out["answer"].numpy()],
                  "start": out["start_char"].numpy().tolist(),
                  "end": out["end_char"].numpy().tolist()}))
"""


def test_squad_trains_predicts_and_serves_with_a_sentencepiece_model(tmp_path):
  model_file = write_task_model(str(tmp_path / "spm"))
  squad = generated_tasks.write_squad_files(tmp_path / "squad", num_train=160, num_dev=30)
  model_dir = str(tmp_path / "model")
  run_entry(
      "recurrent_bert.finetune_squad",
      f"--train_file={squad['train']}",
      f"--predict_file={squad['dev']}",
      "--model_config=bert_tiny",
      f"--vocab_file={model_file}",
      f"--model_dir={model_dir}",
      "--max_seq_length=40",
      "--max_query_length=8",
      "--doc_stride=12",
      "--train_batch_size=16",
      "--learning_rate=1e-3",
      "--max_train_steps=30",
      "--warmup_steps=3",
      "--log_steps=10",
  )
  assert read_json(os.path.join(model_dir, "tokenizer.json"))["type"] == "sentencepiece"
  with open(model_file, "rb") as a, open(os.path.join(model_dir, "sentencepiece.model"), "rb") as b:
    assert a.read() == b.read()
  assert not os.path.exists(os.path.join(model_dir, "vocab.txt"))
  contexts = {
      qa["id"]: p["context"]
      for p in read_json(squad["dev"])["data"][0]["paragraphs"]
      for qa in p["qas"]
  }
  predictions = read_json(os.path.join(model_dir, "predictions", "predictions.json"))
  assert set(predictions) == set(contexts)
  for qid, text in predictions.items():
    assert text and text in contexts[qid] and text == text.strip(), (text, contexts[qid])

  # An eval of the trained model finds its vocabulary (sentencepiece.model) in the dir.
  result = run_entry(
      "recurrent_bert.finetune_squad",
      "--mode=eval",
      f"--predict_file={squad['dev']}",
      f"--model_dir={model_dir}",
  )
  assert "exact_match=" in result.stdout
  refused = run_entry(
      "recurrent_bert.finetune_squad",
      "--mode=eval",
      f"--predict_file={squad['dev']}",
      f"--model_dir={model_dir}",
      "--nodo_lower_case",
      check=False,
  )
  assert refused.returncode == 2
  assert refused.stderr.strip().splitlines()[-1].startswith("error: --do_lower_case=False")

  export_dir = str(tmp_path / "export")
  serving.export_model_dir(model_dir, export_dir)
  request = {
      "question": ["Which fruit is it?"] * 3,
      "context": [
          "the old dog walks slow mango river cold .",
          "  Peach,  the (cherry) tree\tholds a grape!",
          "cloud rain wind",
      ],
  }
  served = export_checks.run_fresh_python(SERVE, export_dir, json.dumps(request))
  for context, answer, start, end in zip(
      request["context"], served["answer"], served["start"], served["end"]
  ):
    assert answer and answer == context[start:end] and answer == answer.strip(), (answer, context)
