"""The demo's data stages: their command lines, and how their results are read back.

The corpus (read, split train/dev/test in this process, `origin_task`), the vocabulary
(rbert-build-vocab), the pretraining records of the train documents and the held-out ones
of the dev documents (rbert-create-pretraining-data), and the fine-tuning task (written in
this process). The tokenizer comparison's vocabularies and records use the same commands.
"""

import json
import os
import re
from typing import Dict, List, Optional

from recurrent_bert import io_utils
from recurrent_bert import jobs
from recurrent_bert.data import builtin_corpus
from recurrent_bert.demo import origin_task
from recurrent_bert.demo.stages import say
from recurrent_bert.demo.work_paths import WORDPIECE
from recurrent_bert.demo.work_paths import WorkPaths

# The lines of each command's output that the demo echoes.
ECHO_VOCAB = re.compile(r"distinct words|^wrote|error|Error")
ECHO_DATA = re.compile(
    r"create_pretraining_data:|^documents |^instances |^truncation |"
    r"^random next |^masked |^throughput |^wrote|error|Error"
)


class DataStages(WorkPaths):
  """The commands and results of the corpus, vocabulary, data and task stages."""

  # -- corpus, vocabulary, data, task ------------------------------------------------

  def stage_corpus(self) -> Dict:
    """Reads the corpus as documents with their sources; writes the three splits."""
    s = self.s
    documents: List[origin_task.Document] = []
    files = []
    for entry in s.input_files:
      if builtin_corpus.is_builtin(entry):
        say(
            "    reading the built-in corpus (docstrings of the installed Python, labelled "
            "by library; cached after the first time)"
        )
        documents.extend(origin_task.builtin_documents(s.cache_dir, s.corpus_max_bytes))
      else:
        files.extend(io_utils.expand_input_patterns([entry], "input_files"))
    if files:
      documents.extend(origin_task.file_documents(files, s.corpus_max_bytes))
    splits = origin_task.split_documents(documents, s.eval_documents_fraction, s.seed)
    for split, docs in splits.items():
      origin_task.write_documents(s.path("corpus"), split, docs)
    stats = {
        split: {
            "documents": len(docs),
            "sentences": sum(len(d.sentences) for d in docs),
            "bytes": sum(len(x.encode("utf-8")) + 1 for d in docs for x in d.sentences),
            "sources": len({d.source for d in docs}),
        }
        for split, docs in splits.items()
    }
    total_mb = sum(v["bytes"] for v in stats.values()) / 1e6
    return {
        "input_files": files,
        "builtin": self.builtin,
        "splits": stats,
        "summary": f"{sum(v['documents'] for v in stats.values()):,} documents from "
        f"{stats['train']['sources']} sources, {total_mb:.1f} MB; held out "
        f"{stats['dev']['documents']} dev + {stats['test']['documents']} "
        "test documents",
    }

  def vocab_command(self, tokenizer: Optional[str] = None) -> List[str]:
    """rbert-build-vocab on the train documents (WordPiece, or `tokenizer`'s model)."""
    s = self.s
    output = self.vocab_file(tokenizer)
    tokenizer = tokenizer or s.vocabulary
    return jobs.python_module(
        "recurrent_bert.tools.build_vocab",
        f"--input_files={s.path('corpus', 'train_documents.txt')}",
        f"--vocab_size={s.vocab_size}",
        f"--max_lines={s.vocab_max_lines}",
        "--do_lower_case=true",
        f"--output_file={output}",
        *([f"--tokenizer={tokenizer}"] if tokenizer and tokenizer != WORDPIECE else []),
    )

  def vocab_result(self) -> Dict:
    """The vocabulary's size and its [unused] padding."""
    if self.s.vocabulary != WORDPIECE:
      from recurrent_bert.data import vocab as vocab_lib

      size = vocab_lib.read_vocabulary(self.vocab_file()).vocab_size
      return {"tokens": size, "unused": 0, "summary": f"{self.s.vocabulary} model, {size} pieces"}
    with open(self.s.path("vocab", "vocab.txt"), encoding="utf-8") as f:
      tokens = [line.rstrip("\n") for line in f]
    unused = sum(t.startswith("[unused") for t in tokens)
    return {
        "tokens": len(tokens),
        "unused": unused,
        "summary": f"{len(tokens)} tokens ({unused} [unused] padding)",
    }

  def data_command(self, split: str = "train", tokenizer: Optional[str] = None) -> List[str]:
    """rbert-create-pretraining-data on one split's documents (train, or dev: held out).

    The held-out records get one pass with their own seed: masks and NSP pairs are drawn
    once, so every model and evaluation reads the same ones. A compared `tokenizer`'s
    records mask whole words (every piece of a masked word), which makes the held-out
    loss per word mean what it says.
    """
    s = self.s
    held_out = split != "train"
    return jobs.python_module(
        "recurrent_bert.tools.create_pretraining_data",
        f"--input_files={s.path('corpus', f'{split}_documents.txt')}",
        f"--vocab_file={self.vocab_file(tokenizer)}",
        "--do_lower_case=true",
        *(["--do_whole_word_mask"] if tokenizer else []),
        f"--output_dir={self.data_dir(split, tokenizer)}",
        f"--max_seq_length={s.seq_length}",
        f"--max_predictions_per_seq={s.max_predictions_per_seq}",
        f"--dupe_factor={1 if held_out else s.dupe_factor}",
        f"--random_seed={s.seed + 1 if held_out else s.seed}",
        f"--num_output_shards={1 if held_out else max(1, s.num_workers)}",
        f"--num_workers={1 if held_out else s.num_workers}",
    )

  def eval_data_command(self) -> List[str]:
    """rbert-create-pretraining-data on the dev documents."""
    return self.data_command("dev")

  def eval_data_result(self, tokenizer: Optional[str] = None) -> Dict:
    """How many held-out sequences there are and how many each evaluation reads."""
    with open(os.path.join(self.data_dir("dev", tokenizer), "stats.json"), encoding="utf-8") as f:
      stats = json.load(f)
    read = min(stats["instances"], self._eval_batches() * 64)
    if not stats["instances"]:
      raise ValueError("the dev documents gave no pretraining sequences")
    return {
        "instances": stats["instances"],
        "read_per_evaluation": read,
        "summary": f"{stats['instances']:,} held-out sequences; each evaluation reads "
        f"{read:,} of them",
    }

  def data_result(self, tokenizer: Optional[str] = None) -> Dict:
    """The records' statistics and how many epochs pretraining reads."""
    with open(os.path.join(self.data_dir("train", tokenizer), "stats.json"), encoding="utf-8") as f:
      stats = json.load(f)
    consumed = self.s.pretrain_steps * self.s.batch_size
    return {
        "instances": stats["instances"],
        "instance_tokens": stats["instance_tokens"],
        "masked_fraction": stats["masked_fraction"],
        "epochs": consumed / max(1, stats["instances"]),
        "summary": f"{stats['instances']:,} sequences; pretraining reads {consumed:,} "
        f"of them ({consumed / max(1, stats['instances']):.2f} epochs)",
    }

  def stage_task(self) -> Dict:
    """Writes the task folder from the three splits."""
    s = self.s
    splits = {
        split: origin_task.load_split(s.path("corpus"), split) for split in ("train", "dev", "test")
    }
    classes = origin_task.choose_classes(splits, s.task_classes)
    counts = origin_task.write_task(
        s.path("task"), splits, classes, s.task_train_examples, s.task_eval_examples, s.seed
    )
    return {
        "classes": classes,
        "splits": counts,
        "summary": f"{len(classes)} classes ({', '.join(classes)}); "
        + ", ".join(f"{split} {c['examples']:,} passages" for split, c in counts.items()),
    }
