"""albert-tf: ALBERT (A Lite BERT) in TensorFlow 2 / Keras 3."""

from albert_tf import optimizers, schedules
from albert_tf.config import PRESETS, AlbertConfig
from albert_tf.models import (
    AlbertBackbone,
    AlbertClassifier,
    AlbertMultipleChoice,
    AlbertPretrainer,
    AlbertQuestionAnswerer,
    AlbertRegressor,
    AlbertTagger,
)
from albert_tf.saving import load_pretrained, save_pretrained

__version__ = "0.1.0"
