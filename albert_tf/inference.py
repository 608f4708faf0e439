"""Forward passes for predictions: weights frozen into the graph as constants (`FrozenForward`,
`FrozenPredictions`), or compiled by XLA on a few padded shapes (`CompiledPredictions`)."""

import numpy as np
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
from tensorflow.python.util import _pywrap_util_port

from albert_tf.layers.graph_forms import optimizer_forms
from input_pipeline import features

# A GraphDef is one protocol buffer, which cannot exceed 2 GiB; weights past this
# stay variables (ALBERT-xxlarge in float32 is 0.9 GiB).
MAX_FROZEN_BYTES = 1536 * 2**20


class FrozenForward:
    """Calls a Keras model in inference mode with its weights baked into the graph as constants.

    Why: under mixed_bfloat16 every float32 weight is cast to bfloat16 each
    time the graph runs; with constants, TensorFlow's graph optimizer folds
    those casts once, and oneDNN keeps its own layout of constant weights
    between calls. The gain in mixed_bfloat16 on a CPU with bfloat16 units:
    bench/results/export_latency.md and model_speed.md. The model is traced
    in `optimizer_forms`: attention's three projections as one matmul and
    LayerNorm as a batch norm (`layer_norm_as_fused_batch_norm`), the forms
    the graph optimizer fuses into the fewest oneDNN kernels (LayerNorm only
    where TensorFlow runs oneDNN, its default on x86).

    Shapes: the first call's input shapes get a function traced for exactly
    them, the fastest form. A later call with other shapes switches to one
    function for every batch size and length, traced once, so a stream of
    batches of varying length costs two traces, not one per shape.

    The weights are read when a function is traced: later changes to the
    model (training, `load_weights`, LoRA merges) are not seen. Build a new
    `FrozenForward` after changing the model. A model whose weights exceed
    `MAX_FROZEN_BYTES` is called with its variables instead (`frozen` is False).

    Args:
        model: a Keras model whose inputs are a dict of integer tensors, such as
            an `AlbertBackbone` or a task model.

    Call arguments:
        inputs: dict of arrays shaped like the model's inputs, e.g. token_ids
            (batch, seq); cast to the model's input dtypes.

    Returns:
        The model's outputs (a dict, or a single array) as NumPy arrays.
    """

    def __init__(self, model):
        self.model = model
        self.frozen = sum(int(np.prod(w.shape)) * tf.as_dtype(w.dtype).size for w in model.weights) <= MAX_FROZEN_BYTES
        self._dtypes = {name: tf.as_dtype(spec.dtype) for name, spec in _input_specs(model).items()}
        self._call = tf.function(lambda batch: model(batch, training=False))
        self.functions = []  # the concrete functions traced so far (frozen where `frozen`), to inspect
        self._static_shapes = None
        self._static = None
        self._dynamic = None

    def __call__(self, inputs):
        missing = sorted(set(self._dtypes) - set(inputs))
        if missing:
            raise ValueError(f"`inputs` lacks {missing}: the model takes {sorted(self._dtypes)}. "
                             f"Received keys: {sorted(inputs)}.")
        batch = {name: tf.convert_to_tensor(np.asarray(inputs[name]), dtype) for name, dtype in self._dtypes.items()}
        shapes = {name: tuple(t.shape) for name, t in batch.items()}
        if self._static is None:
            self._static_shapes, self._static = shapes, self._trace({n: tf.TensorSpec(s, batch[n].dtype)
                                                                     for n, s in shapes.items()})
        if shapes == self._static_shapes:
            function = self._static
        else:
            if self._dynamic is None:
                self._dynamic = self._trace({n: tf.TensorSpec([None] * len(s), batch[n].dtype)
                                             for n, s in shapes.items()})
            function = self._dynamic
        return tf.nest.map_structure(lambda t: t.numpy(), function(batch))

    def graph_function(self, specs):
        """A function of an input dict of tensors for `specs`, to call inside a `tf.function`.

        What exports use: the returned function runs the model's graph with its
        weights as constants (where `frozen`; else on its variables), and a
        `tf.function` calling it saves those constants with it.

        Args:
            specs: {input name: tf.TensorSpec}, e.g. int32 (None, None) for any
                batch and length; every model input.

        Returns:
            A function of {input name: tensor} (cast to the model's input dtypes)
            returning the model's outputs as tensors.
        """
        missing = sorted(set(self._dtypes) - set(specs))
        if missing:
            raise ValueError(f"`specs` lacks {missing}: the model takes {sorted(self._dtypes)}. "
                             f"Received keys: {sorted(specs)}.")
        traced = self._trace({name: tf.TensorSpec(specs[name].shape, dtype) for name, dtype in self._dtypes.items()})
        return lambda batch: traced({name: tf.cast(batch[name], dtype) for name, dtype in self._dtypes.items()})

    def _trace(self, specs):
        """A function of the input dict for `specs`: frozen, or the variables' graph where freezing is off."""
        # Without oneDNN the batch norm form runs as TensorFlow's own batch norm,
        # slower than Keras' LayerNorm (docs/research/benchmarks.md).
        layer_norm = layer_norm_as_fused_batch_norm if _pywrap_util_port.IsMklEnabled() else None
        with optimizer_forms(layer_norm=layer_norm):
            concrete = self._call.get_concrete_function(specs)
        if not self.frozen:
            self.functions.append(concrete)
            return concrete
        frozen = convert_variables_to_constants_v2(concrete)
        self.functions.append(frozen)
        structure = concrete.structured_outputs
        # The frozen function takes and returns flat lists in tf.nest order (a dict's sorted keys).
        return lambda batch: tf.nest.pack_sequence_as(structure, frozen(*tf.nest.flatten(batch)))


