"""Why `model.quantize(...)` is refused on ALBERT models, and where to go instead."""

TFLITE_QUANTIZE_COMMAND = "albert-tf export --model DIR --format tflite --quantize dynamic --out OUT_DIR"


class TFLiteQuantizationOnly:
    """Mixin: `quantize` raises, naming the TFLite export that does quantize well.

    Keras 3's `Model.quantize("int8")` swaps Dense/Embedding kernels for int8
    ones that quantize their inputs per token on every call. Measured on the
    TensorFlow backend (bench/keras_quantize.py, bench/results/keras_quantize.md)
    ALBERT-base runs 2-17x slower than in float32, with and without XLA: the
    TensorFlow CPU kernels have no fast int8 matmul, and ALBERT's shared
    weights are too small (~12M parameters) for the 4x smaller kernels to
    matter. The TFLite export's dynamic-range int8 runs integer GEMMs and is
    the fastest CPU path we have (bench/results/export_latency.md).
    """

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        raise NotImplementedError(
            f"{type(self).__name__}.quantize(mode={mode!r}) is not supported: Keras' int8 "
            "quantization runs slower than float32 on this model (bench/results/keras_quantize.md). "
            f"Quantize for deployment with the TFLite export instead: `{TFLITE_QUANTIZE_COMMAND}` "
            "(or albert_tf.export.export_tflite(model, out_dir, quantize='dynamic'); see "
            "docs/deployment.md)."
        )
