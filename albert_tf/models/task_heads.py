"""What the task models' heads are built from: argument checks, dropout, the output projection.

Shared by every `AlbertTask` subclass, so each model's constructor reads as
validate, build the head, wire the graph.
"""

import keras
from keras import ops

from albert_tf.models.backbone import AlbertBackbone
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


def check_weights(name, weights, count):
    """None, or a list of `count` positive floats."""
    if weights is None:
        return None
    values = list(weights)
    if len(values) != count or not all(
            isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0 for w in values):
        raise ValueError(f"`{name}` must be {count} positive numbers, one per class or label. "
                         f"Received: {name}={weights!r}")
    return [float(w) for w in values]


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
