"""`AlbertTask`: what every fine-tuning model shares.

A task model is a functional `keras.Model` built on an `AlbertBackbone`. It
owns its loss (so `compile(optimizer=...)` then `fit` is enough), its metrics,
`label_names` for exports, and a config that rebuilds it from JSON alone.
Subclasses build their graph in `__init__`, call `_init_task`, and define
`task_loss` and `update_task_metrics`.
"""

import keras
from keras import ops

from albert_tf.models.backbone import AlbertBackbone
from albert_tf.models.quantization import TFLiteQuantizationOnly
from albert_tf.saving import PretrainedMixin
from input_pipeline import features


def check_backbone(backbone):
    if not isinstance(backbone, AlbertBackbone):
        raise ValueError(
            f"`backbone` must be an AlbertBackbone. Received: {type(backbone).__name__}"
        )
    return backbone


def check_label_names(label_names, expected_count, count_name):
    """None, or a list of `expected_count` distinct strings."""
    if label_names is None:
        return None
    if isinstance(label_names, str) or not all(isinstance(n, str) for n in label_names):
        raise ValueError(f"`label_names` must be a list of strings. Received: {label_names!r}")
    label_names = list(label_names)
    if expected_count is not None and len(label_names) != expected_count:
        raise ValueError(
            f"`label_names` must have one name per class ({count_name}={expected_count}). "
            f"Received {len(label_names)}: {label_names}"
        )
    if len(set(label_names)) != len(label_names):
        raise ValueError(f"`label_names` must be distinct. Received: {label_names}")
    return label_names


def check_no_label_names(task, label_names, why):
    if label_names is not None:
        raise ValueError(f"{task} takes no `label_names` ({why}). Received: {label_names!r}")


def check_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    return value


def head_dropout(backbone, dropout):
    """The dropout before a task head; None takes `config.classifier_dropout`."""
    rate = backbone.config.classifier_dropout if dropout is None else dropout
    if not isinstance(rate, (int, float)) or not 0.0 <= rate < 1.0:
        raise ValueError(f"`dropout` must be in [0, 1). Received: dropout={dropout!r}")
    return keras.layers.Dropout(rate, dtype=backbone.dtype_policy, name="head_dropout"), rate


def output_dense(units, backbone, name):
    """The final projection of a head.

    Its dtype policy is float32 whatever the backbone's: under mixed precision
    the inputs are upcast and the logits come out in float32, which the
    softmax and cross-entropy need.
    """
    return keras.layers.Dense(
        units,
        kernel_initializer=keras.initializers.TruncatedNormal(
            stddev=backbone.config.initializer_range
        ),
        dtype="float32",
        name=name,
    )


def backbone_inputs(shape=(None,)):
    return {
        name: keras.Input(shape=shape, dtype="int32", name=name)
        for name in features.BACKBONE_INPUTS
    }


def weighted_mean(values, sample_weight):
    """Keras' "sum_over_batch_size": mean(values * sample_weight)."""
    if sample_weight is None:
        return ops.mean(values)
    weight = ops.reshape(ops.cast(sample_weight, values.dtype), ops.shape(values))
    return ops.mean(values * weight)


def _share_of_replicas(loss):
    """This replica's share of the loss: Keras sums the replicas' gradients.

    `fit` under a `tf.distribute` strategy expects `compute_loss` to return
    loss / num_replicas (its built-in losses do the same), so the summed
    gradient is that of the mean over replicas; its loss metric scales back.
    """
    if keras.backend.backend() != "tensorflow":
        return loss
    # Imported here because model code must also run on the JAX backend, where
    # TensorFlow's distribution strategies play no part.
    import tensorflow as tf

    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    return loss if replicas == 1 else loss * (1.0 / replicas)


class AlbertTask(TFLiteQuantizationOnly, PretrainedMixin, keras.Model):
    """Base of the task models: loss, metrics, config and the backbone handle.

    Every subclass sets the class attribute `export_kind` (one of
    `albert_tf.export.signatures.KINDS`): it says which post-processing the
    exported signatures add. A model without one cannot be exported.
    """

    def _init_task(self, backbone, label_names, task_metrics, **task_config):
        self.backbone = backbone
        self.label_names = label_names
        self._task_metrics = list(task_metrics)
        # Constructor arguments other than backbone/name/trainable, for get_config.
        self._task_config = dict(task_config, label_names=label_names)

    @property
    def config(self):
        return self.backbone.config

    def task_loss(self, y, y_pred, sample_weight=None, x=None):
        raise NotImplementedError

    def update_task_metrics(self, y, y_pred, sample_weight=None, x=None):
        raise NotImplementedError

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if y is None:
            raise ValueError(
                f"{type(self).__name__} needs labels to compute its loss. Received: y=None"
            )
        loss = self.task_loss(y, y_pred, sample_weight, x)
        # Regularisation losses added by layers, if any.
        for extra in self.losses:
            loss = loss + ops.cast(extra, "float32")
        return _share_of_replicas(loss)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        self.update_task_metrics(y, y_pred, sample_weight, x)
        return self.get_metrics_result()

    @property
    def metrics(self):
        tracked = [self._loss_tracker] if getattr(self, "_loss_tracker", None) else []
        return tracked + list(getattr(self, "_task_metrics", ()))

    def get_config(self):
        return {
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            **self._task_config,
            "name": self.name,
            "trainable": self.trainable,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)
