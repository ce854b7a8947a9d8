"""Models: the encoder, task heads and task models. They know nothing of files."""

from recurrent_bert.models.encoder import Encoder
from recurrent_bert.models.encoder import count_parameters
from recurrent_bert.models.heads import ClassificationHead
from recurrent_bert.models.heads import MaskedLMHead
from recurrent_bert.models.heads import SpanHead
from recurrent_bert.models.tasks import Classifier
from recurrent_bert.models.tasks import Pretrainer
from recurrent_bert.models.tasks import SpanExtractor
from recurrent_bert.models.tasks import build_encoder
