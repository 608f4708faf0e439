"""`load_pretrained`: the model a directory holds, whatever its class or format.

`save_pretrained` (in `albert_tf.models.pretrained`) writes albert-tf's own
directories. `load_pretrained` reads those, HuggingFace `save_pretrained`
directories of an ALBERT model, converted in memory as `albert-tf convert
--from hf` converts them, and keras-hub presets of an AlbertBackbone. A
model class's own `from_pretrained` loads into that class; this is for
callers that take whatever was saved.
"""

from albert_tf.model_dirs import HF, KERAS_HUB
from albert_tf.models import AlbertBackbone, AlbertPretrainer
from albert_tf.models.pretrained import (
    load_hf_dir, load_keras_hub_dir, load_saved_model, open_model_dir, warn_newly_initialized,
)


def load_hf(directory):
    """The model of a HF directory, as a `ConversionReport` (the model and its freshly initialized weights).

    AlbertForPreTraining and AlbertForMaskedLM become an `AlbertPretrainer`
    (the latter with a fresh pooler and SOP head), AlbertModel an `AlbertBackbone`.
    """

    def build(config, has_heads):
        backbone = AlbertBackbone(config)
        return AlbertPretrainer(backbone) if has_heads else backbone

    return load_hf_dir(directory, build)


def load_pretrained(directory):
    """Rebuilds the model in `directory`: albert-tf's own, a HuggingFace one, or a keras-hub preset.

    `directory` is either what `save_pretrained` (or `albert-tf convert`)
    wrote, or a HF transformers `save_pretrained` directory of an ALBERT model
    (config.json with model.safetensors, pytorch_model.bin or a sharded index
    of either, and no albert_tf.json), which is converted in memory as
    `albert-tf convert --from hf` converts it, or a hub handle such as
    `hf://albert/albert-base-v2`, downloaded first (`albert_tf.hub.resolve_model`).

    Returns:
        The model that was saved: an `AlbertBackbone`, an `AlbertPretrainer`
        or a task model. From a HF directory: an `AlbertPretrainer` for
        AlbertForPreTraining / AlbertForMaskedLM weights (the latter with a
        freshly initialized SOP head and pooler, with a warning that lists
        them), an `AlbertBackbone` for AlbertModel and for a keras-hub preset.

    Raises:
        ValueError: naming the file and what is wrong with it: missing files,
            bytes that are not UTF-8, invalid JSON, an unknown config, a
            corrupt or truncated weights file, weights that do not fit the
            config; for a HF directory also a `model_type` other than "albert"
            and tensors the converter does not know (a task head, for one).
    """
    model_dir = open_model_dir(directory)
    if model_dir.kind == HF:
        report = load_hf(model_dir.path)
        warn_newly_initialized(model_dir.path, report)
        return report.model
    if model_dir.kind == KERAS_HUB:
        return load_keras_hub_dir(model_dir.path, lambda config, has_heads: AlbertBackbone(config)).model
    return load_saved_model(model_dir)
