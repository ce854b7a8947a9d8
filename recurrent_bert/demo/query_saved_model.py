"""Classifies raw text with the demo's exported SavedModel, as a user's own program would.

  python -P recurrent_bert/demo/query_saved_model.py EXPORT_DIR QUERIES_JSON ANSWERS_JSON

The demo runs this file by its path in a fresh interpreter, to show that serving needs
nothing of this package: it imports only the standard library, tensorflow and
tensorflow_text, and checks at the end that no recurrent_bert module was loaded. (Not with
`python -m recurrent_bert.demo.query_saved_model`, which would import the package first;
-P keeps this file's directory off sys.path.)

QUERIES_JSON holds a list of {"text": str, "truth": str or null}; ANSWERS_JSON receives
the same list with "label", "probability" (of that label) and "probabilities" (of every
label, in the model's label order) added, written atomically.
"""

import json
import os
import sys
from typing import Dict, List

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops of the SavedModel)


def classify(export_dir: str, queries: List[Dict]) -> List[Dict]:
  """The SavedModel's `classify` signature on the queries' texts.

  Args:
    export_dir: the SavedModel.
    queries: {"text": ..., ...} dicts.

  Returns:
    Each query with its "label", "probability" and "probabilities" added.
  """
  model = tf.saved_model.load(export_dir)
  out = model.signatures["classify"](text=tf.constant([q["text"] for q in queries]))
  labels = out["label"].numpy()  # [num_queries] bytes
  label_ids = out["label_id"].numpy()  # [num_queries] int
  probabilities = out["probabilities"].numpy()  # [num_queries, num_labels]
  answers = []
  for i, query in enumerate(queries):
    answers.append(
        dict(
            query,
            label=labels[i].decode("utf-8"),
            probability=float(probabilities[i][int(label_ids[i])]),
            probabilities=[float(p) for p in probabilities[i]],
        )
    )
  return answers


def main(argv: List[str]) -> None:
  export_dir, queries_file, answers_file = argv[1:4]
  with open(queries_file, encoding="utf-8") as f:
    queries = json.load(f)
  answers = classify(export_dir, queries)
  for i, answer in enumerate(answers):
    print(f"query {i + 1}: {answer['text']!r}")
    print(
        f"  answer: {answer['label']} (probability {answer['probability']:.2f})"
        + (f"; truth: {answer['truth']}" if answer.get("truth") else "")
    )
  ours = sorted(m for m in sys.modules if m.split(".")[0] == "recurrent_bert")
  if ours:
    raise SystemExit(f"the query process imported {ours}")
  print("(SavedModel loaded in a fresh process with tensorflow + tensorflow_text only)")
  with open(answers_file + ".tmp", "w", encoding="utf-8") as f:
    json.dump(answers, f, indent=2)
  os.replace(answers_file + ".tmp", answers_file)


if __name__ == "__main__":
  main(sys.argv)
