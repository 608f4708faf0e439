"""Why `model.quantize(...)` is refused on ALBERT models, and where to go instead."""

TFLITE_QUANTIZE_COMMAND = "albert-tf export --model DIR --format tflite --quantize dynamic --out OUT_DIR"


class TFLiteQuantizationOnly:
    """Mixin: `quantize` raises, naming the TFLite export that does quantize well.

    Keras 3's `Model.quantize("int8")` swaps Dense/Embedding kernels for int8
    ones that quantize their inputs per token on every call. On the
    TensorFlow backend (bench/keras_quantize.py, bench/results/keras_quantize.md)
    ALBERT-base then runs several times slower than float32 without XLA, and
    with XLA no faster than float32 with XLA; outputs move by ~2%. ALBERT's shared weights are small (~12M parameters for base), so
    the 4x smaller kernels buy little memory. The TFLite export's
    dynamic-range int8 runs LiteRT's integer GEMMs and is the CPU path to use.
    """

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        raise NotImplementedError(
            f"{type(self).__name__}.quantize(mode={mode!r}) is not supported: Keras' quantization "
            "is no faster than float32 on this model and moves its outputs by ~2% "
            "(int8: bench/results/keras_quantize.md). "
            f"Quantize for deployment with the TFLite export instead: `{TFLITE_QUANTIZE_COMMAND}` "
            "(or albert_tf.export.export_tflite(model, out_dir, quantize='dynamic'); see "
            "docs/deployment.md)."
        )
