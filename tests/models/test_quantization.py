"""Keras `quantize`: our models refuse it and name the TFLite export; our layers stay correct under it."""

import keras
import numpy as np
import pytest

from albert_tf import AlbertBackbone, AlbertPretrainer
from albert_tf.cli import build_parser
from albert_tf.models import AlbertClassifier
from albert_tf.models.quantization import TFLITE_QUANTIZE_COMMAND
from helpers import backbone_batch, tiny_config

MODELS = {
    "backbone": lambda: AlbertBackbone(tiny_config()),
    "classifier": lambda: AlbertClassifier(AlbertBackbone(tiny_config()), 2),
    "pretrainer": lambda: AlbertPretrainer(AlbertBackbone(tiny_config())),
}


@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("mode", ["int8", "int4", "float8"])
def test_quantize_raises_naming_the_tflite_export(kind, mode):
    model = MODELS[kind]()
    with pytest.raises(NotImplementedError, match="--format tflite --quantize dynamic") as error:
        model.quantize(mode)
    assert f"{type(model).__name__}.quantize(mode={mode!r})" in str(error.value)


def test_named_tflite_command_parses():
    command = TFLITE_QUANTIZE_COMMAND.split()[1:]  # without the program name
    args = build_parser().parse_args(command)
    assert (args.format, args.quantize) == ("tflite", "dynamic")


@pytest.mark.slow
def test_layers_under_keras_int8_match_float():
    # Keras' own quantize, bypassing our refusal (as bench/keras_quantize.py
    # does), reaches every Dense and Embedding. The attention's query/key/value
    # then hold int8 kernels that only their own call de-scales: the fused
    # float path would read raw int8 values.
    model = AlbertBackbone(tiny_config(initializer_range=0.2))
    inputs = backbone_batch(model.config)
    expected = np.asarray(model(inputs)["sequence_output"])
    keras.Model.quantize(model, "int8")
    assert model.blocks[0][0].attention.query.quantization_mode == "int8"
    got = np.asarray(model(inputs)["sequence_output"])
    error = np.abs(got - expected).max()
    assert 0 < error <= 0.05 * np.abs(expected).max()


def test_backbone_refusal_leaves_it_usable():
    model = MODELS["backbone"]()
    inputs = backbone_batch(model.config)
    expected = np.asarray(model(inputs)["sequence_output"])
    with pytest.raises(NotImplementedError):
        model.quantize("int8")
    assert all(w.dtype == "float32" for w in model.weights)  # nothing swapped for int8
    np.testing.assert_array_equal(np.asarray(model(inputs)["sequence_output"]), expected)