class FrozenPredictions:
    """A task model as `task.predictions` and `predict_examples` use it, with its forward passes frozen.

    `predict_on_batch` runs a `FrozenForward`; every other attribute (label
    names, the output structure) is the task model's own.

    Args:
        model: a task model (e.g. `AlbertClassifier`), which must not change
            while this is used.
    """

    def __init__(self, model):
        self.model = model
        self.forward = FrozenForward(model)

    def predict_on_batch(self, batch):
        return self.forward(batch)

    def predict(self, dataset, verbose=0):
        """Outputs for every batch of a tf.data.Dataset of input dicts, concatenated (Keras' `predict`)."""
        outputs = [self.forward(x[0] if isinstance(x, tuple) else x) for x in dataset.as_numpy_iterator()]
        return {k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]}

    def __getattr__(self, name):
        return getattr(self.model, name)


class CompiledPredictions:
    """A task model as `predict_examples` uses it, its forward pass compiled by XLA on padded shape buckets.

    Why: on CPUs where TensorFlow runs Eigen rather than oneDNN (those with
    AVX2 alone), XLA's forward pass is faster than the frozen graph's
    (`albert_tf.precision.choose_precision`). XLA compiles one program per
    input shape, and batches padded to their own longest would each have a
    new one; so each batch is padded up to a bucket, rows to a power of two
    and length to the next of 8, 12, 16, 24, 32, 48, ... (powers of two and
    1.5 times them), within the model's max_position_embeddings. A batch then
    pays at most 1.5x its longest in length, and lengths up to 512 compile at
    most 13 programs per row count. Padding rows and pieces are masked out
    and cut from the outputs (the piece axis is cut by `predict_examples`).

    Args:
        model: a task model (e.g. `AlbertClassifier`), whose inputs are the
            backbone inputs, (batch, seq) or (batch, choices, seq).
    """

    def __init__(self, model):
        self.model = model
        self.max_length = getattr(model, "backbone", model).config.max_position_embeddings
        self._dtypes = {name: tf.as_dtype(spec.dtype) for name, spec in _input_specs(model).items()}
        self._call = tf.function(lambda batch: model(batch, training=False), jit_compile=True)
        self.shapes = set()  # the (rows, length) buckets compiled so far, to inspect

    def predict_on_batch(self, batch):
        rows, length = np.shape(batch[features.TOKEN_IDS])[0], np.shape(batch[features.TOKEN_IDS])[-1]
        padded_rows, padded_length = 1 << (rows - 1).bit_length(), min(length_bucket(length), self.max_length)
        self.shapes.add((padded_rows, padded_length))
        padded = {}
        for name, dtype in self._dtypes.items():
            array = np.asarray(batch[name])
            widths = [(0, padded_rows - rows)] + [(0, 0)] * (array.ndim - 1)
            if name in features.BACKBONE_INPUTS:
                widths[-1] = (0, padded_length - length)
            # 0 is the padding piece's id, its segment and its mask alike.
            padded[name] = tf.constant(np.pad(array, widths), dtype)
        return tf.nest.map_structure(lambda t: t.numpy()[:rows], self._call(padded))

    def predict(self, dataset, verbose=0):
        """Outputs for every batch of a tf.data.Dataset of input dicts, concatenated (Keras' `predict`)."""
        outputs = [self.predict_on_batch(x[0] if isinstance(x, tuple) else x) for x in dataset.as_numpy_iterator()]
        return {k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]}

    def __getattr__(self, name):
        return getattr(self.model, name)


