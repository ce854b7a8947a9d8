"""Token + segment (+ absolute position) embeddings, LayerNorm, dropout (SPEC §1)."""

import keras
from keras import ops
import numpy as np

from recurrent_bert.layers.dropout import Dropout
from recurrent_bert.layers.layer_norm import LayerNormalization

# Batch rows summed per group by the positions' gradient matmul (`_jax_add_positions`).
_GROUPS = 8


def _jax_add_positions(x, positions):
  """x + positions, the [T, H] table broadcast over the batch, whose gradient sums the
  upstream gradient over the batch as a matmul rather than a reduction.

  The sum over B of a [B, T, H] gradient is a reduction over its major axis, which XLA's
  GPU layout assignment turns into a row reduction by laying the gradient out batch-minor;
  the layout then spreads through every residual add, LayerNorm and dropout of the
  network, which pays for it with a transpose beside each matmul (about 100 a BERT-base
  step). A matmul takes its operand as laid out. Its left side is [G, B], row g summing
  the batch rows b = g mod G: a single row of ones would be a vector, which XLA rewrites
  back into the reduction. The G partial sums, and the products, are float32.

  Args:
    x: [B, T, H].
    positions: [T, H], x's dtype.
  Returns:
    [B, T, H].
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  @jax.custom_vjp
  def add(x, positions):
    return x + positions[None]

  def forward(x, positions):
    return add(x, positions), None

  def backward(_, upstream):
    batch, length, hidden = upstream.shape
    groups = (np.arange(batch)[None, :] % _GROUPS == np.arange(_GROUPS)[:, None]).astype(
        upstream.dtype
    )  # [G, B]
    partial = jax.lax.dot_general(
        groups,
        upstream.reshape(batch, length * hidden),
        (((1,), (0,)), ((), ())),
        preferred_element_type=jnp.float32,
    )  # [G, T·H]
    summed = jnp.sum(partial, axis=0).reshape(length, hidden)
    return upstream, summed.astype(positions.dtype)

  add.defvjp(forward, backward)
  return add(x, positions)


@keras.saving.register_keras_serializable(package="recurrent_bert")
class Embeddings(keras.layers.Layer):
  """`E = Dropout(LayerNorm(token[ids] + segment[type_ids] + position[0..T-1]))`.

  Inputs: `input_ids` int [B, T], `segment_ids` int [B, T]. Output: [B, T, H].
  `token_embeddings` ([V, H]) is exposed so the MLM head can tie its output weights.
  """

  def __init__(
      self,
      vocab_size,
      hidden_size,
      max_position_embeddings=512,
      type_vocab_size=2,
      use_position_embedding=True,
      dropout_rate=0.1,
      layer_norm_epsilon=1e-12,
      initializer_range=0.02,
      **kwargs,
  ):
    super().__init__(**kwargs)
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.max_position_embeddings = max_position_embeddings
    self.type_vocab_size = type_vocab_size
    self.use_position_embedding = use_position_embedding
    self.dropout_rate = dropout_rate
    self.layer_norm_epsilon = layer_norm_epsilon
    self.initializer_range = initializer_range
    init = keras.initializers.TruncatedNormal(stddev=initializer_range)
    self.token_embedding = keras.layers.Embedding(
        vocab_size, hidden_size, embeddings_initializer=init, name="token_embedding"
    )
    self.segment_embedding = keras.layers.Embedding(
        type_vocab_size, hidden_size, embeddings_initializer=init, name="segment_embedding"
    )
    self.layer_norm = LayerNormalization(epsilon=layer_norm_epsilon, name="layer_norm")
    self.dropout = Dropout(dropout_rate)

  def build(self, input_shape):
    self.token_embedding.build((None, None))
    self.segment_embedding.build((None, None))
    if self.use_position_embedding:
      self.position_embeddings = self.add_weight(
          name="position_embeddings",
          shape=(self.max_position_embeddings, self.hidden_size),
          initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range),
      )
    self.layer_norm.build((None, None, self.hidden_size))
    self.built = True

  @property
  def token_embeddings(self):
    """The [V, H] token embedding table."""
    return self.token_embedding.embeddings

  def call(self, input_ids, segment_ids, training=None):
    x = self.token_embedding(input_ids) + self.segment_embedding(segment_ids)
    if self.use_position_embedding:
      seq_length = ops.shape(input_ids)[1]
      positions = ops.cast(self.position_embeddings[:seq_length], x.dtype)
      x = _jax_add_positions(x, positions) if keras.backend.backend() == "jax" else x + positions
    return self.dropout(self.layer_norm(x), training=training)

  def compute_output_shape(self, input_ids_shape, segment_ids_shape=None):
    # Said, not inferred: JAX traces a symbolic T, and min(max_positions, T) (the
    # position slice) cannot be proven equal to T.
    return tuple(input_ids_shape) + (self.hidden_size,)

  def get_config(self):
    return {
        **super().get_config(),
        **{
            k: getattr(self, k)
            for k in (
                "vocab_size",
                "hidden_size",
                "max_position_embeddings",
                "type_vocab_size",
                "use_position_embedding",
                "dropout_rate",
                "layer_norm_epsilon",
                "initializer_range",
            )
        },
    }
