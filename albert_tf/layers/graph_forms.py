"""The forms layers take inside an inference graph traced for TensorFlow's graph optimizer: `optimizer_forms`.

TensorFlow (without XLA) runs a frozen inference graph op by op, and its
graph optimizer (grappler's remapper, in builds with oneDNN: the default on
x86) rewrites some subgraphs into one fused kernel. Which subgraphs it
recognizes depends on how the computation is written, so `FrozenForward`
traces the model inside `optimizer_forms`, where:

- attention applies one (H, 3H) query-key-value matmul in every precision
  (bigger GEMMs, and two transposes per layer fewer than three projections);
- each LayerNorm goes through the function the context carries, if any
  (`albert_tf.inference`'s form, which the remapper fuses into one
  `_MklLayerNorm` op where TensorFlow runs oneDNN).

Everywhere else (training, XLA, the JAX backend) layers keep their own forms.
The values are the same either way up to float rounding.
"""

import contextlib
import contextvars

# The LayerNorm function of the open `optimizer_forms`, else None.
_LAYER_NORM = contextvars.ContextVar("albert_tf_optimizer_layer_norm", default=None)


def _keras_layer_norm(layer, x):
    return layer(x)


@contextlib.contextmanager
def optimizer_forms(layer_norm=None):
    """Within this context, layers take the forms TensorFlow's graph optimizer fuses best.

    Use it around the trace of an inference function (not training: the
    forms are not written for gradients).

    Args:
        layer_norm: function (keras.layers.LayerNormalization, x) -> the
            layer's output on x, used for float32 LayerNorms over the last
            axis; None keeps Keras' own LayerNorm.
    """
    token = _LAYER_NORM.set(layer_norm or _keras_layer_norm)
    try:
        yield
    finally:
        _LAYER_NORM.reset(token)


def in_optimizer_forms():
    """Whether an `optimizer_forms` context is open."""
    return _LAYER_NORM.get() is not None


def normalize(layer, x):
    """`layer(x)` for a `keras.layers.LayerNormalization`; inside `optimizer_forms`, the context's form of it.

    The context's form is used for the layers it is written for: float32,
    over the last axis, with both gamma and beta (ALBERT's); any other keeps
    Keras' own call. Under a mixed policy Keras computes LayerNorm in float32
    from half-precision inputs itself, and that path stays as measured.
    """
    form = _LAYER_NORM.get()
    axis = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    if (form is None or layer.compute_dtype != "float32" or not (layer.center and layer.scale)
            or layer.rms_scaling or list(axis) not in ([-1], [len(x.shape) - 1])):
        return layer(x)
    return form(layer, x)
