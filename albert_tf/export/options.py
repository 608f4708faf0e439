"""What an export can be asked for (lengths, precisions, quantization modes) and its defaults, without TensorFlow.

`albert-tf export` builds its flags from these before TensorFlow loads, so a
bad value is reported at once.
"""

DEFAULT_MAX_LENGTH = 128
# What a SavedModel's signatures compute in, named as every command's --mixed-precision names it
# (`albert_tf.precision.PRECISIONS`), less mixed_float16: a float16 export has no serving path here.
# "auto" is resolved by `saved_model.resolve_export_precision`.
EXPORT_PRECISIONS = ("auto", "float32", "mixed_bfloat16")
# TFLite's weight and activation types.
QUANTIZE_MODES = ("none", "float16", "dynamic", "int8", "int8-mixed", "16x8")
# The modes that calibrate activation ranges on real text.
CALIBRATED_MODES = ("int8", "int8-mixed", "16x8")
# What a TF-Serving server needs to run an export whose forward pass XLA must compile (`export --xla`).
XLA_SERVER_FLAG = "--xla_cpu_compilation_enabled=true"
# What a server's environment needs to run a float32 export on oneDNN's kernels where TensorFlow leaves them
# off (x86 CPUs without AVX-512); docs/deployment.md has the measurements.
ONEDNN_SERVER_ENV = "TF_ENABLE_ONEDNN_OPTS=1"


def default_max_length(run, model):
    """The max_length an export of `model` gets when none is asked for (`export` and `serve` alike).

    The fine-tuning run's max_seq_length, the length the model learned at;
    else DEFAULT_MAX_LENGTH, within the model's max_position_embeddings.

    Args:
        run: the model directory's `albert_tf.recipes.RunSettings`.
        model: the loaded model (a task model, or a bare backbone).
    """
    if run.max_seq_length is not None:
        return run.max_seq_length
    return min(DEFAULT_MAX_LENGTH, getattr(model, "backbone", model).config.max_position_embeddings)
