"""The generator's statistics: counters summed over chunks -> the stats dict, and its report.

The stats dict is what stats.json holds beside the shards (with `pretraining_output.
shard_table`'s "shards"), and what the tool prints through `format_stats`. The local tool
(`pretraining_data`) and the Beam pipeline (`beam_pipeline`) both summarize their counters
here, so the two report the same fields.
"""

import collections
from typing import Dict, List, Optional

from recurrent_bert.data.pretraining_options import GeneratorOptions
from recurrent_bert.data.vocab import fingerprint
from recurrent_bert.data.vocab import vocab_kind


def summarize(
    counters: collections.Counter,
    options: GeneratorOptions,
    seconds: float,
    text_bytes: int,
    shards: Optional[List[Dict]] = None,
) -> Dict:
  """The stats dict of a run (stats.json) from its summed counters.

  Args:
    counters: the ChunkProcessor counters summed over the chunks, plus "chunks" and the
      per-stage "seconds STAGE".
    options: the run's GeneratorOptions (echoed under "options").
    seconds: wall time of the run.
    text_bytes: text read, as `pretraining_corpus.document_text_size` counts it.
    shards: `pretraining_output.shard_table` rows, or None to leave "shards" out.

  Returns:
    The stats dict.
  """

  def ratio(a, b):
    return (counters[a] / counters[b]) if counters[b] else 0.0

  instances = counters["instances"]
  stats = {
      "documents": counters["documents"],
      "documents_without_tokens": counters["documents_without_tokens"],
      "sentences": counters["sentences"],
      "input_tokens": counters["input_tokens"],
      "input_text_bytes": text_bytes,
      "instances": instances,
      "instance_tokens": counters["instance_tokens"],
      "mean_tokens_per_instance": ratio("instance_tokens", "instances"),
      "truncated_instances": counters["truncated_instances"],
      "truncation_rate": ratio("truncated_instances", "instances"),
      "truncated_tokens": counters["truncated_tokens"],
      "long_lines_split": counters["long_lines_split"],
      "long_line_pieces": counters["long_line_pieces"],
      "masked_positions": counters["masked_positions"],
      "masked_fraction": ratio("masked_positions", "instance_tokens"),
      "masked_as_mask_token": ratio("masked_as_mask_token", "masked_positions"),
      "masked_as_random_token": ratio("masked_as_random_token", "masked_positions"),
      "masked_kept": ratio("masked_kept", "masked_positions"),
      "random_next": counters["random_next"],
      "random_next_fraction": ratio("random_next", "instances"),
      "chunks": counters["chunks"],
      "chunks_with_single_document": counters["chunks_with_single_document"],
      # Per stage; worker stages are summed over the workers (they run in parallel).
      "stage_seconds": {
          k[len("seconds ") :]: round(v, 3)
          for k, v in sorted(counters.items())
          if k.startswith("seconds ")
      },
      "num_output_shards": len(options.output_files),
      "num_workers": options.num_workers,
      "dynamic_masking": options.dynamic_masking,
      "seconds": round(seconds, 3),
      "documents_per_second": counters["documents"] / seconds if seconds else 0.0,
      "instances_per_second": instances / seconds if seconds else 0.0,
      "text_megabytes_per_second": text_bytes / 1e6 / seconds if seconds else 0.0,
      "options": {
          "input_files": list(options.input_files),
          "vocab_file": options.vocab_file,
          "vocab_kind": vocab_kind(options.vocab_file),
          # Which vocabulary the ids are of, wherever the files travel: the pretraining
          # command refuses another one (pretraining_records.check_vocabulary).
          "vocab_sha256": fingerprint(options.vocab_file),
          "do_lower_case": options.do_lower_case,
          "max_seq_length": options.max_seq_length,
          "max_predictions_per_seq": options.masking.max_predictions_per_seq,
          "masked_lm_prob": options.masking.masked_lm_prob,
          "mask_token_prob": options.masking.mask_token_prob,
          "random_token_prob": options.masking.random_token_prob,
          "do_whole_word_mask": options.masking.whole_word_mask,
          "dupe_factor": options.dupe_factor,
          "short_seq_prob": options.short_seq_prob,
          "random_seed": options.random_seed,
          "use_nsp": options.use_nsp,
      },
  }
  if shards is not None:
    stats["shards"] = shards
  return stats


def format_stats(stats: Dict) -> str:
  """A human-readable report of the stats dict."""
  lines = [
      f"documents        {stats['documents']:,} ({stats['sentences']:,} sentences, "
      f"{stats['input_text_bytes'] / 1e6:.1f} MB of text, {stats['input_tokens']:,} tokens)",
      f"instances        {stats['instances']:,} in {stats['num_output_shards']} shard(s), "
      f"{stats['mean_tokens_per_instance']:.1f} tokens each on average",
      f"truncation       {stats['truncation_rate']:.2%} of instances, "
      f"{stats['truncated_tokens']:,} tokens",
      f"random next      {stats['random_next_fraction']:.2%} (NSP label 1)",
  ]
  if not stats["dynamic_masking"]:
    lines.append(
        f"masked           {stats['masked_fraction']:.2%} of tokens: "
        f"{stats['masked_as_mask_token']:.1%} [MASK], "
        f"{stats['masked_as_random_token']:.1%} random, {stats['masked_kept']:.1%} kept"
    )
  else:
    lines.append("masked           none (unmasked records for dynamic masking)")
  lines.append(
      f"throughput       {stats['documents_per_second']:.0f} documents/s, "
      f"{stats['instances_per_second']:.0f} instances/s, "
      f"{stats['text_megabytes_per_second']:.2f} MB/s in {stats['seconds']:.1f} s"
  )
  return "\n".join(lines)
