"""Models: the encoder, its heads and the models built from both. They know nothing of files."""

from recurrent_bert.models.classifier import Classifier
from recurrent_bert.models.encoder import Encoder
from recurrent_bert.models.encoder import build_encoder
from recurrent_bert.models.encoder import count_parameters
from recurrent_bert.models.heads import ClassificationHead
from recurrent_bert.models.heads import FeatureBiLSTM
from recurrent_bert.models.heads import MaskedLMHead
from recurrent_bert.models.heads import SpanHead
from recurrent_bert.models.multiple_choice import MultipleChoice
from recurrent_bert.models.pretrainer import Pretrainer
from recurrent_bert.models.span_extractor import SpanExtractor
from recurrent_bert.models.token_tagger import TokenTagger
