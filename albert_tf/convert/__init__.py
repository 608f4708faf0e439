"""Checkpoint conversion: HF transformers, original TF1 ALBERT and keras-hub presets <-> albert-tf."""

from albert_tf.convert.hf import convert_from_hf, convert_to_hf, from_hf, hf_kind, to_hf
from albert_tf.convert.keras_hub import convert_to_keras_hub, save_keras_hub_preset
from albert_tf.convert.tf1 import convert_from_tf1, from_tf1, load_tf1
