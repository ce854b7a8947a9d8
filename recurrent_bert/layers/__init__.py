"""Keras layers, one concept per file. They know nothing of data or training.

May import: the base module config (for the names of mixers and implementations).
"""

from recurrent_bert.layers.activations import get_activation
from recurrent_bert.layers.attention import SelfAttention
from recurrent_bert.layers.blstm import BidirectionalLSTM
from recurrent_bert.layers.embeddings import Embeddings
from recurrent_bert.layers.feedforward import FeedForward
from recurrent_bert.layers.layer_combination import LAYER_MIXES
from recurrent_bert.layers.layer_combination import LayerCombination
from recurrent_bert.layers.layer_combination import combined_width
from recurrent_bert.layers.relative_position import RelativePositionBias
from recurrent_bert.layers.relative_position import relative_position_bucket
from recurrent_bert.layers.scalar_mix import ScalarMix
from recurrent_bert.layers.swish_rnn import SwishRNN
from recurrent_bert.layers.swish_rnn import swish_rnn_recurrence
from recurrent_bert.layers.transformer_block import TransformerBlock
