"""Deployment: TF-Serving SavedModels and TFLite models of any albert-tf model.

The names load on first use (PEP 562), so that a module below, such as the
serving constants `albert-tf serve` reads its flags' defaults from, loads
without TensorFlow (a command line's errors come back before it loads).
"""

from albert_tf.utils.lazy import lazy_names

# Public name -> module that defines it.
_EXPORTS = {
    "custom_ops": "albert_tf.export.saved_model",
    "export_saved_model": "albert_tf.export.saved_model",
    "load_saved_model": "albert_tf.export.saved_model",
    "version_dirs": "albert_tf.export.saved_model",
    "ModelInterface": "albert_tf.export.signatures",
    "describe_model": "albert_tf.export.signatures",
    "pack_texts": "input_pipeline.finetuning.text_inputs",
    "pack_windows": "input_pipeline.finetuning.text_inputs",
    "tf_pack_texts": "input_pipeline.finetuning.text_inputs",
    "tf_pack_windows": "input_pipeline.finetuning.text_inputs",
    "truncated_lengths": "input_pipeline.packing",
    "QUANTIZE_MODES": "albert_tf.export.options",
    "export_tflite": "albert_tf.export.tflite",
}

__all__, __getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
