"""Keras models of ALBERT: the backbone and the models built on it."""

from albert_tf.models.backbone import AlbertBackbone
from albert_tf.models.pretrainer import AlbertPretrainer
from albert_tf.models.classifier import AlbertClassifier, AlbertRegressor
from albert_tf.models.tagger import AlbertTagger
from albert_tf.models.question_answering import AlbertQuestionAnswerer
from albert_tf.models.multiple_choice import AlbertMultipleChoice
from albert_tf.models.multilabel import AlbertMultiLabelClassifier
