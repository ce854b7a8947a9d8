"""T5's bidirectional bucketed relative attention bias (SPEC §2)."""

import math

import keras
from keras import ops


def relative_position_bucket(relative_position, num_buckets=32, max_distance=128):
  """Maps key - query offsets to T5's bidirectional buckets.

  Half the buckets serve keys at or before the query, half (offset by num_buckets/2)
  keys after it. Within a direction, offsets below num_buckets/4 get a bucket each;
  larger ones share log-spaced buckets up to `max_distance`, the last bucket catching
  everything beyond.

  Args:
    relative_position: int tensor of any shape, key_position - query_position.
  Returns:
    int32 tensor of the same shape, values in [0, num_buckets).
  """
  half = num_buckets // 2
  exact = half // 2
  relative_position = ops.cast(relative_position, "int32")
  bucket = ops.where(relative_position > 0, half, 0)
  distance = ops.abs(relative_position)
  # Clamp to 1 so the log is defined where the exact branch is taken anyway.
  log_ratio = ops.log(ops.maximum(ops.cast(distance, "float32"), 1.0) / exact)
  log_bucket = exact + ops.cast(
      log_ratio / math.log(max_distance / exact) * (half - exact), "int32"
  )
  log_bucket = ops.minimum(log_bucket, half - 1)
  return bucket + ops.where(distance < exact, distance, log_bucket)


@keras.saving.register_keras_serializable(package="recurrent_bert")
class RelativePositionBias(keras.layers.Layer):
  """One learned scalar per (bucket, head), looked up into an attention-logit bias.

  Input: any tensor [B, T, ...] (only T is read). Output: [1, A, T, T] float, added to
  the [B, A, T, T] attention logits (query index on axis 2, key index on axis 3).

  The lookup is a matmul of the constant one-hot buckets [T·T, NB] with the float32 table
  [NB, A], not a gather: a gather's gradient is a scatter-add of T·T updates into NB·A
  values, which serialises on a GPU (and in bfloat16 becomes a compare-and-swap loop),
  where the matmul's is one small GEMM. The table is read in float32 whatever the policy
  (a variable that is never autocast), so its gradient sums in float32 too; the bias is
  cast to the compute dtype once, at the end.
  """

  def __init__(self, num_heads, num_buckets=32, max_distance=128, initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    self.num_heads = num_heads
    self.num_buckets = num_buckets
    self.max_distance = max_distance
    self.initializer_range = initializer_range

  def build(self, input_shape):
    self.bias_table = self.add_weight(
        name="bias_table",
        shape=(self.num_buckets, self.num_heads),
        initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range),
        autocast=False,  # read in float32 under a mixed policy (see the class docstring)
    )
    self.built = True

  def call(self, inputs):
    seq_length = ops.shape(inputs)[1]
    positions = ops.arange(seq_length, dtype="int32")
    relative = positions[None, :] - positions[:, None]  # [Tq, Tk]: key - query
    buckets = relative_position_bucket(relative, self.num_buckets, self.max_distance)
    one_hot = ops.one_hot(ops.reshape(buckets, (-1,)), self.num_buckets, dtype="float32")
    table = ops.cast(self.bias_table, "float32")  # [NB, A]
    bias = ops.reshape(ops.matmul(one_hot, table), (seq_length, seq_length, self.num_heads))
    return ops.cast(ops.transpose(bias, (2, 0, 1))[None], self.compute_dtype)

  def get_config(self):
    return {
        **super().get_config(),
        "num_heads": self.num_heads,
        "num_buckets": self.num_buckets,
        "max_distance": self.max_distance,
        "initializer_range": self.initializer_range,
    }
