"""The fine-tuning task's floors on small task folders whose answers are known by hand."""

import random

from recurrent_bert.demo import task_floor

WORDS = {"alpha": ["tensor", "graph", "eager"], "beta": ["array", "dtype", "axis"]}
FILLER = ["the", "of", "returns", "an", "value", "given"]


def _passage(rng, label):
  return " ".join(rng.sample(FILLER, 3) + [rng.choice(WORDS[label])] + rng.sample(FILLER, 2))


def _write_task(task_dir, labels_by_split, rng):
  for split, labels in labels_by_split.items():
    rows = [(f"{split}-{i}", _passage(rng, label), label) for i, label in enumerate(labels)]
    header = "index\tsentence" + ("" if split == "test" else "\tlabel")
    lines = [header] + [
        f"{i}\t{text}" + ("" if split == "test" else f"\t{label}") for i, text, label in rows
    ]
    (task_dir / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    if split == "test":
      answers = ["index\tlabel"] + [f"{i}\t{label}" for i, _, label in rows]
      (task_dir / "test_labels.tsv").write_text("\n".join(answers) + "\n")


def test_a_word_that_names_the_class_is_learned_and_the_majority_counted(tmp_path):
  rng = random.Random(0)
  labels = {
      "train": ["alpha"] * 30 + ["beta"] * 20,
      "dev": ["alpha"] * 4 + ["beta"] * 6,
      "test": ["alpha"] * 7 + ["beta"] * 3,
  }
  _write_task(tmp_path, labels, rng)
  floors = task_floor.task_floors(str(tmp_path))
  # The commonest train label is alpha: right on 4 of 10 dev and 7 of 10 test passages.
  assert floors["majority"] == {"label": "alpha", "dev": 0.4, "test": 0.7}
  # Each passage holds one word that only its class uses: the bag of words gets them all.
  words = floors["bag_of_words"]
  assert words["dev"] == words["test"] == 1.0
  assert words["C"] in task_floor.C_GRID and words["features"] == len(FILLER) + 6
  text = task_floor.describe(floors)
  assert "majority class (alpha) dev 0.400 / test 0.700" in text and "test 1.000" in text
