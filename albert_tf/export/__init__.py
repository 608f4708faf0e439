"""Deployment: TF-Serving SavedModels and TFLite models of any albert-tf model."""

from albert_tf.export.saved_model import custom_ops, export_saved_model, load_saved_model, version_dirs
from albert_tf.export.signatures import ModelInterface, describe_model
from input_pipeline.finetuning.text_inputs import pack_texts, pack_windows, tf_pack_texts, tf_pack_windows
from input_pipeline.packing import truncated_lengths
from albert_tf.export.tflite import QUANTIZE_MODES, export_tflite
