"""Smoke run: builds every preset and runs one forward pass (the interim main job).

  python -m recurrent_bert.smoke [--sizes=tiny,mini,base,large] [--families=...]

Prints one line per preset (parameters, build and forward time, output shapes) and
fails if any output is not finite.
"""

import gc
import time

from absl import flags
import numpy as np

from recurrent_bert import cli
from recurrent_bert import config as config_lib

FLAGS = flags.FLAGS
flags.DEFINE_list("sizes", list(config_lib.SIZES), "Preset sizes to build.")
flags.DEFINE_list("families", list(config_lib.FAMILIES), "Preset families to build.")
flags.DEFINE_integer("batch_size", 2, "Batch size of the forward pass.")
flags.DEFINE_integer("seq_length", 32, "Sequence length of the forward pass.")
for _name in ("batch_size", "seq_length"):
  flags.register_validator(_name, lambda v: v >= 1, f"--{_name} must be >= 1")


def _validate():
  for flag, given, allowed in (
      ("--sizes", FLAGS.sizes, config_lib.SIZES),
      ("--families", FLAGS.families, config_lib.FAMILIES),
  ):
    unknown = sorted(set(given) - set(allowed))
    if unknown or not given:
      what = f"unknown {unknown}" if unknown else "nothing given"
      cli.fail(f"{flag}: {what}; choose from {sorted(allowed)}")
  for size in FLAGS.sizes:
    for family in FLAGS.families:
      config = config_lib.resolve_config(f"{family}_{size}")
      config.check_sequence_length(FLAGS.seq_length, "--seq_length", f"{family}_{size}")


def main(argv):
  del argv
  _validate()
  import keras  # after flag parsing: --help stays instant
  import tensorflow as tf

  from recurrent_bert.models import build_encoder

  presets = [f"{family}_{size}" for size in FLAGS.sizes for family in FLAGS.families]
  rng = np.random.default_rng(0)
  start = time.time()
  print(f"{'preset':32s} {'params':>12s} {'build s':>8s} {'forward s':>9s}  outputs")
  for i, name in enumerate(presets):
    t0 = time.time()
    encoder = build_encoder(name)
    t1 = time.time()
    b, t = FLAGS.batch_size, FLAGS.seq_length
    try:
      mask = np.ones((b, t), "int32")
      mask[1:, t // 2 :] = 0  # exercise padding
      inputs = {
          "input_ids": rng.integers(5, encoder.config.vocab_size, (b, t)).astype("int32"),
          "input_mask": mask,
          "segment_ids": np.zeros((b, t), "int32"),
      }
      out = encoder(inputs, training=False)
    except (MemoryError, tf.errors.ResourceExhaustedError):
      # The flags' sizes, not a bug: say which and go no further.
      cli.fail(
          f"--batch_size={b} x --seq_length={t}: out of memory running {name}; "
          "give smaller values"
      )
    sequence = out["sequence_output"].numpy()
    t2 = time.time()
    if not (np.all(np.isfinite(sequence)) and np.all(np.isfinite(out["pooled_output"]))):
      raise SystemExit(f"{name}: non-finite output")
    print(
        f"{name:32s} {encoder.count_params():12,d} {t1 - t0:8.1f} {t2 - t1:9.2f}  "
        f"sequence {sequence.shape}, pooled {tuple(out['pooled_output'].shape)}  "
        f"[{i + 1}/{len(presets)}, {time.time() - start:.0f}s]",
        flush=True,
    )
    del encoder, out
    keras.backend.clear_session()
    gc.collect()
  print(f"all {len(presets)} presets built and ran a forward pass in {time.time() - start:.0f}s")


if __name__ == "__main__":
  cli.run(main)