def length_bucket(length, smallest=8):
    """The padded length XLA compiles for `length` pieces: the first of 8, 12, 16, 24, 32, 48, ... >= length."""
    bucket = smallest
    while bucket < length:
        # Powers of two and 1.5 times them: from 2^k up by 1.5, from 1.5 * 2^k up by 4/3.
        bucket = bucket * 3 // 2 if bucket & (bucket - 1) == 0 else bucket * 4 // 3
    return bucket


def layer_norm_as_fused_batch_norm(layer, x):
    """A float32 Keras LayerNormalization over the last axis of `x`, written as the batch norm TensorFlow fuses.

    Normalizing each of the n rows of x over its last axis is a training-mode
    batch norm of x reshaped to (1, n, H, 1) in NCHW: n channels of H values
    each, scale 1 and offset 0, then gamma and beta. Written so, with
    TensorFlow's oneDNN kernels (its default on x86) the graph optimizer
    rewrites the whole LayerNorm into one `_MklLayerNorm` op, which keeps the
    batch norm's epsilon. Keras 3's own form (about ten elementwise and
    reduction ops) it leaves as it is, and the moments-based forms it does
    fuse get TF 2.21's default epsilon of 0.001 in place of the layer's (a
    relative error of about 5e-4 for ALBERT's 1e-12). Without oneDNN it would
    run as TensorFlow's own batch norm, slower than Keras' form, so
    `FrozenForward` uses it only where oneDNN is on: a SavedModel is written
    for the TensorFlow that exports it (as its precision is for its CPU).

    Args:
        layer: a built `keras.layers.LayerNormalization` with gamma and beta.
        x: float32 tensor (..., H).

    Returns:
        Float32 tensor shaped like x.
    """
    shape = tf.shape(x)
    rows = tf.reduce_prod(shape[:-1])
    # The optimizer fuses only a batch norm whose scale and offset are `Fill`
    # ops; with static shapes its constant folding would turn them into
    # constants first. A placeholder with a default is never folded.
    channels = tf.raw_ops.PlaceholderWithDefault(input=tf.reshape(rows, [1]), shape=[1])
    y, _, _ = tf.compat.v1.nn.fused_batch_norm(
        tf.reshape(x, tf.stack([1, rows, x.shape[-1], 1])), tf.fill(channels, 1.0), tf.fill(channels, 0.0),
        epsilon=layer.epsilon, data_format="NCHW", is_training=True,
    )
    return tf.reshape(y, shape) * layer.gamma + layer.beta


def _input_specs(model):
    """{input name: KerasTensor} of a functional model whose inputs are a dict."""
    inputs = model.input
    if not isinstance(inputs, dict):
        raise ValueError(f"FrozenForward takes a model whose inputs are a dict of tensors. "
                         f"Received a model with inputs {inputs!r}.")
    return inputs

