"""Keras models of ALBERT: the backbone and the models built on it."""

from albert_tf.models.backbone import AlbertBackbone
from albert_tf.models.pretrainer import AlbertPretrainer
