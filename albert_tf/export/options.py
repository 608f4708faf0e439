"""What an export can be asked for (lengths, precisions, quantization modes), without TensorFlow.

`albert-tf export` builds its flags from these before TensorFlow loads, so a
bad value is reported at once.
"""

DEFAULT_MAX_LENGTH = 128
# What the signatures compute in; "auto" is resolved by `saved_model.resolve_export_precision`.
EXPORT_PRECISIONS = ("auto", "float32", "bf16")
# TFLite's weight and activation types.
QUANTIZE_MODES = ("none", "float16", "dynamic", "int8", "int8-mixed", "16x8")
# The modes that calibrate activation ranges on real text.
CALIBRATED_MODES = ("int8", "int8-mixed", "16x8")
